"""A prepared folder: tokenized training data that a trainer reads without TensorFlow.

A family's `Family.prepare(config, out_dir)` reads the raw data with its own loaders
(TensorFlow may be used there), builds the vocabularies as its `train` does, and writes the
folder with `write_folder` (made of `start_folder`, `writing`, `save_npz`, `finish_folder`):

```
OUT/prepared.json       {"format", "family", "vocabularies": {name: file}, "splits": {...},
                         ...the family's own keys}: what the folder holds
OUT/config.json         the family's run config, as its `train` writes it
OUT/vocab*.txt          the vocabularies, under the run directory's file names
OUT/train.npz           the training split (and `valid.npz` when the dataset has one)
```

How a split lies in its `.npz` and is served as batches is the family's `PreparedLayout`
(`Family.prepared_layout()`): the translators' token ids in buckets of one padded length
each, the captioner's images with the captions that belong to them (docs/jax.md).

`load_prepared(path)` reads the folder with NumPy and the standard library only (no
TensorFlow, no Keras: the family's layout comes from a module that imports neither), checks
it against the layout, and `Prepared.batches` serves reproducible, shuffled batches of fixed
shapes (one shape per bucket) for `common.training.jax_trainer`.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from common.config import atomic_write_text, from_dict, save_json, to_dict
from common.errors import DataError, UserError
from common.family import family_named, family_names
from common.text.specials import check_tokens

FORMAT = 1
MANIFEST = "prepared.json"
CONFIG_FILE = "config.json"


class PreparedLayout(ABC):
    """How one family's splits lie in a prepared folder and are served as batches (NumPy
    only). `Family.prepared_layout()` gives it; `Prepared` and `load_prepared` use it.

    Class attributes:
        vocabularies: name -> file name, in the folder and in a run directory (`RunDir`'s).
        target: the batch field that holds a token in every example's row: a row without one
            is padding (`Prepared.real_rows`).
        train_remainder: what training on JAX does with a bucket's last rows that do not fill
            a batch, `"pad"` or `"drop"` (`Prepared.batches`); evaluation always pads.
    """

    vocabularies: ClassVar[dict[str, str]]
    target: ClassVar[str]
    train_remainder: ClassVar[str] = "pad"

    @abstractmethod
    def num_examples(self, arrays: dict[str, np.ndarray]) -> int:
        """How many examples the split `arrays` holds."""

    @abstractmethod
    def one_pass(self, arrays: dict[str, np.ndarray], rng: np.random.Generator,
                 chunks: Callable[[np.ndarray], list[np.ndarray]]
                 ) -> Iterator[dict[str, np.ndarray]]:
        """One pass over the split `arrays` in an order drawn from `rng`: the batches, each
        a dict of rows; `chunks(order)` cuts a permutation of rows into the rows of batches
        (`Prepared.batches` pads a short last one)."""

    @abstractmethod
    def check_split(self, file: Path, arrays: dict[str, np.ndarray],
                    sizes: dict[str, int]) -> None:
        """Raise `damaged(file, ...)` unless `arrays` hold the fields of the layout, rows that
        agree, and ids within their vocabularies (`sizes`: name -> tokens): an id past a cut
        vocabulary would read past the embedding table, which JAX answers with NaN rather
        than an error (`check_ids`)."""


# -- writing (by the families; may use TensorFlow) ---------------------------------------------

@contextmanager
def writing(out: Path):
    """Writes into the prepared folder `out`: a failed one (no such parent, no permission, a
    full disk) is one line naming the folder, not a traceback."""
    from common.training.run_dir import write_failure

    try:
        yield
    except OSError as exc:
        raise write_failure(out, exc, "folder for the prepared data") from None


def start_folder(out_dir: str | os.PathLike) -> Path:
    """The folder `out_dir`, made (a new or empty folder, or one prepared before, whose
    manifest is removed until the new one is complete)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; expected a folder for the prepared data")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(f"{out} is not empty and holds no prepared data; expected a new or "
                        "empty folder")
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)  # incomplete until written again, last
    return out


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write a split's `arrays` as the compressed `path`, whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(path.parent):
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)


def finish_folder(out: Path, config: Any, vocabularies: dict[str, str],
                  summary: dict[str, Any], **extra: Any) -> None:
    """Write `config.json` (the run config `config`, its training settings complete) and,
    last, the manifest: `config.family`'s folder, its `vocabularies` (name -> file),
    `summary` of the splits (split -> counts) and the family's `extra` keys."""
    from common.training.config import TrainingConfig

    config_dict = to_dict(config)
    config_dict["training"] = to_dict(from_dict(TrainingConfig, config.training))
    manifest = {"format": FORMAT, "family": config.family, "vocabularies": vocabularies,
                "splits": summary, **extra}
    with writing(out):
        save_json(out / CONFIG_FILE, config_dict)
        atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")


SplitArrays = Iterable[tuple[str, dict[str, np.ndarray], dict[str, Any]]]


