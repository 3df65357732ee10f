"""Subprocess side of `test_jax_run_writes.py`: `python tests/jax/run_writes_worker.py TASK
ARGS_JSON`, on Keras's JAX backend without TensorFlow (`worker.py`'s block), printing one JSON
line.

Tasks: `kill_at_epoch_end` (a run killed at epoch 0's end, then resumed: the epoch records and
checkpoints it leaves), `full_disk` (a write of the run that finds the disk full: the error
and what the run directory holds after it), and `batch` (several of those in turn in this one
process, each in its own run directory: Keras and JAX are imported once). Each task undoes what
it patched when it ends, however it ends, so the next one starts clean.
"""

from __future__ import annotations

import errno
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.jax import worker  # noqa: E402  (blocks TensorFlow, as for the other JAX tasks)


class Killed(BaseException):
    """Stands for the process dying at that moment."""


def _run_files(run_dir: Path) -> dict:
    from common.training.jax_trainer import complete_jax_checkpoints
    from common.training.run_dir import RunDir

    run = RunDir(run_dir)
    return {"epochs": [r for r in run.read_history() if r["kind"] == "epoch"],
            "steps": [r["step"] for r in run.read_history() if r["kind"] == "step"],
            "checkpoints": [p.name for p in complete_jax_checkpoints(run_dir / "jax")],
            "status": run.read_status(),
            "files": sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                            if p.name.startswith("."))}


def task_kill_at_epoch_end(args):
    """Train 2 epochs of 2 steps (a checkpoint at each epoch's end only), killed once at epoch
    0's end: `args["at"]` "before-the-record", "after-the-record", "before-the-checkpoint" or
    "after-the-checkpoint"; then resumed to the end."""
    from common.training.jax_trainer import JaxTrainer
    from common.training.run_dir import RunDir

    training = {"epochs": 2, "steps_per_epoch": 2, "checkpoint_every": 0, "log_every": 1}
    where, when = args["at"].split("-the-")
    cls, name = (RunDir, "append_history") if when == "record" else (JaxTrainer, "_save")
    real, killed = getattr(cls, name), []

    def dying(self, *rest):
        due = not killed and (rest[0]["kind"] == "epoch" if when == "record" else
                              self.position == {"step": 2, "epoch": 1, "step_in_epoch": 0})
        if due:
            killed.append(True)
            if where == "before":
                raise Killed(args["at"])
        out = real(self, *rest)
        if due:
            raise Killed(args["at"])
        return out

    with mock.patch.object(cls, name, dying):
        try:
            worker._trainer(args, **training).fit(verbose=0)
        except Killed:
            pass
    worker._trainer(args, **training).fit(resume=True, verbose=0)
    return {"killed": bool(killed), **_run_files(Path(args["run_dir"]))}


def task_full_disk(args):
    """One epoch of 2 steps in which `args["write"]` finds the disk full: "vocabulary" (copied
    from the prepared folder), "history", "status", "checkpoint" (its state file) or "weights"
    (the final `model.weights.h5`). The `RunDirError`'s message and what the run holds."""
    import shutil

    import numpy as np

    from common.training import jax_trainer
    from common.training.run_dir import RunDirError

    run_dir = Path(args["run_dir"])

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    write = args["write"]
    with ExitStack() as patches:
        if write == "vocabulary":
            patches.enter_context(mock.patch.object(shutil, "copyfile", full))
        elif write == "history":  # the epoch's record: appended, where the reads are not
            def failing_open(file, mode="r", *a, **k):
                return full() if "a" in mode else open(file, mode, *a, **k)

            patches.enter_context(mock.patch.dict(jax_trainer.RunDir.append_history.__globals__,
                                                  {"open": failing_open}))
        elif write == "status":
            patches.enter_context(mock.patch.dict(jax_trainer.RunDir.write_status.__globals__,
                                                  {"save_json": full}))
        elif write == "checkpoint":
            def savez(file, **arrays):  # a state file cut short
                file.write(b"PK\x03\x04 partial")
                full()

            patches.enter_context(mock.patch.object(np, "savez", savez))
        elif write == "weights":
            real = jax_trainer.JaxTrainer._write_weights

            def write_weights(self, path):
                if path.parent == run_dir:  # the final weights, not a checkpoint's
                    self.model.save_weights = lambda tmp: (Path(tmp).write_bytes(b"partial"),
                                                           full())
                return real(self, path)

            patches.enter_context(mock.patch.object(jax_trainer.JaxTrainer, "_write_weights",
                                                    write_weights))
        trainer = worker._trainer(args, epochs=1, steps_per_epoch=2, checkpoint_every=0)
        try:
            trainer.fit(verbose=0)
            error = None
        except RunDirError as exc:
            error = str(exc)
    return {"error": error, **_run_files(run_dir)}


def task_batch(args):
    """`args["tasks"]` ({name: [TASK, ARGS]}, tasks of this file) in turn in this process."""
    return worker.run_tasks(args["tasks"], globals())


if __name__ == "__main__":
    task, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(globals()[f"task_{task}"](arguments)))
