"""A prepared folder: tokenized, bucketed training data that a trainer reads without TensorFlow.

`prepare_translation(config, out_dir)` and `prepare_captions(config, out_dir)` read the raw
data with the families' own loaders (`seq2seq.datasets`, `captioner.datasets`; TensorFlow may
be used here), build the vocabularies as `train` does, and write:

```
OUT/prepared.json       {"format", "family", "vocabularies": {name: file}, "splits": {...},
                         "bucket_width"}: what the folder holds
OUT/config.json         the family's run config, as `seq2seq train` / `captioner train` write it
OUT/vocab*.txt          the vocabularies, under the run directory's file names
OUT/train.npz           the training split (and `valid.npz` when the dataset has one)
```

A translation split (`B` pairs of a bucket, `W` its padded length, a multiple of
`bucket_width`): for each bucket, `source.W`, `target_in.W`, `target_out.W` (and
`source_copy.W` for a copying translator), `(B, W)` int32 padded with 0 — exactly the ids
`seq2seq.datasets.make_dataset` batches (`<start>` + target; target + `<end>`). A pair goes
to the bucket of `max(len(source), len(target_in))` rounded up to the width.

A caption split (`N` images, `C` captions): `images` `(N, H, W, 3)` uint8, resized to the
encoder's `image_size` by `captioner.datasets.make_image_dataset` and rounded; `owner` `(C,)`
int32 the image of each caption; `caption_in` and `caption_out` `(C, max_length)` int32, as
`captioner.datasets.make_dataset(pad_to_max_length=True)` gives them. Features are not cached:
a frozen encoder (`cache_features`) runs forward on the images at every step.

`load_prepared(path)` reads the folder with NumPy and the standard library only (no
TensorFlow, no Keras), and `Prepared.batches` serves reproducible, shuffled batches of fixed
shapes (one shape per bucket) for `common.training.jax_trainer`.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.config import atomic_write_text, from_dict, save_json, to_dict
from common.errors import DataError, UserError
from common.text.specials import check_tokens

FORMAT = 1
MANIFEST = "prepared.json"
CONFIG_FILE = "config.json"
BUCKET_WIDTH = 8
TRANSLATION_FIELDS = ("source", "target_in", "target_out", "source_copy")
CAPTION_FIELDS = ("caption_in", "caption_out")


# -- writing (may use TensorFlow) --------------------------------------------------------------

def prepare_translation(config: Any, out_dir: str | os.PathLike,
                        bucket_width: int = BUCKET_WIDTH, verbose: int = 1) -> Path:
    """Write the prepared folder of a translator run config (`seq2seq.config.RunConfig`).

    The pairs come from `seq2seq.datasets.load_pairs` (training pairs longer than
    `config.length_limit` tokens dropped, as `seq2seq train` does) and the vocabularies from
    `build_vocabularies`. A `valid` split is written when the dataset has one.

    Returns:
        The folder.
    """
    from seq2seq.datasets import build_vocabularies, load_pairs

    data = config.data
    if data.dataset == "tsv" and not data.data:
        raise UserError("--dataset tsv needs --data PATH (a .tsv file or a folder of them)")
    if getattr(data, "vocab", "word") != "word":
        raise UserError(f"--vocab {data.vocab}: the prepared folder holds word vocabularies "
                        "only for now; prepare with --vocab word")

    def pairs_of(split: str):
        return load_pairs(data.dataset, path=data.data, split=split, reverse=data.reverse,
                          max_length=config.length_limit, seed=0, lowercase=data.lowercase)

    train = pairs_of("train")
    if not train.sources:
        raise DataError(f"no training pairs in {data.data or data.dataset}")
    source_vocab, target_vocab = build_vocabularies(train, min_count=data.min_count,
                                                    max_size=data.max_vocab)
    splits = {"train": train}
    if data.dataset != "tsv" or Path(data.data).is_dir():
        try:
            valid = pairs_of("valid")
        except UserError:
            valid = None
        if valid is not None and valid.sources:
            splits["valid"] = valid
    out = _start(out_dir)
    files = vocab_files("seq2seq")
    with _writing(out):
        source_vocab.save(out / files["source"])
        target_vocab.save(out / files["target"])
    summary = {}
    for name, pairs in splits.items():
        arrays = _translation_arrays(pairs, source_vocab, target_vocab, config.model.copy)
        _save_npz(out / f"{name}.npz", _bucketed(arrays, bucket_width))
        summary[name] = {"examples": len(pairs.sources), "dropped": pairs.dropped}
    _finish(out, "seq2seq", config, files, summary, bucket_width)
    if verbose:
        print(f"prepared {out}: " + ", ".join(f"{k} {v['examples']} pairs"
                                              for k, v in summary.items())
              + f"; vocabularies {len(source_vocab)} source, {len(target_vocab)} target tokens",
              flush=True)
    return out


def prepare_captions(config: Any, out_dir: str | os.PathLike, batch_size: int = 64,
                     verbose: int = 1) -> Path:
    """Write the prepared folder of a captioner run config (`captioner.config.CaptionerRunConfig`).

    The split comes from `captioner.datasets.load_split`, the vocabulary from
    `build_vocabulary`, the caption ids from `encode_captions` and the resized images from
    `make_image_dataset` (images it cannot decode are left out with their captions).

    Returns:
        The folder.
    """
    from captioner.datasets import load_split
    from captioner.datasets.pipeline import build_vocabulary
    from captioner.train import check_config

    check_config(config)
    data = config.data
    train = load_split(data.dataset, "train", data.data_dir, **data.options)
    vocab = build_vocabulary(train, min_count=data.min_count)
    splits = {"train": train}
    try:
        valid = load_split(data.dataset, "valid", data.data_dir, **data.options)
    except UserError:
        valid = None
    if valid is not None and len(valid) and valid.num_captions:
        splits["valid"] = valid
    out = _start(out_dir)
    files = vocab_files("captioner")
    with _writing(out):
        vocab.save(out / files["words"])
    summary = {}
    for name, split in splits.items():
        arrays = _caption_arrays(split, vocab, config.encoder.image_size, data.max_length,
                                 batch_size)
        _save_npz(out / f"{name}.npz", arrays)
        summary[name] = {"examples": int(len(arrays["owner"])),
                         "images": int(len(arrays["images"]))}
    _finish(out, "captioner", config, files, summary, None)
    if verbose:
        print(f"prepared {out}: " + ", ".join(
            f"{k} {v['images']} images, {v['examples']} captions" for k, v in summary.items())
            + f"; vocabulary {len(vocab)} tokens", flush=True)
    return out


def vocab_files(family: str) -> dict[str, str]:
    """The vocabularies of a `family` run directory: name -> file name (the names `Prepared`
    uses: seq2seq `source`, `target`; captioner `words`), `RunDir`'s names."""
    from common.training.run_dir import RunDir

    if family == "seq2seq":
        return {"source": RunDir.source_vocab, "target": RunDir.target_vocab}
    if family == "captioner":
        return {"words": RunDir.vocab}
    raise UserError(f"unknown family {family!r}; expected seq2seq or captioner")


