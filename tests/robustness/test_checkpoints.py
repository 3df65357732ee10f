"""Checkpoints survive a save cut short, a damaged newest checkpoint, a full disk and a
diverging loss: training resumes from the last complete checkpoint and nothing bad is saved."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.ops import gen_io_ops

from common.errors import UserError
from common.training import Trainer, TrainingConfig, TrainingDiverged, restore_model
from common.training.checkpoints import complete_checkpoints, latest_checkpoint
from common.training.run_dir import RunDirError
from tests.common.training.conftest import TinyRegressor, dataset_maker


class Killed(BaseException):
    """Stands for the process dying in the middle of a save."""


def fit(run_dir, resume=False, make_dataset=None, model=TinyRegressor, **overrides):
    # 32 examples in batches of 8: 4 steps an epoch; saves after steps 2, 4, 6, 8.
    settings = dict(epochs=2, batch_size=8, learning_rate=0.05, checkpoint_every=2, log_every=1)
    trainer = Trainer(run_dir, TrainingConfig(**{**settings, **overrides}), model)
    trainer.fit(make_dataset or dataset_maker(8), resume=resume, verbose=0)
    return trainer


def weights(model):
    return [np.array(v) for v in model.weights]


def kill_on_save(monkeypatch, module, name, checkpoint):
    """Make `module.name` raise `Killed` when it is called while `checkpoint` is saved."""
    real = getattr(module, name)

    def dying(*args, **kwargs):
        if any(checkpoint in str(value) for value in (*args, *kwargs.values())):
            raise Killed(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, dying)


@pytest.mark.parametrize("where, resumed_step", [
    # killed after the shards were written, before they became ckpt-6.index/.data
    ((gen_io_ops, "merge_v2_checkpoints"), 4),
    # killed after ckpt-6 was complete, before the `checkpoint` state file named it
    ((checkpoint_management, "update_checkpoint_state_internal"), 6),
])
def test_a_save_cut_short_leaves_a_usable_checkpoint(tmp_path, monkeypatch, where, resumed_step):
    straight = fit(tmp_path / "straight")
    run = tmp_path / "run"
    kill_on_save(monkeypatch, *where, "ckpt-6")  # the save after step 6
    with pytest.raises(Killed):
        fit(run)
    monkeypatch.undo()

    latest = latest_checkpoint(run / "checkpoints")
    probe = TinyRegressor()
    probe.loss_terms(next(iter(dataset_maker(8)(0, tf.distribute.InputContext()))), False)
    assert restore_model(probe, run) == latest
    resumed = Trainer(run, TrainingConfig(epochs=2, batch_size=8, learning_rate=0.05,
                                          checkpoint_every=2, log_every=1), TinyRegressor)
    resumed.build(dataset_maker(8))
    assert resumed.restore() == latest
    assert resumed.state.as_dict()["step"] == resumed_step
    resumed = fit(run, resume=True)
    assert resumed.state.as_dict() == {"step": 8, "epoch": 2, "step_in_epoch": 0}
    for got, want in zip(weights(resumed.model), weights(straight.model)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_damaged_newest_checkpoints_are_skipped(tmp_path, capsys):
    run = tmp_path / "run"
    fit(run, keep_checkpoints=4)
    directory = run / "checkpoints"
    names = [Path(p).name for p in complete_checkpoints(directory)]
    assert names == ["ckpt-8", "ckpt-6", "ckpt-4", "ckpt-2"]  # numbered by step
    # ckpt-8 lost its index (the state file still names it); ckpt-6's data is cut in half.
    (directory / "ckpt-8.index").unlink()
    data = next(directory.glob("ckpt-6.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    assert Path(latest_checkpoint(directory)).name == "ckpt-6"

    trainer = Trainer(run, TrainingConfig(epochs=3, batch_size=8, checkpoint_every=2),
                      TinyRegressor)
    trainer.build(dataset_maker(8))
    assert Path(trainer.restore()).name == "ckpt-4"
    assert "skipping unreadable checkpoint" in capsys.readouterr().err
    assert trainer.state.as_dict() == {"step": 4, "epoch": 1, "step_in_epoch": 0}
    probe = TinyRegressor()
    probe.loss_terms(next(iter(dataset_maker(8)(0, tf.distribute.InputContext()))), False)
    assert Path(restore_model(probe, run)).name == "ckpt-4"  # for evaluation and export too
    trainer.fit(dataset_maker(8), resume=True, verbose=0)  # and trains on to the end
    assert trainer.state.as_dict()["step"] == 12


def test_a_named_checkpoint_that_cannot_be_read_is_a_user_error(tmp_path):
    run = tmp_path / "run"
    trainer = fit(run)
    data = next((run / "checkpoints").glob("ckpt-8.data-*"))
    data.write_bytes(b"garbage")
    with pytest.raises(UserError, match="cannot be read"):
        trainer.restore(str(run / "checkpoints" / "ckpt-8"))


def test_a_loss_that_diverges_deletes_the_checkpoint_of_the_weights_that_caused_it(tmp_path):
    run = tmp_path / "run"
    # The loss of step 7 is NaN; checkpoint_every=3 saved step 6 just before it, whose
    # weights gave that loss: it goes, and the model is back at step 4 (the end of epoch 0).
    trainer = Trainer(run, TrainingConfig(epochs=2, batch_size=8, checkpoint_every=3),
                      lambda: TinyRegressor(poison_step=6))
    with pytest.raises(TrainingDiverged, match=r"loss was nan at step 7.*ckpt-4"):
        trainer.fit(dataset_maker(8), verbose=0)
    assert [Path(p).name for p in complete_checkpoints(run / "checkpoints")] == [
        "ckpt-4", "ckpt-3"]
    assert trainer.state.as_dict() == {"step": 4, "epoch": 1, "step_in_epoch": 0}
    state = json.loads((run / "status.json").read_text())
    assert state["state"] == "failed" and "TrainingDiverged" in state["error"]


def test_non_finite_weights_are_never_saved(tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(run, TrainingConfig(epochs=2, batch_size=8, checkpoint_every=2),
                      TinyRegressor)
    make_dataset = dataset_maker(8)
    trainer.build(make_dataset)
    trainer.fit(make_dataset, verbose=0)
    trainer.model.dense.kernel.assign(np.full((3, 2), np.inf, "float32"))
    with pytest.raises(TrainingDiverged, match="a weight became NaN or infinite"):
        trainer._save()
    assert Path(latest_checkpoint(run / "checkpoints")).name == "ckpt-8"
    assert np.all(np.isfinite(trainer.model.dense.kernel))  # restored


def test_a_full_disk_stops_with_a_clear_error_and_keeps_the_checkpoints(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    run = tmp_path / "run"
    base = dataset_maker(8)

    def make_dataset(epoch, context):
        if epoch == 1 and (run / "history.jsonl").exists():
            # From now on every write to the history fails as on a full disk (ENOSPC).
            (run / "history.jsonl").unlink()
            (run / "history.jsonl").symlink_to("/dev/full")
        return base(epoch, context)

    with pytest.raises(RunDirError, match="history.jsonl: No space left on device"):
        fit(run, make_dataset=make_dataset)
    state = json.loads((run / "status.json").read_text())
    assert state["state"] == "failed" and "No space left" in state["error"]
    assert Path(latest_checkpoint(run / "checkpoints")).name == "ckpt-4"  # end of epoch 0
    (run / "history.jsonl").unlink()
    assert fit(run, resume=True).state.as_dict()["step"] == 8


def test_a_checkpoint_that_cannot_be_written_is_a_clear_error(tmp_path, monkeypatch):
    run = tmp_path / "run"

    def no_space(self, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{run}/checkpoints/ckpt-1_temp; No space left on device")

    monkeypatch.setattr(tf.train.CheckpointManager, "save", no_space)
    with pytest.raises(RunDirError, match=r"cannot write .*checkpoints: .*No space left"):
        fit(run)
    assert json.loads((run / "status.json").read_text())["state"] == "failed"


def test_a_save_that_fails_half_way_leaves_no_shard_folder(tmp_path, monkeypatch):
    """TensorFlow writes the shards into `ckpt-N_temp/` and merges them: a merge that fails (a
    full disk) left the folder in the run, where nothing ever removed it."""
    run = tmp_path / "run"

    def no_space(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")

    fit(run, epochs=1)  # ckpt-2 and ckpt-4 (after steps 2 and 4)
    monkeypatch.setattr(gen_io_ops, "merge_v2_checkpoints", no_space)
    with pytest.raises(RunDirError, match=r"cannot write .*checkpoints: .*No space left"):
        fit(run, resume=True, epochs=2)
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir()) == []
    assert Path(latest_checkpoint(run / "checkpoints")).name == "ckpt-4"


def test_claim_refuses_a_directory_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(RunDirError, match=f"cannot write {blocker}/run: Not a directory"):
        fit(blocker / "run")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("a file where the checkpoints go")
    with pytest.raises(RunDirError, match="checkpoints is a file"):
        fit(run, resume=True)
    if os.geteuid() == 0:
        return  # root writes through permission bits; the CLI test covers the path cases
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        with pytest.raises(RunDirError, match=errno.errorcode[errno.EACCES] + "|Permission"):
            fit(readonly)
    finally:
        readonly.chmod(0o755)


@pytest.mark.slow
def test_a_vocabulary_changed_since_training_is_named_not_warned_about(tmp_path):
    """A line added to a run's vocabulary makes the model built from it larger than its
    checkpoint: one line naming the shapes and the likely cause, and none of TensorFlow's
    warnings about unrestored values after it."""
    from seq2seq.cli import main
    from tests.robustness.conftest import cli_command, cli_env

    run = tmp_path / "run"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--epochs", "1", "--steps-per-epoch", "2", "--verbose", "0",
                 "--out", str(run)]) == 0
    with open(run / "vocab.target.txt", "a", encoding="utf-8") as f:
        f.write("added\n")
    import subprocess

    def refusal():
        result = subprocess.run(cli_command("seq2seq", "translate", run, "Nov 3, 1999"),
                                capture_output=True, text=True, env=cli_env(), timeout=300)
        assert result.returncode == 2
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        return lines[0]

    # The run's vocab.sha256 says so first; a run made before it had one, by the shapes.
    assert "vocab.target.txt: changed since the run was trained" in refusal()
    (run / "vocab.sha256").unlink()
    line = refusal()
    assert "does not match the model" in line and "a vocabulary file changed" in line
