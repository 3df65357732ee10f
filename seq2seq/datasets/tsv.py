"""The `tsv` dataset: `source<TAB>target` sentence pairs, one a line, UTF-8.

The spa-eng corpus (`../shared/data/spa-eng/{train,valid,test}.tsv`, English<TAB>Spanish,
from Tatoeba via manythings.org/anki) is read with it. Malformed lines (not exactly two
columns, an empty side, invalid UTF-8, a NUL character) are skipped, counted in
`PairsSplit.skipped` and reported in one logged warning with their line numbers; they never
stop the run. A side is empty when it has nothing but separators (spaces, a zero-width space:
`common.text.is_blank`, no token to learn from). A UTF-8 byte order mark (a spreadsheet's
export) is dropped; a file in UTF-16 or UTF-32 (which starts with their byte order mark) is
refused in one line, not read as lines of NUL-riddled characters.
"""

from __future__ import annotations

import codecs
import logging
import os
from pathlib import Path

from common.errors import DataError
from common.text import is_blank, normalize, tokenize_texts
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


# Byte order marks of the encodings a TSV is not in, UTF-32's before UTF-16's (UTF-32LE's
# starts with UTF-16LE's).
_OTHER_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32 (little-endian)"),
    (codecs.BOM_UTF32_BE, "UTF-32 (big-endian)"),
    (codecs.BOM_UTF16_LE, "UTF-16 (little-endian)"),
    (codecs.BOM_UTF16_BE, "UTF-16 (big-endian)"),
)


def _check_encoding(path: str | os.PathLike, start: bytes) -> None:
    """A one-line `DataError` when the file's first bytes are a UTF-16 or UTF-32 byte order
    mark (its lines would decode as UTF-8 full of NUL characters)."""
    for bom, encoding in _OTHER_BOMS:
        if start.startswith(bom):
            raise DataError(f"{path}: starts with a {encoding} byte order mark; expected UTF-8 "
                            f"source<TAB>target lines (convert it, e.g. iconv -f "
                            f"{encoding.split()[0]} -t UTF-8)")


def read_tsv(
    path: str | os.PathLike, size: int | None = None
) -> tuple[list[str], list[str], int]:
    """Read `source<TAB>target` lines.

    Args:
        path: the file.
        size: stop after this many good pairs (None: read all).

    Returns:
        `(sources, targets, skipped)`: NFKC-normalized columns and the number of bad lines.

    Raises:
        DataError: the file starts with a UTF-16 or UTF-32 byte order mark.
    """
    sources: list[str] = []
    targets: list[str] = []
    bad: list[tuple[int, str]] = []
    with open(path, "rb") as f:
        _check_encoding(path, f.read(4))
        f.seek(0)
        for number, raw in enumerate(f, start=1):
            if size is not None and len(sources) >= size:
                break
            try:
                # The first line without a UTF-8 byte order mark, which would stay glued to
                # the first source (evaluation would then group it apart from its copies).
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                bad.append((number, "invalid UTF-8"))
                continue
            if "\x00" in line:  # valid UTF-8, but no text has it (UTF-16 without a mark?)
                bad.append((number, "a NUL character"))
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue  # blank lines (a trailing newline, say) are not pairs
            fields = line.split("\t")
            if len(fields) != 2:
                bad.append((number, f"{len(fields)} columns"))
                continue
            source, target = (normalize(field).strip() for field in fields)
            if is_blank(source) or is_blank(target):
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
        DataError: the file does not exist, or is in UTF-16 or UTF-32 (its byte order mark).
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
