"""Kill a training run with a real SIGKILL mid-epoch, resume it, and end where an
uninterrupted run ends: same step count, nearly the same final loss."""

from __future__ import annotations

import re
import signal

import pytest

from .conftest import finish, history, read_status, start, wait_for

pytestmark = pytest.mark.slow

# The translator: 2 epochs of 40 steps, a checkpoint every 5 steps.
SEQ2SEQ = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
           "--epochs", "2", "--steps-per-epoch", "40", "--checkpoint-every", "5",
           "--verbose", "1"]
# The captioner: 3 epochs of 15 steps, checkpoints at epoch ends only.
CAPTIONER = ["train", "--preset", "tiny", "--epochs", "3", "--steps-per-epoch", "15",
             "--seed", "7"]


def resumed_from(stdout: str) -> int:
    match = re.search(r"Resuming from \S+ at \{'step': (\d+)", stdout)
    assert match, stdout
    return int(match.group(1))


def kill_and_resume(tmp_path, prog, argv, kill_when):
    """Run `argv` twice side by side; SIGKILL the second once `kill_when(run_dir)` holds and
    resume it. Returns (status at the kill, step resumed from, its dir, the straight dir)."""
    straight_dir, run_dir = tmp_path / "straight", tmp_path / "killed"
    straight = start(prog, *argv, "--out", straight_dir)
    killed = start(prog, *argv, "--out", run_dir)
    at_kill = wait_for(lambda: kill_when(run_dir), killed)
    killed.send_signal(signal.SIGKILL)
    assert finish(killed)[0] == -signal.SIGKILL
    assert read_status(run_dir)["state"] == "training"  # killed, not finished
    # the last step the killed run logged (the translator logs every step)
    at_kill["reached"] = max((r["step"] for r in history(run_dir, "step")), default=None)

    code, out, err = finish(start(prog, *argv, "--out", run_dir, "--resume"))
    assert code == 0, err
    code, _, err = finish(straight)
    assert code == 0, err
    final, expected = read_status(run_dir), read_status(straight_dir)
    assert final["state"] == expected["state"] == "finished"
    assert final["step"] == expected["step"]
    return at_kill, resumed_from(out), run_dir, straight_dir


def saved_checkpoint(run_dir, min_step_in_epoch=0):
    status = read_status(run_dir)
    if status and status.get("checkpoint") and status["step_in_epoch"] >= min_step_in_epoch:
        return status
    return None


def test_translator_killed_mid_epoch_resumes_to_the_same_end(tmp_path):
    at_kill, restart, run_dir, straight_dir = kill_and_resume(
        tmp_path, "seq2seq", SEQ2SEQ, lambda run: saved_checkpoint(run, 10))
    assert at_kill["epoch"] == 1 and at_kill["epochs_done"] == 0  # in the first epoch
    steps, straight_steps = history(run_dir, "step"), history(straight_dir, "step")
    assert restart % 5 == 0 and at_kill["step"] <= restart < 80
    assert at_kill["reached"] - 5 <= restart <= at_kill["reached"]  # <= one interval lost
    assert [r["step"] for r in steps] == list(range(1, 81))  # each step logged once
    assert read_status(run_dir)["step"] == 80
    for got, want in zip(steps[-10:], straight_steps[-10:]):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)


def test_captioner_killed_mid_epoch_resumes_to_the_same_end(tmp_path):
    at_kill, restart, run_dir, straight_dir = kill_and_resume(
        tmp_path, "captioner", CAPTIONER, saved_checkpoint)
    assert at_kill["step"] == 15  # the end of the first epoch
    assert restart in (15, 30)  # an epoch is the checkpoint interval here
    assert read_status(run_dir)["step"] == 45
    got, want = history(run_dir, "epoch")[-1], history(straight_dir, "epoch")[-1]
    assert got["epoch"] == want["epoch"] == 3  # the third, as the log numbers it
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)
