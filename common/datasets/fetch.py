"""Public datasets a user trains on, fetched from their official address and prepared.

`DATASETS` holds one `PublicDataset` per name:

- `spa-eng` (`seq2seq fetch`): TensorFlow's copy of the Tatoeba pairs, prepared as
  `train.tsv`, `valid.tsv`, `test.tsv` for `--dataset tsv` (`common.datasets.spa_eng`);
- `coco-captions` (`captioner fetch`): images.cocodataset.org, prepared as `annotations/` and
  `{split}{year}/` for `--dataset coco` (`common.datasets.coco_captions`).

`fetch(name, out, ...)` downloads (or, with `local`, takes) each file, checks its size and
SHA-256 before anything reads it (`common.datasets.download`), prepares `out`, and writes
`out/FETCHED.json`: the dataset, the files with the SHA-256 each was checked with, the options
and what was written. A folder holding what the dataset would write (a user's own
`train.tsv`, say) is refused unless an earlier fetch of the same dataset prepared it, or
started to (`FETCHING.json`, written first and removed at the end, lets an interrupted fetch
run again), so nobody's files are replaced. On the command line it is the `fetch` sub-command of both `captioner`
and `seq2seq` (`fetch_subcommand`); nothing here imports TensorFlow or Keras.

Example:
    seq2seq fetch spa-eng --out data/spa-eng
    captioner fetch coco-captions --out data/coco --split val --max-images 500
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common import cli
from common.datasets import coco_captions, spa_eng
from common.datasets.download import Fetcher, RemoteFile, parse_sha256_overrides
from common.errors import UserError
from common.registry import Registry


@dataclass(frozen=True)
class Option:
    """A dataset's own command-line option: its flag, keyword and `add_argument` settings."""

    flag: str
    keyword: str
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PublicDataset:
    """A public dataset: where it comes from and how it is prepared.

    Args:
        name: what `fetch NAME` takes.
        summary: one line for `--help`.
        licence: the licence and attribution the data comes with.
        archive: the main file (what a `--from FILE` stands for).
        files: every recorded file it may use, with size and SHA-256 where known.
        prepare: `prepare(fetcher, out, **options) -> dict` summary.
        options: its own command-line options.
        next_step: the command that trains on the prepared folder (`{out}` filled in).
        writes: glob patterns of the entries `prepare` writes at the top of its folder.
    """

    name: str
    summary: str
    licence: str
    archive: RemoteFile
    files: tuple[RemoteFile, ...]
    prepare: Callable[..., dict]
    options: tuple[Option, ...] = ()
    next_step: str = ""
    writes: tuple[str, ...] = ()


#: The record of a finished fetch, and the marker of one under way, in the prepared folder.
RECORD = "FETCHED.json"
UNDER_WAY = "FETCHING.json"


DATASETS = Registry("public dataset")
DATASETS.add("spa-eng", PublicDataset(
    name="spa-eng",
    summary="Tatoeba English-Spanish sentence pairs (TensorFlow's spa-eng.zip, 2.6 MB)",
    licence="CC-BY 2.0 France; attribution: tatoeba.org and manythings.org/anki",
    archive=spa_eng.ARCHIVE,
    files=(spa_eng.ARCHIVE,),
    prepare=spa_eng.prepare,
    options=(Option("--seed", "seed", {
        "type": int, "default": 0, "help": "spa-eng: the seed of the train/valid/test split"}),),
    next_step="seq2seq train --dataset tsv --data {out} --arch transformer --preset spa-eng-cpu "
              "--out runs/spa-eng-transformer",
    writes=("train.tsv", "valid.tsv", "test.tsv", "SOURCE-about.txt"),
))
DATASETS.add("coco-captions", PublicDataset(
    name="coco-captions",
    summary="MS-COCO captions and images from images.cocodataset.org",
    licence="annotations CC-BY 4.0; each image its own Flickr licence (see its entry)",
    archive=coco_captions.annotations_archive("2017"),
    files=tuple(coco_captions.FILES.values()),
    prepare=coco_captions.prepare,
    options=(
        Option("--year", "year", {"choices": coco_captions.YEARS, "default": "2017",
                                  "help": "coco-captions: the release"}),
        Option("--split", "splits", {"action": "append", "choices": coco_captions.SPLITS,
                                     "help": "coco-captions: a split to fetch, repeatable "
                                             "(default: train and val)"}),
        Option("--max-images", "max_images", {
            "type": cli.positive_int, "metavar": "N",
            "help": "coco-captions: only the first N captioned images of each split, each "
                    "downloaded on its own instead of the split's zip"}),
        Option("--instances", "instances", {
            "action": "store_true",
            "help": "coco-captions: also the object boxes (instances_*.json), for attention "
                    "correctness"}),
    ),
    next_step="captioner train --dataset coco --data-dir {out} --preset coco --out runs/coco",
    writes=("annotations", *(f"{split}{year}" for split in coco_captions.SPLITS
                             for year in coco_captions.YEARS)),
))