def _translation_arrays(pairs: Any, source_vocab: Any, target_vocab: Any,
                        copy: bool) -> dict[str, list[list[int]]]:
    """The id rows of `seq2seq.datasets.make_dataset`, unpadded."""
    start, end = target_vocab.start_id, target_vocab.end_id
    targets = [target_vocab.encode(tokens) for tokens in pairs.target_tokens]
    rows = {"source": [source_vocab.encode(t) for t in pairs.source_tokens],
            "target_in": [[start] + ids for ids in targets]}
    if copy:
        from seq2seq.copying import copy_ids, extend_target_ids

        targets = [extend_target_ids(target, source, target_vocab)
                   for source, target in zip(pairs.source_tokens, pairs.target_tokens)]
        rows["source_copy"] = [copy_ids(t, target_vocab) for t in pairs.source_tokens]
    rows["target_out"] = [ids + [end] for ids in targets]
    return rows


def _bucketed(rows: dict[str, list[list[int]]], width: int) -> dict[str, np.ndarray]:
    """`{f"{field}.{W}": (B_W, W) int32}`: each pair padded to its bucket's length `W`."""
    lengths = [max(len(s), len(t)) for s, t in zip(rows["source"], rows["target_in"])]
    bounds = np.array([width * max(1, math.ceil(n / width)) for n in lengths])
    arrays = {}
    for bound in sorted(set(bounds.tolist())):
        members = np.flatnonzero(bounds == bound)
        for field, field_rows in rows.items():
            padded = np.zeros((len(members), bound), np.int32)
            for i, index in enumerate(members):
                padded[i, : len(field_rows[index])] = field_rows[index]
            arrays[f"{field}.{bound}"] = padded
    return arrays


