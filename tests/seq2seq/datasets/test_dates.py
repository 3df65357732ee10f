"""The dates dataset: correct targets, known alignments, determinism, disjoint splits."""

import datetime
import random
import re

import pytest

from common.errors import UserError
from common.text import tokenize_texts
from seq2seq.datasets import load_pairs
from seq2seq.datasets.dates import FORMATS, MESES, MONTHS, make_example


def parse_iso(target):
    return datetime.date.fromisoformat(target)


def test_targets_are_iso_dates_of_the_sources():
    pairs = load_pairs("dates", split="train", size=300, seed=0)
    assert len(pairs) == 300 and pairs.dropped == 0
    months = {m.lower(): i + 1 for i, m in enumerate(MONTHS)}
    months |= {m.lower()[:3]: i + 1 for i, m in enumerate(MONTHS)}
    months |= {m: i + 1 for i, m in enumerate(MESES)}
    for source, target, alignment, tokens in zip(
        pairs.sources, pairs.targets, pairs.alignments, pairs.source_tokens
    ):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target)
        date = parse_iso(target)
        year, month, day = (tokens[alignment[i]] for i in (0, 2, 4))
        assert alignment[1] == alignment[3] == -1
        assert int(year) == date.year
        assert months.get(month.lower(), None) == date.month or int(month) == date.month
        assert int(re.match(r"\d+", day).group()) == date.day
        assert str(date.year) in source


def test_source_and_target_tokens_are_what_tokenize_gives():
    pairs = load_pairs("dates", split="valid", size=200, seed=4)
    assert tokenize_texts(pairs.sources) == pairs.source_tokens
    assert tokenize_texts(pairs.targets) == pairs.target_tokens
    assert all(t[1] == t[3] == "-" and len(t) == 5 for t in pairs.target_tokens)


def test_every_format_is_used_and_weekday_is_right():
    date = datetime.date(2026, 11, 25)
    for name in FORMATS:
        source, target, alignment = make_example(date, name, random.Random(0))
        assert target == ["2026", "-", "11", "-", "25"]
        assert source[alignment[0]] == "2026"
    source, _, _ = make_example(date, "weekday", random.Random(0))
    assert source[0].lower() == "wednesday"


def test_deterministic_per_seed_and_split():
    a = load_pairs("dates", split="train", size=50, seed=7)
    b = load_pairs("dates", split="train", size=50, seed=7)
    c = load_pairs("dates", split="train", size=50, seed=8)
    assert a == b
    assert a.sources != c.sources


def test_splits_share_no_date():
    dates = {
        split: {p for p in load_pairs("dates", split=split, size=2000, seed=1).targets}
        for split in ("train", "valid", "test")
    }
    assert not dates["train"] & dates["valid"]
    assert not dates["train"] & dates["test"]
    assert not dates["valid"] & dates["test"]
    other_seed = set(load_pairs("dates", split="test", size=2000, seed=2).targets)
    assert not other_seed & dates["train"]


def test_max_length_drops_long_examples_with_their_alignments():
    # every target has 5 tokens and no source more than 5
    four = load_pairs("dates", split="test", size=200, seed=0, max_length=4)
    assert (len(four), four.dropped, four.alignments) == (0, 200, [])
    five = load_pairs("dates", split="test", size=200, seed=0, max_length=5)
    assert (len(five), five.dropped, len(five.alignments)) == (200, 0, 200)


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="split"):
        load_pairs("dates", split="dev")
    with pytest.raises(UserError, match="reverse"):
        load_pairs("dates", reverse=True)
    with pytest.raises(UserError, match="max_length"):
        load_pairs("dates", max_length=0)
