"""The `dates` dataset: human-written dates -> ISO 8601, with known alignments.

A small synthetic translation task in the spirit of the date-normalization exercise often
used to show attention: the source is a date as people write it, the target its ISO form.

    "25th of November 2026"      -> "2026-11-25"
    "tuesday, 25 november 2026"  -> "2026-11-25"
    "25/11/2026"                 -> "2026-11-25"

Sources and targets are built as token lists, so the right alignment is known: the target
tokens are `YYYY - MM - DD` and `PairsSplit.alignments[i][j]` is the index of the source token
holding target token `j` (the year, the month name or number, the day), or -1 for the `-`
separators. An attention model that has learned the task puts its weight there.

Dates run from 1950-01-01 to 2049-12-31. Each date belongs to one split by a fixed hash of
its day number (80% train, 10% valid, 10% test), whatever the seed, so the splits never share
a date; `seed` and the split then choose the dates and formats of the examples.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable

from common.errors import UserError
from common.text import detokenize
from seq2seq.datasets.pairs import (
    PairsOptions,
    PairsSplit,
    check_max_length,
    check_split,
    filter_by_length,
)

FIRST_DATE = datetime.date(1950, 1, 1)
LAST_DATE = datetime.date(2049, 12, 31)
DEFAULT_SIZES = {"train": 10_000, "valid": 1_000, "test": 1_000}
_SPLIT_SALT = {"train": 0, "valid": 1, "test": 2}

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
MESES = (
    "enero", "febrero", "marzo", "abril", "mayo", "junio",
    "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# A format gives (source tokens, index of the year token, of the month token, of the day token).
Format = Callable[[datetime.date, random.Random], tuple[list[str], int, int, int]]


def date_split(date: datetime.date) -> str:
    """The split a date belongs to, fixed for all seeds (80/10/10 by a multiplicative hash)."""
    bucket = (date.toordinal() * 2654435761) % 2**32 % 10
    return "train" if bucket < 8 else "valid" if bucket == 8 else "test"


def ordinal_day(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"


def _case(word: str, rng: random.Random) -> str:
    return rng.choice((word, word.lower(), word.upper()))


def _day(date: datetime.date, rng: random.Random) -> str:
    return rng.choice((str(date.day), f"{date.day:02d}"))


def _month_number(date: datetime.date, rng: random.Random) -> str:
    return rng.choice((str(date.month), f"{date.month:02d}"))


def _month_name(date: datetime.date, rng: random.Random, short: bool = False) -> str:
    name = MONTHS[date.month - 1]
    return _case(name[:3] if short else name, rng)


FORMATS: dict[str, Format] = {
    # 25th of November 2026
    "ordinal_of": lambda d, r: ([ordinal_day(d.day), "of", _month_name(d, r), str(d.year)], 3, 2, 0),
    # Nov 25, 2026
    "short_month_first": lambda d, r: (
        [_month_name(d, r, short=True), str(d.day), ",", str(d.year)], 3, 0, 1),
    # November 25th, 2026
    "month_ordinal": lambda d, r: ([_month_name(d, r), ordinal_day(d.day), ",", str(d.year)], 3, 0, 1),
    # November 25 2026
    "month_first": lambda d, r: ([_month_name(d, r), str(d.day), str(d.year)], 2, 0, 1),
    # 25 nov 2026
    "day_short_month": lambda d, r: ([_day(d, r), _month_name(d, r, short=True), str(d.year)], 2, 1, 0),
    # tuesday, 25 november 2026
    "weekday": lambda d, r: (
        [_case(WEEKDAYS[d.weekday()], r), ",", str(d.day), _month_name(d, r), str(d.year)], 4, 3, 2),
    # 25/11/2026
    "slashes": lambda d, r: ([_day(d, r), "/", _month_number(d, r), "/", str(d.year)], 4, 2, 0),
    # 2026/11/25
    "year_first_slashes": lambda d, r: (
        [str(d.year), "/", _month_number(d, r), "/", _day(d, r)], 0, 2, 4),
    # 25 de noviembre de 2026
    "spanish": lambda d, r: ([str(d.day), "de", MESES[d.month - 1], "de", str(d.year)], 4, 2, 0),
}  # fmt: skip


def make_example(
    date: datetime.date, format_name: str, rng: random.Random
) -> tuple[list[str], list[str], list[int]]:
    """One example: `(source tokens, target tokens, alignment)` for `date` in a format."""
    source, year, month, day = FORMATS[format_name](date, rng)
    target = [f"{date.year:04d}", "-", f"{date.month:02d}", "-", f"{date.day:02d}"]
    return source, target, [year, -1, month, -1, day]


def load_dates(options: PairsOptions) -> PairsSplit:
    """Generate one split of the dates task.

    Of `options`: `path` must be None (the data is generated; a file is refused rather than
    silently ignored); the splits share no date; `reverse` is not supported (ISO -> a free
    format has no single answer) and must be False; `seed` with
    `split` fixes the examples (the same options give the same examples); `size` defaults to
    10,000 for train, 1,000 for valid and test; `lowercase` lowercases the source tokens and
    sentences; examples longer than `max_length` on either side are dropped (counted).

    Returns:
        A `PairsSplit` with `alignments`.

    Example:
    >>> pairs = load_dates(PairsOptions(split="valid", size=2, seed=0))
    >>> len(pairs), pairs.target_tokens[0][1]
    (2, '-')
    """
    split, max_length, lowercase = options.split, options.max_length, options.lowercase
    check_split(split)
    check_max_length(max_length)
    if options.reverse:
        raise UserError("the dates dataset has one direction (human date -> ISO); reverse=True given")
    if options.path is not None:
        raise UserError(f"the dates dataset is generated and reads no file; got the path "
                        f"{str(options.path)!r} (leave out --data, or use --dataset tsv)")
    size = DEFAULT_SIZES[split] if options.size is None else options.size
    if size < 0:
        raise UserError(f"size must be >= 0, got {size}")
    dates = [
        FIRST_DATE + datetime.timedelta(days=n)
        for n in range((LAST_DATE - FIRST_DATE).days + 1)
    ]
    dates = [d for d in dates if date_split(d) == split]
    rng = random.Random(options.seed * 3 + _SPLIT_SALT[split])
    names = list(FORMATS)
    sources, targets, source_tokens, target_tokens, alignments = [], [], [], [], []
    for _ in range(size):
        source, target, alignment = make_example(rng.choice(dates), rng.choice(names), rng)
        if lowercase:
            source = [token.lower() for token in source]
        source_tokens.append(source)
        target_tokens.append(target)
        alignments.append(alignment)
        sources.append(detokenize(source))
        targets.append(detokenize(target))
    return filter_by_length(
        sources, targets, source_tokens, target_tokens, max_length, alignments=alignments
    )