def _caption_arrays(split: Any, vocab: Any, image_size: Any, max_length: int,
                    batch_size: int) -> dict[str, np.ndarray]:
    from captioner.datasets.pipeline import encode_captions, make_image_dataset

    images, kept = [], []
    for batch in make_image_dataset(split, image_size, batch_size):
        images.append(np.clip(np.round(batch["image"].numpy()), 0, 255).astype(np.uint8))
        kept.extend(int(i) for i in batch["index"].numpy())
    if not kept:
        raise DataError(f"{split.name}/{split.split}: no image could be read")
    position = {index: i for i, index in enumerate(kept)}
    owner, captions = [], []
    for index in kept:
        for caption in split[index].captions:
            owner.append(position[index])
            captions.append(caption)
    ids = encode_captions(captions, vocab).to_list()
    caption_in = np.zeros((len(ids), max_length), np.int32)
    caption_out = np.zeros((len(ids), max_length), np.int32)
    for i, row in enumerate(ids):
        row = row[: max_length - 1]
        caption_in[i, : len(row) + 1] = [vocab.start_id] + row
        caption_out[i, : len(row) + 1] = row + [vocab.end_id]
    return {"images": np.concatenate(images), "owner": np.asarray(owner, np.int32),
            "caption_in": caption_in, "caption_out": caption_out}


@contextmanager
def _writing(out: Path):
    """Writes into the prepared folder `out`: a failed one (no such parent, no permission, a
    full disk) is one line naming the folder, not a traceback."""
    from common.training.run_dir import write_failure

    try:
        yield
    except OSError as exc:
        raise write_failure(out, exc, "folder for the prepared data") from None


def _start(out_dir: str | os.PathLike) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; expected a folder for the prepared data")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(f"{out} is not empty and holds no prepared data; expected a new or "
                        "empty folder")
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)  # incomplete until written again, last
    return out


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with _writing(path.parent):
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)


def _finish(out: Path, family: str, config: Any, vocabularies: dict[str, str],
            summary: dict[str, Any], bucket_width: int | None) -> None:
    from common.training.config import TrainingConfig

    config_dict = to_dict(config)
    config_dict["training"] = to_dict(from_dict(TrainingConfig, config.training))
    manifest = {"format": FORMAT, "family": family, "vocabularies": vocabularies,
                "splits": summary, "bucket_width": bucket_width}
    with _writing(out):
        save_json(out / CONFIG_FILE, config_dict)
        atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")


# -- reading (NumPy only) ----------------------------------------------------------------------