def write_folder(out_dir: str | os.PathLike, config: Any, layout: PreparedLayout,
                 vocabularies: dict[str, Any], splits: Callable[[Path], SplitArrays],
                 **extra: Any) -> tuple[Path, dict[str, Any]]:
    """Write a whole prepared folder: `start_folder`, the `vocabularies` (name ->
    `Vocabulary`, saved under the family's file names, `layout.vocabularies`), each split
    `splits(out)` yields as `(name, arrays, counts)` (saved as `name.npz`; the family may
    write its own files into `out` as it goes), then `finish_folder` with the `counts` of each
    split and the family's `extra` manifest keys.

    Returns:
        The folder, and the manifest's summary of the splits (name -> counts).
    """
    out = start_folder(out_dir)
    files = layout.vocabularies
    with writing(out):
        for name, vocab in vocabularies.items():
            vocab.save(out / files[name])
    summary = {}
    for name, arrays, counts in splits(out):
        save_npz(out / f"{name}.npz", arrays)
        summary[name] = counts
    finish_folder(out, config, {name: files[name] for name in vocabularies}, summary, **extra)
    return out, summary


# -- reading (NumPy only) ----------------------------------------------------------------------

@dataclass(frozen=True)
class Prepared:
    """A prepared folder in memory (see the module docstring).

    Args:
        path: the folder.
        family: the family's name (`common.family.family_named`), whose `PreparedLayout`
            (`layout`) says what the splits hold.
        config: the run config as a dict (`config.json`).
        vocabularies: name -> its tokens (the names of `layout.vocabularies`).
        vocab_files: name -> its file name in the folder.
        splits: split name -> its arrays.
    """

    path: Path
    family: str
    config: dict[str, Any]
    vocabularies: dict[str, list[str]]
    vocab_files: dict[str, str]
    splits: dict[str, dict[str, np.ndarray]]

    @cached_property
    def layout(self) -> PreparedLayout:
        """The family's `PreparedLayout`."""
        return family_named(self.family).prepared_layout()

    def num_examples(self, split: str = "train") -> int:
        return self.layout.num_examples(self._split(split))

    def batches(self, split: str, batch_size: int, seed: int, epoch: int = 0,
                repeat: bool = False, remainder: str = "drop") -> Iterator[dict[str, np.ndarray]]:
        """Shuffled batches of exactly `batch_size` rows (so the shapes are one per bucket),
        the same for the same `seed` and `epoch`, with the fields of the family's layout
        (translation: `source`, `target_in`, `target_out` (`source_copy`) int32; captions:
        `image` float32 in [0, 255], `caption_in`, `caption_out` int32).

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
            for batch in self.layout.one_pass(arrays, rng, chunks):
                yield _padded(batch, batch_size)

    def real_rows(self, batch: dict[str, np.ndarray]) -> int:
        """How many rows of `batch` are examples (not the padding rows of `remainder="pad"`):
        those with a target token."""
        return int(np.count_nonzero(batch[self.layout.target].any(axis=1)))

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
    """Read a folder written by a family's `prepare` (NumPy only).

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
    layout = _check_manifest(path, manifest)
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
            raise damaged(path / manifest["vocabularies"][name], str(exc)) from None
    for name, arrays in splits.items():
        layout.check_split(path / f"{name}.npz", arrays,
                           {name: len(tokens) for name, tokens in vocabularies.items()})
    return Prepared(path, family, config, vocabularies,
                    dict(manifest["vocabularies"]), splits)


def damaged(file: Path, what: str) -> DataError:
    """The one-line error of a prepared file that reads but is wrong."""
    return DataError(f"{file}: damaged prepared file: {what}; run `prepare` again")


def check_ids(file: Path, arrays: dict[str, np.ndarray], key: str, bound: int, rows: int,
              width: int | None = None) -> None:
    """Raise `damaged(file, ...)` unless `arrays[key]` is `rows` rows (of `width` when given)
    of integer ids in `[0, bound)`."""
    array = arrays.get(key)
    if array is None:
        raise damaged(file, f"no {key} array")
    if (array.ndim != 2 or len(array) != rows or not np.issubdtype(array.dtype, np.integer)
            or (width is not None and array.shape[1] != width)):
        raise damaged(file, f"{key} is {array.dtype} {list(array.shape)}; expected "
                            f"{rows} rows of {width or 'T'} integer ids")
    if array.size and (array.min() < 0 or array.max() >= bound):
        raise damaged(file, f"{key} holds ids from {array.min()} to {array.max()}; the "
                            f"vocabulary has {bound}")


def _check_manifest(path: Path, manifest: dict) -> PreparedLayout:
    """The manifest's structure: a known family with a layout, its vocabularies by name, a
    list of splits. Returns the family's layout."""
    where = path / MANIFEST
    family = manifest.get("family")
    try:
        layout = family_named(family).prepared_layout()
    except (UserError, NotImplementedError):
        raise damaged(where, f"family {family!r}; expected one with a prepared folder, of: "
                             f"{', '.join(family_names())}") from None
    files = manifest.get("vocabularies")
    if (not isinstance(files, dict) or sorted(files) != sorted(layout.vocabularies)
            or not all(isinstance(f, str) and f and "/" not in f for f in files.values())):
        raise damaged(where, f"vocabularies {files!r}; expected file names for "
                             f"{', '.join(sorted(layout.vocabularies))}")
    splits = manifest.get("splits")
    if (not isinstance(splits, (dict, list)) or "train" not in splits
            or not all(isinstance(n, str) and n.isidentifier() for n in splits)):
        raise damaged(where, f"splits {splits!r}; expected train (and valid)")
    return layout
