"""`spa-eng`: the Tatoeba English-Spanish pairs as TensorFlow distributes them, split in three.

The archive is the one the TensorFlow "NMT with attention" tutorial and the keras-io Transformer
translation example download (`spa-eng/spa.txt`, 118,964 `english<TAB>spanish` lines, made by
manythings.org/anki from tatoeba.org on 2018-05-13; CC-BY 2.0 France). Its size, 2,638,744
bytes, is recorded in those tutorials' download logs; no SHA-256 of it is published, so the
size is what is checked, and the SHA-256 found is printed and written to `FETCHED.json`.

`prepare` writes `train.tsv`, `valid.tsv` and `test.tsv` (`english<TAB>spanish`, UTF-8, one
pair a line: what `seq2seq train --dataset tsv --data OUT` reads):
- only the first two columns are kept (newer manythings files add an attribution column);
- lines without two non-empty columns are dropped, and so are repeats of a pair already seen;
- the split is by English sentence, so no English sentence is in two files: the distinct
  English sentences, in file order, are shuffled with `random.Random(seed)`, the first 2% go to
  test, the next 2% to valid, the rest to train; each file keeps the archive's order.
The same archive and seed always give the same files.
"""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

from common.datasets.download import Fetcher, RemoteFile
from common.errors import DataError

ARCHIVE = RemoteFile("https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
                     size=2_638_744, sha256=None)
VALID_FRACTION = 0.02
TEST_FRACTION = 0.02
SPLITS = ("train", "valid", "test")


def read_pairs(archive: Path) -> tuple[list[tuple[str, str]], int, str | None]:
    """The pairs of the archive's `spa.txt`.

    Returns:
        `(pairs, dropped, about)`: the distinct well-formed pairs in file order, how many lines
        were dropped (malformed or repeated), and the text of the archive's `_about.txt`.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            texts = [n for n in names if n.rsplit("/", 1)[-1] == "spa.txt"]
            if not texts:
                raise DataError(f"{archive}: no spa.txt in the archive (it holds {names[:5]})")
            raw = zf.read(texts[0])
            abouts = [n for n in names if n.rsplit("/", 1)[-1] == "_about.txt"]
            about = zf.read(abouts[0]).decode("utf-8", errors="replace") if abouts else None
    except zipfile.BadZipFile:
        raise DataError(f"{archive}: not a zip archive") from None
    pairs, seen, dropped = [], set(), 0
    # Lines end at "\n" alone (str.splitlines would also end them at U+2028, U+0085 or a form
    # feed inside a sentence, making pairs of halves); such characters become spaces. A line
    # that is not UTF-8 is dropped and counted, as the tsv reader skips it.
    for data in raw.split(b"\n"):
        try:
            line = data.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            dropped += 1
            continue
        fields = [" ".join(field.splitlines()).strip() for field in line.split("\t")]
        pair = tuple(fields[:2])
        if len(pair) != 2 or not all(pair) or pair in seen:
            dropped += bool(line.strip())
            continue
        seen.add(pair)
        pairs.append(pair)
    if not pairs:
        raise DataError(f"{archive}: {texts[0]} has no english<TAB>spanish lines")
    return pairs, dropped, about


def split_by_source(pairs: list[tuple[str, str]], seed: int) -> dict[str, list[tuple[str, str]]]:
    """Train/valid/test by source sentence (see the module docstring), in the pairs' order."""
    sources = list(dict.fromkeys(source for source, _ in pairs))
    random.Random(seed).shuffle(sources)
    n_test = round(len(sources) * TEST_FRACTION)
    n_valid = round(len(sources) * VALID_FRACTION)
    split_of = dict.fromkeys(sources[:n_test], "test")
    split_of.update(dict.fromkeys(sources[n_test:n_test + n_valid], "valid"))
    splits: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLITS}
    for pair in pairs:
        splits[split_of.get(pair[0], "train")].append(pair)
    return splits


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> None:
    """`source<TAB>target` lines, written beside and renamed into place."""
    part = path.with_name(path.name + ".part")
    with open(part, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f"{source}\t{target}\n" for source, target in pairs)
    part.replace(path)


def prepare(fetcher: Fetcher, out: Path, seed: int = 0) -> dict:
    """Fetch the archive and write `out/{train,valid,test}.tsv`; returns what was done."""
    archive = fetcher.get(ARCHIVE)
    pairs, dropped, about = read_pairs(archive)
    splits = split_by_source(pairs, seed)
    out.mkdir(parents=True, exist_ok=True)
    for name, split_pairs in splits.items():
        write_tsv(out / f"{name}.tsv", split_pairs)
    if about is not None:
        (out / "SOURCE-about.txt").write_text(about, encoding="utf-8")
    return {
        "seed": seed,
        "pairs": {name: len(split_pairs) for name, split_pairs in splits.items()},
        "dropped_lines": dropped,
        "wrote": [f"{name}.tsv" for name in SPLITS],
    }