def fetch(name: str, out: str | Path, local: str | Path | None = None,
          sha256: Sequence[str] | None = None, downloads: str | Path | None = None,
          progress: bool = True, **options) -> dict:
    """Fetch and prepare the dataset `name` into `out`.

    Args:
        name: a name in `DATASETS`.
        out: the folder to prepare (created).
        local: a folder of local copies, or the main archive itself; nothing is downloaded.
        sha256: `HEX` (the main archive) or `NAME=HEX`: checksums replacing the recorded ones.
        downloads: where downloads are kept (default `out/downloads`).
        progress: progress bars on a terminal.
        **options: the dataset's own options (`seed`; `year`, `splits`, `max_images`,
            `instances`); None values take the defaults.

    Returns:
        What `FETCHED.json` holds.

    Raises:
        UserError: an unknown name, a missing local copy, a failed download or check.
    """
    dataset: PublicDataset = DATASETS.get(name)
    overrides = parse_sha256_overrides(list(sha256 or []), dataset.archive.name)
    known = {remote.name for remote in dataset.files}
    unused = sorted(set(overrides) - known)
    if unused:
        raise UserError(f"--sha256 names {', '.join(unused)}, which {name} does not use "
                            f"(it uses {', '.join(sorted(known))})")
    out = Path(out)
    for folder, flag in ((out, "--out"), (Path(downloads) if downloads else None, "--downloads")):
        if folder is not None and folder.exists() and not folder.is_dir():
            raise UserError(f"{flag} {folder} is a file; expected a folder")
    fetcher = Fetcher(Path(downloads) if downloads else out / "downloads",
                      local=None if local is None else Path(local),
                      archive_name=dataset.archive.name, overrides=overrides,
                      progress=progress)
    _check_out(dataset, out)
    options = {key: value for key, value in options.items() if value is not None}
    new = _new_folders(out, fetcher.downloads)
    before = {path.name for path in out.iterdir()} if out.is_dir() else set()
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / UNDER_WAY).write_text(json.dumps({"dataset": name}) + "\n", encoding="utf-8")
    except OSError as exc:
        _remove_if_empty(new)
        raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc}); expected a "
                        "writable folder") from None
    try:
        prepared = dataset.prepare(fetcher, out, **options)
    except BaseException:
        # A fetch that fails (offline, say) leaves no empty folder it made behind it.
        _remove_if_empty([path for path in out.iterdir() if path.name not in before])
        if not _written(dataset, out):  # refused before writing (a checksum, an option)
            (out / UNDER_WAY).unlink(missing_ok=True)
        _remove_if_empty(new)
        raise
    record = {
        "dataset": name,
        "licence": dataset.licence,
        "fetched": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "from": str(local) if local is not None else "download",
        "files": {file: {"sha256": digest} for file, digest in sorted(fetcher.checked.items())},
        **prepared,
    }
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    (out / UNDER_WAY).unlink()
    return record


