"""`EpochProgress`: a live bar on a terminal, one plain line per epoch anywhere else."""

import io
import re
import sys

import pytest

from common.training.progress import EpochProgress

# Steps of (loss, count): the epoch's loss is the count-weighted mean, 2.5.
STEPS = [{"loss": 1.0, "count": 1.0, "examples": 2.0}, {"loss": 3.0, "count": 3.0,
                                                        "examples": 2.0}]
ESCAPES = re.compile(r"[\x08\r\x1b]")  # backspace, carriage return, ANSI colours


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_epoch(steps, verbose, known=True):
    progress = EpochProgress(1, 3, len(steps) if known else None, verbose=verbose)
    for metrics in steps:
        progress.update(metrics)
    progress.finish()
    return progress


@pytest.mark.parametrize("verbose, known", [(1, True), (1, False), (2, True), (2, False)])
def test_a_log_file_gets_one_plain_line_per_epoch(capsys, verbose, known):
    # stdout is pytest's capture here, not a terminal, as in `captioner train ... > demo.log`
    # (whose live-bar redraws once made it 725 KB).
    progress = run_epoch(STEPS * 50, verbose, known)
    out = capsys.readouterr().out
    assert not ESCAPES.search(out), out[:200]
    assert out.count("\n") == 1, out[:400]
    steps = "100/100 steps" if known else "100 steps"
    assert re.fullmatch(rf"Epoch 2/3 - {steps} - \d+s - loss: 2\.5000 - examples/s: [\d.]+\n",
                        out), out
    assert progress.means.result()["loss"] == pytest.approx(2.5)


def test_a_terminal_keeps_the_live_bar(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    run_epoch(STEPS, verbose=1)
    out = terminal.getvalue()
    assert out.startswith("Epoch 2/3\n") and ESCAPES.search(out)
    assert "loss: 2.5000" in out


def test_verbose_0_prints_nothing(capsys):
    run_epoch(STEPS, verbose=0)
    assert capsys.readouterr().out == ""
