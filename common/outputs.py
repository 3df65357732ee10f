"""The files the command lines write: checked before any work, so that nothing given is lost.

Both families' `evaluate --json`, `translate --plot/--html` and `caption`/`render`
`--overlay/--gif/--html` go through `check_output_file` before a model is loaded: a folder, a
parent that is a file, missing or not writable, and a file that is also an input (an image
being captioned, the `--data` being scored, the `RESULT.json` being drawn) are refused in one
line. An existing file is only replaced when the caller says what may be replaced (an earlier
evaluation's JSON, say). `reported_write` turns an `OSError` that still happens while writing
(a disk that fills, a folder made read-only meanwhile) into the same kind of one-line error.

`rounded_weights` is how `caption --json` and `translate --json` write attention: to
`WEIGHT_DECIMALS` (4) decimals, within 5e-5 of the model's weights, as short JSON numbers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError

# An earlier result is read to be recognized; a file larger than this is none.
MAX_RESULT_BYTES = 10_000_000
#: Decimals of the attention weights in `--json` output: 1e-4, where a figure shows ~1/255.
WEIGHT_DECIMALS = 4


def rounded_weights(values: Any) -> Any:
    """Attention weights (an array of any shape) as nested lists of floats rounded to
    `WEIGHT_DECIMALS` decimals, for JSON.

    Rounded in float64, so that each number is written with at most that many decimals
    (`0.1235`, not float32's `0.12349999696016312`).

    Example:
    >>> rounded_weights(np.array([[0.123456, 5e-6]], np.float32))
    [[0.1235, 0.0]]
    """
    return np.round(np.asarray(values, dtype=np.float64), WEIGHT_DECIMALS).tolist()


def check_output_file(
    path: str | os.PathLike,
    option: str,
    inputs: Iterable[str | os.PathLike | None] = (),
    result_keys: Sequence[str] | None = None,
) -> Path:
    """Checks, before any work, that `path` can be written without destroying anything.

    Args:
        path: the file the user asked for.
        option: the option name for messages (`"--json"`).
        inputs: files the command reads (None entries are skipped); `path` may not be one.
        result_keys: when given, an existing `path` is replaced only if it is a JSON object
            holding all these keys (an earlier result of the same command); when None, an
            existing file that is not an input may be replaced.

    Returns:
        `path` as a `Path`.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; expected a file name")
    check_parent_folder(path, option)
    for source in inputs:
        if source is not None and same_file(path, source):
            raise UserError(f"{option} {path}: is an input of this command ({source}); "
                            "choose another output file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise UserError(f"{option} {path}: the file exists and is not writable")
        if result_keys is not None and not _is_result(path, result_keys):
            raise UserError(f"{option} {path}: the file exists and is not an earlier result "
                            "(a JSON object as this command writes); choose another name")
    return path


def check_parent_folder(path: str | os.PathLike, option: str) -> None:
    """Fails when the folder of `path` is missing, is a file, or cannot be written."""
    parent = Path(path).parent
    if not parent.is_dir():
        ancestor = parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            raise UserError(f"{option} {path}: {ancestor} is a file, not a folder")
        raise UserError(f"{option} {path}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: the folder {parent} is not writable")


def check_output_folder(path: str | os.PathLike, option: str) -> Path:
    """Checks, before any work, that the folder `path` exists or can be made, and is writable.

    A file of that name, an ancestor that is a file, or a nearest existing ancestor that cannot
    be written is refused in one line naming `option`. Nothing is created here.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: is a file; expected a folder")
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{option} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: the folder {ancestor} is not writable")
    return path


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether `a` and `b` name one file (through links, `..` or a second hard link)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _is_result(path: Path, keys: Sequence[str]) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > MAX_RESULT_BYTES:
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and all(key in data for key in keys)


@contextmanager
def reported_write(path: str | os.PathLike, option: str) -> Iterator[None]:
    """Turns an `OSError` raised inside the block into a one-line `UserError` naming `path`."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise UserError(f"{option} {path}: cannot write it: {why}") from None
