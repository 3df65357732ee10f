"""The `tsv` dataset reads UTF-8 only: a UTF-16/UTF-32 file is refused in one line, a NUL
character makes a line malformed, a UTF-8 byte order mark is dropped, and a side holding only
separators (a zero-width space) is an empty side; `dates` refuses a file it would ignore."""

import codecs
import logging

import pytest

from common.errors import DataError, UserError
from seq2seq.datasets import load_pairs
from seq2seq.datasets.tsv import read_tsv

PAIRS = "i am here\testoy aquí\nwe go home\tvamos a casa\n"


@pytest.mark.parametrize("bom, encoding, name", [
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 (little-endian)"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 (big-endian)"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 (little-endian)"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 (big-endian)"),
])
def test_a_utf16_or_utf32_file_is_refused_naming_its_encoding(tmp_path, bom, encoding, name):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(bom + PAIRS.encode(encoding))
    with pytest.raises(DataError) as caught:
        load_pairs("tsv", path=str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and name in message and "expected UTF-8" in message
    assert "\n" not in message


def test_a_line_with_a_nul_character_is_malformed(tmp_path, caplog):
    path = tmp_path / "pairs.tsv"
    # UTF-16 without its mark decodes as UTF-8, a NUL after each ASCII character.
    path.write_bytes(PAIRS.encode("utf-8") + "hello\tbye".encode("utf-16-le") + b"\n")
    with caplog.at_level(logging.WARNING):
        sources, targets, skipped = read_tsv(path)
    assert sources == ["i am here", "we go home"] and skipped == 1
    assert "line 3 (a NUL character)" in caplog.text
    assert not any("\x00" in text for text in sources + targets)


def test_a_utf8_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(codecs.BOM_UTF8 + (PAIRS + "i am here\taquí estoy\n").encode("utf-8"))
    pairs = load_pairs("tsv", path=str(path))
    assert pairs.sources[0] == "i am here" == pairs.sources[2]  # one source, grouped as one
    assert pairs.source_tokens[0] == ["i", "am", "here"]
    assert load_pairs("tsv", path=str(path), reverse=True).targets[0] == "i am here"


def test_a_byte_order_mark_inside_the_file_is_kept_as_text(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(PAIRS.encode("utf-8") + codecs.BOM_UTF8 + b"x\ty\n")
    assert read_tsv(path)[0][-1] == "\ufeffx"  # only a first line's mark is a mark


@pytest.mark.parametrize("side", ["\u200b", "\u200b \u2060", "\u00a0\u200b"])
def test_a_side_of_separators_only_is_an_empty_side(tmp_path, caplog, side):
    path = tmp_path / "pairs.tsv"
    path.write_text(PAIRS + f"{side}\tvacío\nnada\t{side}\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        pairs = load_pairs("tsv", path=str(path))
    assert pairs.sources == ["i am here", "we go home"] and pairs.skipped == 2
    assert all(pairs.source_tokens) and all(pairs.target_tokens)
    assert "line 3 (an empty side)" in caplog.text and "line 4 (an empty side)" in caplog.text


def test_dates_refuses_a_file_it_would_ignore(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text(PAIRS, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_pairs("dates", path=str(path), split="valid", size=2)
    message = str(caught.value)
    assert "reads no file" in message and "--data" in message and "\n" not in message
    assert len(load_pairs("dates", split="valid", size=2)) == 2