@dataclass(frozen=True)
class Prepared:
    """A prepared folder in memory (see the module docstring).

    Args:
        path: the folder.
        family: `"seq2seq"` or `"captioner"`.
        config: the run config as a dict (`config.json`).
        vocabularies: name -> its tokens (seq2seq: `source`, `target`; captioner: `words`).
        vocab_files: name -> its file name in the folder.
        splits: split name -> its arrays.
    """

    path: Path
    family: str
    config: dict[str, Any]
    vocabularies: dict[str, list[str]]
    vocab_files: dict[str, str]
    splits: dict[str, dict[str, np.ndarray]]

    def num_examples(self, split: str = "train") -> int:
        arrays = self._split(split)
        if self.family == "captioner":
            return len(arrays["owner"])
        return sum(len(v) for k, v in arrays.items() if k.startswith("source."))

    def batches(self, split: str, batch_size: int, seed: int, epoch: int = 0,
                repeat: bool = False, remainder: str = "drop") -> Iterator[dict[str, np.ndarray]]:
        """Shuffled batches of exactly `batch_size` rows (so the shapes are one per bucket),
        the same for the same `seed` and `epoch`. Translation: `source`, `target_in`,
        `target_out` (`source_copy`) int32; captions: `image` float32 in [0, 255],
        `caption_in`, `caption_out` int32.

        Args:
            repeat: go on with the next passes (shuffled anew) forever.
            remainder: what becomes of a bucket's last rows that do not fill a batch:
                `"drop"` (each pass drops other ones; a bucket smaller than `batch_size` is
                never served) or `"pad"` (served, with all-zero rows after them: padding
                ids with no target token, so they add nothing to a loss summed over the
                tokens, and `real_rows` does not count them).
        """
        if remainder not in ("drop", "pad"):
            raise ValueError(f"remainder {remainder!r}; expected 'drop' or 'pad'")
        arrays = self._split(split)

        def chunks(order):
            stop = len(order) if remainder == "pad" else len(order) - batch_size + 1
            return [order[i : i + batch_size] for i in range(0, max(stop, 0), batch_size)]

        for rep in range(2**62 if repeat else 1):
            rng = np.random.default_rng([seed, epoch, rep])
            if self.family == "captioner":
                for rows in chunks(rng.permutation(len(arrays["owner"]))):
                    yield _padded({"image": arrays["images"][arrays["owner"][rows]].astype(
                                       np.float32),
                                   "caption_in": arrays["caption_in"][rows],
                                   "caption_out": arrays["caption_out"][rows]}, batch_size)
                continue
            plan = []
            for bound in sorted(int(k.split(".")[1]) for k in arrays if k.startswith("source.")):
                order = rng.permutation(len(arrays[f"source.{bound}"]))
                plan += [(bound, rows) for rows in chunks(order)]
            for j in rng.permutation(len(plan)):
                bound, rows = plan[j]
                yield _padded({field: arrays[f"{field}.{bound}"][rows]
                               for field in TRANSLATION_FIELDS if f"{field}.{bound}" in arrays},
                              batch_size)

    def real_rows(self, batch: dict[str, np.ndarray]) -> int:
        """How many rows of `batch` are examples (not the padding rows of `remainder="pad"`):
        those with a target token."""
        target = batch["caption_out" if self.family == "captioner" else "target_out"]
        return int(np.count_nonzero(target.any(axis=1)))

    def _split(self, split: str) -> dict[str, np.ndarray]:
        if split not in self.splits:
            raise UserError(f"{self.path} has no {split!r} split; it has: "
                            f"{', '.join(self.splits)}")
        return self.splits[split]


