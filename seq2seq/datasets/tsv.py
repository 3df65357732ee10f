"""The `tsv` dataset: `source<TAB>target` sentence pairs, one a line, UTF-8.

The spa-eng corpus (`../shared/data/spa-eng/{train,valid,test}.tsv`, English<TAB>Spanish,
from Tatoeba via manythings.org/anki) is read with it. Malformed lines (not exactly two
columns, an empty side, invalid UTF-8) are skipped, counted in `PairsSplit.skipped` and
reported in one logged warning with their line numbers; they never stop the run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from common.errors import DataError
from common.text import normalize, tokenize_texts
from seq2seq.datasets.pairs import (
    PairsOptions,
    PairsSplit,
    check_max_length,
    check_split,
    filter_by_length,
)

logger = logging.getLogger(__name__)


def resolve_path(path: str | os.PathLike | None, split: str) -> Path:
    """`path` itself when it is a file, else `path/<split>.tsv`."""
    if path is None:
        raise DataError("the tsv dataset needs a path: a .tsv file or a folder with <split>.tsv")
    path = Path(path)
    if path.is_dir():
        path = path / f"{check_split(split)}.tsv"
    if not path.is_file():
        raise DataError(f"{path}: no such file (expected source<TAB>target lines)")
    return path


def read_tsv(
    path: str | os.PathLike, size: int | None = None
) -> tuple[list[str], list[str], int]:
    """Read `source<TAB>target` lines.

    Args:
        path: the file.
        size: stop after this many good pairs (None: read all).

    Returns:
        `(sources, targets, skipped)`: NFKC-normalized columns and the number of bad lines.
    """
    sources: list[str] = []
    targets: list[str] = []
    bad: list[tuple[int, str]] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if size is not None and len(sources) >= size:
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                bad.append((number, "invalid UTF-8"))
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue  # blank lines (a trailing newline, say) are not pairs
            fields = line.split("\t")
            if len(fields) != 2:
                bad.append((number, f"{len(fields)} columns"))
                continue
            source, target = (normalize(field).strip() for field in fields)
            if not source or not target:
                bad.append((number, "an empty side"))
                continue
            sources.append(source)
            targets.append(target)
    if bad:
        shown = ", ".join(f"line {n} ({why})" for n, why in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        logger.warning(
            "%s: skipped %d malformed line(s), expected source<TAB>target: %s%s",
            path, len(bad), shown, more,
        )
    return sources, targets, len(bad)


def load_tsv(options: PairsOptions) -> PairsSplit:
    """Load one split of a tab-separated parallel corpus.

    Of `options`: `path` is a .tsv file, or a folder holding `train.tsv`, `valid.tsv` and
    `test.tsv` of which `split` picks one; `reverse` swaps the columns (the second becomes the
    source); `size` reads only the first `size` good pairs; `seed` is unused (the file's order
    is kept); `lowercase` lowercases the tokens (the sentences keep their case); pairs whose
    tokenized source or target is longer than `max_length` are dropped (counted).

    Returns:
        A `PairsSplit` without alignments.

    Raises:
        DataError: the file does not exist.
    """
    max_length, lowercase = options.max_length, options.lowercase
    check_max_length(max_length)
    file = resolve_path(options.path, options.split)
    sources, targets, skipped = read_tsv(file, size=options.size)
    if options.reverse:
        sources, targets = targets, sources
    return filter_by_length(
        sources,
        targets,
        tokenize_texts(sources, lowercase=lowercase),
        tokenize_texts(targets, lowercase=lowercase),
        max_length,
        skipped=skipped,
    )
