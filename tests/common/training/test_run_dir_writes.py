"""The run directory's writes: a run stopped at an epoch's end records every epoch once, and a
full disk at any write of the TensorFlow trainer is one `RunDirError` that keeps what was
complete (the checkpoints, an old or new `history.jsonl`)."""

from __future__ import annotations

import errno
import json

import pytest
import tensorflow as tf

from common.training import Trainer, TrainingConfig
from common.training.checkpoints import CheckpointKeeper, latest_checkpoint
from common.training.run_dir import RunDir, RunDirError

from .conftest import TinyRegressor, dataset_maker

NO_SPACE = "No space left on device"


class Killed(BaseException):
    """Stands for the process dying at that moment."""


def fit(run_dir, resume=False, validate=None, **overrides):
    # 32 examples in batches of 8: 4 steps an epoch, a checkpoint at each epoch's end only.
    settings = dict(epochs=3, batch_size=8, learning_rate=0.05, checkpoint_every=0, log_every=2)
    trainer = Trainer(run_dir, TrainingConfig(**{**settings, **overrides}), TinyRegressor)
    return trainer.fit(dataset_maker(8), resume=resume, verbose=0, validate=validate)


def score(model, epoch):
    return {"score": 10.0 + epoch}  # better every epoch: each one is the new best


def kill_once(monkeypatch, cls, name, when, after):
    """Make `cls.name` raise `Killed` the first time `when(*args)` holds, before it runs or
    (`after`) once it has run."""
    real, killed = getattr(cls, name), []

    def dying(*args, **kwargs):
        due = not killed and when(*args, **kwargs)
        killed.extend([True] * due)
        if due and not after:
            raise Killed(name)
        out = real(*args, **kwargs)
        if due:
            raise Killed(name)
        return out

    monkeypatch.setattr(cls, name, dying)


def first_epoch_record(run, record):
    return record["kind"] == "epoch" and record["epoch"] == 1  # numbered from 1


def first_epoch_checkpoint(keeper, step=None):
    return int(keeper.checkpoint.step.numpy()) == 4  # the end of epoch 1 (4 steps)


@pytest.mark.parametrize("cls, name, when, after", [
    (RunDir, "append_history", first_epoch_record, False),
    (RunDir, "append_history", first_epoch_record, True),
    (CheckpointKeeper, "save", first_epoch_checkpoint, False),
    (CheckpointKeeper, "save", first_epoch_checkpoint, True),
], ids=["before-the-record", "after-the-record", "before-the-checkpoint",
        "after-the-checkpoint"])
def test_a_run_killed_at_an_epochs_end_records_every_epoch_once(tmp_path, monkeypatch, cls,
                                                               name, when, after):
    straight = fit(tmp_path / "straight", validate=score)
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_once(patch, cls, name, when, after)
        with pytest.raises(Killed):
            fit(run, validate=score)
    fit(run, resume=True, validate=score)

    records = RunDir(run).read_history()
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [(r["epoch"], r["step"], r["val_score"]) for r in epochs] == [
        (1, 4, 10.0), (2, 8, 11.0), (3, 12, 12.0)]
    for got, want in zip(epochs, straight):  # the epoch redone is recorded as it ran
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
        assert got["best_epoch"] == want["best_epoch"] == got["epoch"]
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == [2, 4, 6, 8, 10, 12]  # none lost, none twice
    assert latest_checkpoint(run / "checkpoints").endswith("ckpt-12")  # numbered by step
    best = json.loads((run / "best" / "best.json").read_text())
    assert (best["epoch"], best["step"]) == (3, 12)
    assert RunDir(run).read_status()["state"] == "finished"


def test_an_early_stopped_run_killed_at_its_last_epochs_end_keeps_that_epochs_record(
        tmp_path, monkeypatch):
    """Early stopping ends the run at epoch 2's end; killed there, the resumed run has
    nothing left to train, so a record not written before the checkpoint was never written."""
    def flat(model, epoch):
        return {"score": 1.0}  # no validation beats epoch 1's

    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        kill_once(patch, CheckpointKeeper, "save",
                  lambda keeper, step=None: int(keeper.checkpoint.step.numpy()) == 8, after=True)
        with pytest.raises(Killed):
            fit(run, validate=flat, early_stopping=1)
    assert fit(run, resume=True, validate=flat, early_stopping=1) == []
    epochs = [r for r in RunDir(run).read_history() if r["kind"] == "epoch"]
    assert [(r["epoch"], r["step"], r["val_score"]) for r in epochs] == [(1, 4, 1.0),
                                                                        (2, 8, 1.0)]


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, NO_SPACE)