def _padded(batch: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    """`batch` with all-zero rows after its own up to `batch_size` rows."""
    rows = len(next(iter(batch.values())))
    if rows == batch_size:
        return batch
    return {k: np.concatenate([v, np.zeros((batch_size - rows, *v.shape[1:]), v.dtype)])
            for k, v in batch.items()}


def load_prepared(path: str | os.PathLike) -> Prepared:
    """Read a folder written by `prepare_translation` / `prepare_captions` (NumPy only).

    Raises:
        UserError: the folder is missing, incomplete (no `prepared.json`: a prepare step that
            did not finish) or of another format.
        DataError: a file the manifest names is missing or cannot be read.
    """
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such prepared folder")
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UserError(f"{path}: not a prepared folder (no {Path(exc.filename).name}); "
                        "expected the output of `prepare`") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: unreadable {MANIFEST} or {CONFIG_FILE} ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise UserError(f"{path}: prepared format {found!r}; expected {FORMAT}")
    _check_manifest(path, manifest)
    vocabularies, splits = {}, {}
    file = MANIFEST
    try:
        for name, file in manifest["vocabularies"].items():
            text = (path / file).read_text(encoding="utf-8")
            vocabularies[name] = (text[:-1] if text.endswith("\n") else text).split("\n")
        for name in manifest["splits"]:
            file = f"{name}.npz"
            with np.load(path / file) as npz:
                splits[name] = {key: npz[key] for key in npz.files}
        family = manifest["family"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            zlib.error) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DataError(f"{path}: damaged or incomplete prepared folder: {file} cannot be read "
                        f"({reason}); run `prepare` again") from None
    for name, tokens in vocabularies.items():
        try:
            check_tokens(tokens)
        except ValueError as exc:  # a vocabulary file edited by hand
            raise _damaged(path / manifest["vocabularies"][name], str(exc)) from None
    for name, arrays in splits.items():
        _check_split(path / f"{name}.npz", family, arrays,
                     {name: len(tokens) for name, tokens in vocabularies.items()})
    return Prepared(path, family, config, vocabularies,
                    dict(manifest["vocabularies"]), splits)


def _damaged(file: Path, what: str) -> DataError:
    return DataError(f"{file}: damaged prepared file: {what}; run `prepare` again")


def _check_manifest(path: Path, manifest: dict) -> None:
    """The manifest's structure: a known family, its vocabularies by name, a list of splits."""
    where = path / MANIFEST
    family = manifest.get("family")
    if family not in ("seq2seq", "captioner"):
        raise _damaged(where, f"family {family!r}; expected seq2seq or captioner")
    files = manifest.get("vocabularies")
    if (not isinstance(files, dict) or sorted(files) != sorted(vocab_files(family))
            or not all(isinstance(f, str) and f and "/" not in f for f in files.values())):
        raise _damaged(where, f"vocabularies {files!r}; expected file names for "
                              f"{', '.join(sorted(vocab_files(family)))}")
    splits = manifest.get("splits")
    if (not isinstance(splits, (dict, list)) or "train" not in splits
            or not all(isinstance(n, str) and n.isidentifier() for n in splits)):
        raise _damaged(where, f"splits {splits!r}; expected train (and valid)")


def _check_split(file: Path, family: str, arrays: dict[str, np.ndarray],
                 sizes: dict[str, int]) -> None:
    """A split's arrays: the fields its family needs, rows that agree, and ids within their
    vocabularies (an id past a cut vocabulary would read past the embedding table, which JAX
    answers with NaN rather than an error)."""
    def ids(key: str, bound: int, rows: int, width: int | None = None) -> None:
        array = arrays.get(key)
        if array is None:
            raise _damaged(file, f"no {key} array")
        if (array.ndim != 2 or len(array) != rows or not np.issubdtype(array.dtype, np.integer)
                or (width is not None and array.shape[1] != width)):
            raise _damaged(file, f"{key} is {array.dtype} {list(array.shape)}; expected "
                                 f"{rows} rows of {width or 'T'} integer ids")
        if array.size and (array.min() < 0 or array.max() >= bound):
            raise _damaged(file, f"{key} holds ids from {array.min()} to {array.max()}; the "
                                 f"vocabulary has {bound}")

    if family == "captioner":
        images, owner = arrays.get("images"), arrays.get("owner")
        if images is None or owner is None or images.ndim != 4 or owner.ndim != 1:
            raise _damaged(file, "expected images (N, H, W, 3) and owner (C,)")
        if owner.size and (owner.min() < 0 or owner.max() >= len(images)):
            raise _damaged(file, f"owner names images up to {owner.max()}; it has {len(images)}")
        for key in ("caption_in", "caption_out"):
            ids(key, sizes["words"], len(owner))
        return
    buckets = sorted(int(key.split(".")[1]) for key in arrays
                     if key.startswith("source.") and key.split(".")[1].isdigit())
    if not buckets:
        raise _damaged(file, "no source.W arrays")
    for width in buckets:
        rows = len(arrays[f"source.{width}"])
        copying = f"source_copy.{width}" in arrays
        extended = sizes["target"] + width  # a copy id: V + its first source position
        ids(f"source.{width}", sizes["source"], rows, width)
        ids(f"target_in.{width}", sizes["target"], rows, width)
        ids(f"target_out.{width}", extended if copying else sizes["target"], rows, width)
        if copying:
            ids(f"source_copy.{width}", extended, rows, width)
