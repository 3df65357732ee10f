"""The JAX trainer's run directory: a run killed at an epoch's end records every epoch once,
and a write that finds the disk full is one `RunDirError` that leaves no partial file."""

from __future__ import annotations

import pytest

from tests.jax.conftest import REPO, finish_worker, requires_jax, worker_env

pytestmark = [requires_jax, pytest.mark.slow]

WORKER = REPO / "tests" / "jax" / "run_writes_worker.py"


def run_task(task: str, args: dict) -> dict:
    import json
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, str(WORKER), task, json.dumps(args)],
                               env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    return finish_worker(process)


@pytest.mark.parametrize("at", ["after-the-record", "after-the-checkpoint"])
def test_a_run_killed_at_an_epochs_end_records_every_epoch_once(caption_folder, tmp_path, at):
    """Killed between epoch 0's record and its checkpoint, the run resumes before that epoch,
    drops its line and records it again; killed after both, it resumes after it."""
    result = run_task("kill_at_epoch_end", {"prepared": str(caption_folder),
                                            "run_dir": str(tmp_path / "run"), "at": at})
    assert result["killed"]
    epochs = result["epochs"]
    assert [(r["epoch"], r["step"]) for r in epochs] == [(0, 2), (1, 4)], epochs
    assert all("val_loss" in r for r in epochs)
    assert result["steps"] == [1, 2, 3, 4]  # none lost, none twice
    assert result["checkpoints"] == ["ckpt-4", "ckpt-2"]
    assert result["status"]["state"] == "finished"


@pytest.mark.parametrize("write, named", [
    ("vocabulary", "vocab.txt"),
    ("checkpoint", "jax"),
    ("weights", "model.weights.h5"),
    ("history", "history.jsonl"),
])
def test_a_full_disk_is_one_run_dir_error_without_partial_files(caption_folder, tmp_path, write,
                                                                named):
    run = tmp_path / "run"
    result = run_task("full_disk", {"prepared": str(caption_folder), "run_dir": str(run),
                                    "write": write})
    assert result["error"] == (f"cannot write {run / named}: No space left on device; expected "
                               "a writable run directory with free space")
    assert result["files"] == []  # no half-written copy, checkpoint or weights left behind
    assert result["checkpoints"] == ([] if write != "weights" else ["ckpt-2"])
    if write != "vocabulary":  # the run had started
        assert result["status"]["state"] == "failed"
        assert "No space left on device" in result["status"]["error"]
