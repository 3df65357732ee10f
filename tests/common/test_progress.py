"""Progress of a long decoding (`common.progress`): a live bar on a terminal, plain lines in a
log."""

import io
import re

from common.progress import LineProgress, progress_bar


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_a_line_per_tenth_and_a_last_line_without_carriage_returns():
    log = io.StringIO()
    bar = progress_bar(1000, "decoding", "sentences", stream=log)
    assert isinstance(bar, LineProgress)
    for _ in range(0, 1000, 64):  # chunks of 64, the last one shorter
        bar.update(min(64, 1000 - bar.done))
    bar.close()
    bar.close()  # once
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 10, lines  # 9 tenths crossed before the end, then the end
    assert all(re.fullmatch(r"decoding: \d+/1000 sentences \(\d+%\), \d+s", line)
               for line in lines[:-1]), lines
    assert [int(line.split("(")[1].split("%")[0]) // 10 for line in lines[:-1]] == list(
        range(1, 10))
    assert re.fullmatch(r"decoding: 1000/1000 sentences in \d+s \([\d.]+ sentences/s\)",
                        lines[-1]), lines[-1]


def test_a_slow_decoding_says_it_goes_on_within_a_minute_and_a_stopped_one_has_no_end_line():
    log = io.StringIO()
    bar = LineProgress(1000, "decoding", "sentences", stream=log, every_s=0.0)
    bar.update(1)
    bar.update(1)  # no tenth crossed, but the time since the last line has passed
    bar.close()  # 2 of 1000: no "in Ns" line
    assert [line.split(",")[0] for line in log.getvalue().splitlines()] == [
        "decoding: 1/1000 sentences (0%)", "decoding: 2/1000 sentences (0%)"]


def test_a_terminal_gets_the_live_bar():
    terminal = Terminal()
    bar = progress_bar(10, "decoding", "sentences", stream=terminal)
    bar.update(10)
    bar.close()
    assert not isinstance(bar, LineProgress) and "\r" in terminal.getvalue()


def test_the_translators_decoding_writes_lines_to_a_stderr_that_is_a_file(monkeypatch):
    from seq2seq.inference import chunks

    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert [len(c) for c in chunks(list(range(100)), 30, progress=True)] == [30, 30, 30, 10]
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 4, lines
    assert lines[-1].startswith("decoding: 100/100 sentences in ")
