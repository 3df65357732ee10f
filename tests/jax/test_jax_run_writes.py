"""The JAX trainer's run directory: a run killed at an epoch's end records every epoch once,
and a write that finds the disk full is one `RunDirError` that leaves no partial file.

Every scenario runs in one JAX subprocess for the module (`run_writes`), each in its own run
directory; each test reads its own scenario's result."""

from __future__ import annotations

import pytest

from tests.jax.conftest import REPO, finish_worker, requires_jax, worker_env

pytestmark = [requires_jax, pytest.mark.slow]

WORKER = REPO / "tests" / "jax" / "run_writes_worker.py"
KILLED_AT = ["after-the-record", "after-the-checkpoint"]
FULL_DISK = [("vocabulary", "vocab.txt"), ("checkpoint", "jax"), ("weights", "model.weights.h5"),
             ("history", "history.jsonl")]


def run_task(task: str, args: dict, timeout: float = 300) -> dict:
    import json
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, str(WORKER), task, json.dumps(args)],
                               env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    return finish_worker(process, timeout)


@pytest.fixture(scope="module")
def run_writes(caption_folder, tmp_path_factory) -> dict:
    """Each scenario's result and run directory, by name ("kill:AT", "full:WRITE")."""
    root = tmp_path_factory.mktemp("run-writes")
    scenarios = {f"kill:{at}": ["kill_at_epoch_end", {"at": at}] for at in KILLED_AT}
    scenarios |= {f"full:{write}": ["full_disk", {"write": write}] for write, _ in FULL_DISK}
    for name, (_, args) in scenarios.items():
        run_dir = root / name.replace(":", "-") / "run"
        args.update(prepared=str(caption_folder), run_dir=str(run_dir))
    results = run_task("batch", {"tasks": scenarios}, timeout=1800)
    return {name: (results[name], args["run_dir"]) for name, (_, args) in scenarios.items()}


def _result(run_writes: dict, name: str) -> tuple[dict, str]:
    result, run_dir = run_writes[name]
    assert "crashed" not in result, result.get("crashed")
    return result, run_dir


@pytest.mark.parametrize("at", KILLED_AT)
def test_a_run_killed_at_an_epochs_end_records_every_epoch_once(run_writes, at):
    """Killed between the first epoch's record and its checkpoint, the run resumes before
    that epoch, drops its line and records it again; killed after both, it resumes after it."""
    result, _ = _result(run_writes, f"kill:{at}")
    assert result["killed"]
    epochs = result["epochs"]
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 2), (2, 4)], epochs
    assert all("val_loss" in r for r in epochs)
    assert result["steps"] == [1, 2, 3, 4]  # none lost, none twice
    assert result["checkpoints"] == ["ckpt-4", "ckpt-2"]
    assert result["status"]["state"] == "finished"


@pytest.mark.parametrize("write, named", FULL_DISK)
def test_a_full_disk_is_one_run_dir_error_without_partial_files(run_writes, write, named):
    from pathlib import Path

    result, run_dir = _result(run_writes, f"full:{write}")
    run = Path(run_dir)
    assert result["error"] == (f"cannot write {run / named}: No space left on device; expected "
                               "a writable run directory with free space")
    assert result["files"] == []  # no half-written copy, checkpoint or weights left behind
    assert result["checkpoints"] == ([] if write != "weights" else ["ckpt-2"])
    if write != "vocabulary":  # the run had started
        assert result["status"]["state"] == "failed"
        assert "No space left on device" in result["status"]["error"]
