"""Where the command lines write figures: checked before any work, numbered per input.

Both families' `--plot`, `--overlay`, `--gif` and `--html` options go through these, so a bad
path (a folder, a parent that is a file or not writable, one of the command's own input files)
fails before a model is loaded (`common.outputs.check_output_file`), and several inputs get
`OUT-1.png`, `OUT-2.png`, ... numbered by input position the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from common.errors import UserError
from common.outputs import check_output_file


def check_output_path(path: str | Path, suffix: str, option: str,
                      inputs: Iterable[str | Path | None] = (), count: int = 1) -> Path:
    """Checks, before any work, that `path` can be written: its folder exists and is writable,
    it is no folder, and neither it nor its numbered names is one of the command's inputs.

    Args:
        path: the file the user asked for.
        suffix: the expected extension (".png", ".html"); a different one is an error.
        option: the option name for messages ("--plot").
        inputs: the files the command reads (images, a results file); None entries skipped.
        count: how many inputs share `path` (`numbered_paths`); each name is checked.

    Returns:
        `path` as a `Path`.
    """
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise UserError(f"{option} {path}: expected a file name ending in {suffix}")
    if path.is_dir():
        raise UserError(f"{option} {path}: is a directory; expected a {suffix} file name")
    inputs = list(inputs)
    for name in numbered_paths(path, max(count, 1)):
        check_output_file(name, option, inputs)
    return path


def numbered_paths(out_path: str | Path, count: int) -> list[Path]:
    """The files for `count` inputs: `out_path` itself for one, else `OUT-1.png`, `OUT-2.png`, ...

    Example:
    >>> numbered_paths("figs/dates.png", 2)
    [PosixPath('figs/dates-1.png'), PosixPath('figs/dates-2.png')]
    """
    path = Path(out_path)
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{i}{path.suffix}") for i in range(1, count + 1)]