def _check_out(dataset: PublicDataset, out: Path) -> None:
    """Refuse an `out` whose files `fetch` would replace, unless `fetch` of this dataset made
    them (its record, or its marker of a fetch that did not finish), or one another dataset
    was fetched into (its record)."""
    if not out.is_dir():
        return
    record, marker = _dataset_of(out / RECORD), _dataset_of(out / UNDER_WAY)
    if record not in (None, dataset.name):
        raise UserError(f"--out {out} was prepared by `fetch {record}` ({RECORD}); expected a "
                        f"new or empty folder for {dataset.name}")
    if dataset.name in (record, marker):
        return
    in_the_way = _written(dataset, out)
    if in_the_way:
        found = (f"an unreadable {RECORD}" if (out / RECORD).exists()
                 else f"no {RECORD} of an earlier fetch")
        raise UserError(f"--out {out} holds {', '.join(in_the_way[:4])}, which `fetch "
                        f"{dataset.name}` would replace, and {found}; expected a new or empty "
                        "folder (or move those away)")


def _new_folders(*folders: Path) -> list[Path]:
    """`folders` and their ancestors that do not exist yet (what `mkdir(parents=True)` makes)."""
    new = []
    for folder in folders:
        for path in (folder, *folder.parents):
            if path.exists():
                break
            new.append(path)
    return new


def _remove_if_empty(paths: Sequence[Path]) -> None:
    """Remove each of `paths` that is an empty folder, the deepest first."""
    for path in sorted(set(paths), key=lambda path: len(path.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            try:
                path.rmdir()
            except OSError:  # not empty, or not ours to remove
                pass


def _written(dataset: PublicDataset, out: Path) -> list[str]:
    """The entries of `out` that `dataset` writes (by its `writes` patterns), sorted."""
    return sorted({path.name for pattern in dataset.writes for path in out.glob(pattern)})


def _dataset_of(path: Path) -> str | None:
    """The dataset a fetch record or marker names; None when it is missing or unreadable."""
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("dataset")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def fetch_subcommand(names: Sequence[str]) -> cli.Subcommand:
    """The `fetch` sub-command of a command line, offering the datasets `names`."""
    datasets = [DATASETS.get(name) for name in names]
    offered = {option.flag: option for dataset in datasets for option in dataset.options}

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name", choices=[d.name for d in datasets],
                            help="; ".join(f"{d.name}: {d.summary}" for d in datasets))
        parser.add_argument("--out", required=True, help="the folder to prepare")
        parser.add_argument("--from", dest="local", metavar="FILE_OR_DIR",
                            help="use local copies instead of downloading: a folder holding "
                                 "the files under their names, or the main archive itself")
        parser.add_argument("--sha256", action="append", metavar="[NAME=]HEX",
                            help="a checksum replacing the recorded one (and its size), for the "
                                 "main archive or the file NAME; repeatable")
        parser.add_argument("--downloads", metavar="DIR",
                            help="where downloads are kept (default: OUT/downloads)")
        for option in offered.values():
            parser.add_argument(option.flag, dest=option.keyword, **option.settings)

    def run(args: argparse.Namespace) -> int:
        dataset = DATASETS.get(args.name)
        own = {option.keyword: getattr(args, option.keyword) for option in dataset.options}
        for flag, option in offered.items():
            if option.keyword not in own and getattr(args, option.keyword) not in (None, False):
                raise UserError(f"{flag} is not an option of {args.name}")
        if "splits" in own and own["splits"]:
            own["splits"] = tuple(own["splits"])
        record = fetch(args.name, args.out, local=args.local, sha256=args.sha256,
                       downloads=args.downloads, **own)
        for file, checked in record["files"].items():
            print(f"{file}: SHA-256 {checked['sha256']}")
        print(f"{args.name}: prepared {args.out} ({json.dumps(_counts(record))}); "
              f"licence: {dataset.licence}")
        if dataset.next_step:
            print("next: " + dataset.next_step.format(out=args.out))
        return cli.EXIT_OK

    return cli.Subcommand(
        "fetch", "download a public dataset, check its checksum and prepare it for train",
        add_arguments, run, uses_tensorflow=False, runs_on_jax=True)


def _counts(record: dict) -> dict:
    if "pairs" in record:
        return record["pairs"]
    return {split: counts["images"] for split, counts in record.get("splits", {}).items()}
