"""The tsv dataset: real spa-eng data, direction, length filtering, malformed lines."""

import logging

import pytest

from common.errors import DataError
from common.text import tokenize_texts
from seq2seq.datasets import DATASETS, load_pairs
from seq2seq.datasets.pairs import PairsOptions
from seq2seq.datasets.tsv import load_tsv


def raw_pairs(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f]


def test_reads_real_valid_split_in_both_directions(shared_data):
    folder = shared_data / "spa-eng"
    expected = raw_pairs(folder / "valid.tsv")
    pairs = load_pairs("tsv", path=str(folder), split="valid")
    assert len(pairs) == len(expected) == 2311
    assert (pairs.dropped, pairs.skipped, pairs.alignments) == (0, 0, None)
    assert pairs.sources[:3] == [e for e, _ in expected[:3]]
    assert pairs.targets[:3] == [s for _, s in expected[:3]]
    assert pairs.source_tokens[0] == tokenize_texts([expected[0][0]])[0]

    reverse = load_pairs("tsv", path=str(folder / "valid.tsv"), reverse=True)
    assert reverse.sources == pairs.targets and reverse.targets == pairs.sources
    assert reverse.source_tokens == pairs.target_tokens


def test_max_length_drops_and_counts_long_pairs(shared_data):
    pairs = load_pairs("tsv", path=str(shared_data / "spa-eng"), split="valid")
    limit = 8
    too_long = sum(
        len(s) > limit or len(t) > limit for s, t in zip(pairs.source_tokens, pairs.target_tokens)
    )
    short = load_pairs("tsv", path=str(shared_data / "spa-eng"), split="valid", max_length=limit)
    assert 0 < too_long < len(pairs)
    assert short.dropped == too_long
    assert len(short) == len(pairs) - too_long
    assert max(max(len(s), len(t)) for s, t in zip(short.source_tokens, short.target_tokens)) <= limit


def test_size_keeps_the_first_pairs(shared_data):
    pairs = load_pairs("tsv", path=str(shared_data / "spa-eng"), split="test", size=5)
    assert len(pairs) == 5
    assert pairs.sources[0] == raw_pairs(shared_data / "spa-eng" / "test.tsv")[0][0]


def test_malformed_lines_are_counted_and_warned_not_fatal(tmp_path, caplog):
    path = tmp_path / "bad.tsv"
    path.write_bytes(
        b"Hello.\tHola.\n"
        b"no tab here\n"
        b"a\tb\tc\n"
        b"\xff\xfe broken\tutf8\n"
        b"\tempty source\n"
        b"\n"
        b"Thank you!\t\xc2\xa1Gracias!\r\n"
    )
    with caplog.at_level(logging.WARNING):
        pairs = load_tsv(PairsOptions(path=str(path)))
    assert pairs.sources == ["Hello.", "Thank you!"]
    assert pairs.targets == ["Hola.", "¡Gracias!"]
    assert pairs.skipped == 4
    assert "skipped 4 malformed line(s)" in caplog.text
    assert "line 2 (1 columns)" in caplog.text and "invalid UTF-8" in caplog.text


def test_text_is_nfkc_normalized(tmp_path):
    path = tmp_path / "nfkc.tsv"
    path.write_text("ﬁne\u00a0day\tcafe\u0301\n", encoding="utf-8")
    pairs = load_tsv(PairsOptions(path=str(path)))
    assert pairs.sources == ["fine day"] and pairs.targets == ["café"]
    assert pairs.source_tokens == [["fine", "day"]]


def test_missing_file_is_one_line_data_error(tmp_path):
    with pytest.raises(DataError, match="no such file") as info:
        load_pairs("tsv", path=str(tmp_path / "missing.tsv"))
    assert "\n" not in str(info.value)
    with pytest.raises(DataError, match="test.tsv"):
        load_pairs("tsv", path=str(tmp_path), split="test")
    with pytest.raises(DataError):
        load_pairs("tsv", path=None)


def test_registry_lists_both_datasets():
    assert DATASETS.names() == ["tsv", "dates"]
    with pytest.raises(Exception, match="tsv, dates"):
        load_pairs("nope")