def events_no_space(op):
    """What a summary op raises on a full disk (TensorFlow 2.21, measured on a full tmpfs)."""
    def failing(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{{{{function_node __wrapped__{op}_device_/job:localhost/replica:0/task:0/"
            f"device:CPU:0}}}} run/logs/events.out.tfevents.1.host.2.0.v2; {NO_SPACE}\n\tFailed "
            "to flush 3 events to run/logs/events.out.tfevents.1.host.2.0.v2\n\tCould not flush "
            f"events file. [Op:{op}] name: ")

    return failing


@pytest.mark.parametrize("name, op", [("flush", "FlushSummaryWriter"),
                                      ("scalar", "WriteSummary"), ("text", "WriteSummary")])
def test_a_full_disk_at_a_tensorboard_write_is_one_run_dir_error(tmp_path, monkeypatch, name,
                                                                 op):
    run = tmp_path / "run"
    fit(run, epochs=1, validate=score)
    # `text`: the validation's samples; `scalar` and `flush`: the epoch's record too.
    monkeypatch.setattr(tf.summary, name, events_no_space(op))
    with pytest.raises(RunDirError) as caught:
        fit(run, resume=True, epochs=2, validate=lambda model, epoch: {"score": 11.0,
                                                                       "sample": "a caption"})
    message = str(caught.value)
    assert message == (f"cannot write {run / 'logs'}: {NO_SPACE}; expected a writable run "
                       "directory with free space")
    status = RunDir(run).read_status()
    assert status["state"] == "failed" and NO_SPACE in status["error"]
    assert latest_checkpoint(run / "checkpoints").endswith("ckpt-4")  # the complete one, kept
    monkeypatch.undo()
    fit(run, resume=True, epochs=2, validate=score)
    epochs = [r for r in RunDir(run).read_history() if r["kind"] == "epoch"]
    assert [(r["epoch"], r["step"]) for r in epochs] == [(1, 4), (2, 8)]


def test_a_full_disk_when_the_tensorboard_writer_closes_is_one_run_dir_error(tmp_path,
                                                                             monkeypatch):
    create = tf.summary.create_file_writer

    def writer_that_cannot_close(*args, **kwargs):
        writer = create(*args, **kwargs)
        close = writer.close

        def failing_close():
            close()
            events_no_space("CloseSummaryWriter")()

        writer.close = failing_close
        return writer

    monkeypatch.setattr(tf.summary, "create_file_writer", writer_that_cannot_close)
    run = tmp_path / "run"
    with pytest.raises(RunDirError, match=f"cannot write {run / 'logs'}: {NO_SPACE};"):
        fit(run, epochs=1)
    assert RunDir(run).read_status()["state"] == "failed"
    assert latest_checkpoint(run / "checkpoints").endswith("ckpt-4")


def test_a_full_disk_when_a_resume_cuts_the_history_back_keeps_the_old_file(tmp_path,
                                                                            monkeypatch):
    run = tmp_path / "run"
    with monkeypatch.context() as patch:  # killed in epoch 1, after its step 6 was logged
        kill_once(patch, RunDir, "append_history", lambda _, record: record["step"] == 8,
                  after=False)
        with pytest.raises(Killed):
            fit(run, epochs=2)
    before = (run / "history.jsonl").read_bytes()
    assert [r["step"] for r in RunDir(run).read_history()] == [2, 4, 4, 6]
    monkeypatch.setattr("common.training.run_dir.atomic_write_text", no_space)
    with pytest.raises(RunDirError, match=f"cannot write {run / 'history.jsonl'}: {NO_SPACE};"):
        fit(run, resume=True, epochs=2)
    assert (run / "history.jsonl").read_bytes() == before


def test_a_resume_with_nothing_to_cut_back_does_not_rewrite_the_history(tmp_path, monkeypatch):
    run = tmp_path / "run"
    fit(run, epochs=1)
    monkeypatch.setattr("common.training.run_dir.atomic_write_text", no_space)
    assert len(fit(run, resume=True, epochs=2)) == 1  # nothing past ckpt-1: no write to fail


class HalfWrites:
    """A file whose writes take half of what they are given and then find the disk full."""

    def __init__(self, file):
        self.file, self.full = file, False

    def write(self, data):
        if self.full:
            raise OSError(errno.ENOSPC, NO_SPACE)
        self.full = True
        return self.file.write(data[:len(data) // 2])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)


def test_an_append_that_finds_the_disk_full_leaves_the_history_as_it_was(tmp_path,
                                                                         monkeypatch):
    run = RunDir(tmp_path / "run")
    run.append_history({"kind": "step", "epoch": 1, "step": 1, "loss": 1.0})
    before = run.history.read_bytes()
    monkeypatch.setattr("common.training.run_dir.open",
                        lambda *args, **kwargs: HalfWrites(open(*args, **kwargs)), raising=False)
    with pytest.raises(RunDirError, match=f"cannot write {run.history}: {NO_SPACE};"):
        run.append_history({"kind": "epoch", "epoch": 1, "step": 2, "loss": 0.5})
    assert run.history.read_bytes() == before  # no half line for the next one to run into
    monkeypatch.undo()
    run.append_history({"kind": "epoch", "epoch": 1, "step": 2, "loss": 0.5})
    assert [r["step"] for r in run.read_history()] == [1, 2]


def test_status_that_cannot_be_written_is_one_run_dir_error(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.write_status("training", epoch=0, step=0)
    before = run.status.read_bytes()
    monkeypatch.setattr("common.training.run_dir.save_json", no_space)
    with pytest.raises(RunDirError, match=f"cannot write {run.status}: {NO_SPACE};"):
        run.write_status("finished", epoch=1, step=4)
    assert run.status.read_bytes() == before


def test_an_h5py_write_error_is_named_by_its_errno():
    from common.training.run_dir import write_failure

    error = OSError(errno.ENOSPC, "Unable to synchronously create file (file write failed: "
                    "time = Sat Nov 28 10:45:49 2026\n, filename = 'x.weights.h5', file "
                    "descriptor = 3, errno = 28, error message = 'No space left on device')")
    assert str(write_failure("run/model.weights.h5", error)) == (
        f"cannot write run/model.weights.h5: {NO_SPACE}; expected a writable run directory "
        "with free space")
