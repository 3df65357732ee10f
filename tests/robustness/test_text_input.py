"""`seq2seq translate` on whatever text users have: every line gets a translation or its own
one-line error, and the rest of the input still goes through, for a run directory and for a
SavedModel alike. Standard input is fed as real bytes (invalid UTF-8 included)."""

from __future__ import annotations

import io
import json
import os

import pytest

from seq2seq.cli import main

pytestmark = pytest.mark.slow

# (line as bytes, what must come back: "ok", "empty" or "long")
CASES = [
    (b"March 3, 1999", "ok"),
    (b"", "empty"),
    (b" \t  \xc2\xa0 ", "empty"),                                    # whitespace, NBSP
    ("?!... ,;: -- «»".encode(), "ok"),                             # punctuation only
    ("🎉🎂 🚀 👩‍👩‍👧".encode(), "ok"),                                # emoji, ZWJ sequence
    ("Привет 世界 مرحبا March 3, 1999 Ελλάδα हिन्दी".encode(), "ok"),  # mixed scripts
    ("Nov\x00 3\x1b[31m, 1999\u200b\u202e\x07\x7f\r".encode(), "ok"),  # control characters
    (b"March \xff\xfe 3, \xc3 1999", "ok"),                          # invalid UTF-8
    (b" ".join([b"word"] * 5000), "long"),                         # 5,000 words
    (b"x" * 20000, "ok"),                                           # one 20,000-char token
]


def translate_stdin(model, data: bytes, monkeypatch, capsys, *options):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    status = main(["translate", str(model), "--json", *options])
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    errors = [line for line in captured.err.splitlines() if line.strip()]
    return status, records, errors


@pytest.mark.parametrize("kind", ["run directory", "SavedModel"])
def test_every_kind_of_line_gets_a_translation_or_its_own_error(kind, models, monkeypatch,
                                                                capsys):
    data = b"\n".join(line for line, _ in CASES) + b"\n"
    status, records, errors = translate_stdin(models[kind], data, monkeypatch, capsys)
    assert status == 2  # some lines failed
    assert [r["line"] for r in records] == list(range(1, len(CASES) + 1))
    for (line, expected), record in zip(CASES, records):
        if expected == "ok":
            assert "error" not in record, (line[:40], record.get("error"))
            assert isinstance(record["translation"], str)
        elif expected == "empty":
            assert "empty line" in record["error"]
        else:
            assert "5000 tokens; this model accepts at most" in record["error"]
    invalid = records[7]
    assert "\ufffd" in invalid["source"] and "invalid UTF-8" in invalid["warning"]
    assert len(records[9]["source"]) == 20000
    failures = [e for e in errors if "warning" not in e]
    assert [e.split(":")[1] for e in failures] == [" line 2", " line 3", " line 9"]
    assert all(len(e) < 300 for e in errors)  # one short line each, not the input echoed


@pytest.mark.parametrize("kind", ["run directory", "SavedModel"])
def test_five_hundred_lines_at_once(kind, models, monkeypatch, capsys):
    sentences = [b"March 3, 1999", b"25th of November 2026", b"", b"3/3/1999"]
    lines = [sentences[i % 4] for i in range(500)]
    status, records, errors = translate_stdin(models[kind], b"\n".join(lines) + b"\n",
                                              monkeypatch, capsys, "--batch-size", "64")
    assert status == 2 and len(records) == 500
    assert [r["line"] for r in records] == list(range(1, 501))
    assert sum("error" in r for r in records) == 125
    same = {r["source"]: r["translation"] for r in records if "error" not in r}
    assert all(r["translation"] == same[r["source"]] for r in records if "error" not in r)


def test_invalid_utf8_in_arguments_is_replaced_not_fatal(models, capsys):
    text = b"March \xff 3, 1999".decode("utf-8", errors="surrogateescape")  # as the shell
    assert main(["translate", str(models["run directory"]), text, "March 3, 1999"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "line 1: warning: invalid UTF-8" in captured.err


def test_a_terminal_on_stdin_is_told_how_to_end_the_input(models, monkeypatch, capsys):
    """Someone typing at `translate RUN` with no sentences is told what it waits for; a pipe
    or a file is not (the tests above see no such line on stderr)."""
    master, slave = os.openpty()
    try:
        os.write(master, b"March 3, 1999\n\x04")  # a line, then Ctrl-D at a line's start
        with io.TextIOWrapper(open(slave, "rb", closefd=False), encoding="utf-8") as terminal:
            monkeypatch.setattr("sys.stdin", terminal)
            assert main(["translate", str(models["run directory"]), "--json"]) == 0
    finally:
        os.close(master)
        os.close(slave)
    captured = capsys.readouterr()
    assert [json.loads(line)["source"] for line in captured.out.splitlines()] == ["March 3, 1999"]
    hint, *rest = captured.err.splitlines()
    assert hint == ("seq2seq translate: reading sentences from the terminal, one per line; end "
                    "with Ctrl-D (or give them as arguments)")
    assert all("line 1: warning" in line for line in rest)  # the tiny model's own warnings
