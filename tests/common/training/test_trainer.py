"""The trainer on one device: learning, NumPy-exact steps, checkpoints, resume, divergence."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.training import Trainer, TrainingConfig, TrainingDiverged, restore_model
from common.training.checkpoints import complete_checkpoints
from common.training.events import event_files, read_events
from common.training.run_dir import RunDirError, write_failure

from .conftest import TinyRegressor, dataset_maker, regression_data


def sgd(config):
    return keras.optimizers.SGD(config.learning_rate)


def weights(model):
    return [np.array(v) for v in model.weights]


def optimizer_state(optimizer):
    return [np.array(v) for v in optimizer.variables]


def fit(run_dir, resume=False, dropout=0.0, make_dataset=None, validate=None, **overrides):
    settings = dict(epochs=2, batch_size=8, learning_rate=0.05, checkpoint_every=2, log_every=2)
    config = TrainingConfig(**{**settings, **overrides})
    trainer = Trainer(run_dir, config, lambda: TinyRegressor(dropout=dropout))
    history = trainer.fit(make_dataset or dataset_maker(8), resume=resume, verbose=0,
                          validate=validate)
    return trainer, history


def test_loss_decreases(run_dir):
    _, history = fit(run_dir, epochs=6)
    assert [r["epoch"] for r in history] == list(range(1, 7))  # numbered as the log does
    assert history[-1]["loss"] < 0.3 * history[0]["loss"]
    assert all(np.isfinite(r["abs_error"]) for r in history)


@pytest.mark.parametrize("clip_norm", [None, 0.5])
def test_steps_match_numpy_sgd(run_dir, clip_norm):
    config = TrainingConfig(epochs=1, batch_size=8, learning_rate=0.1, clip_norm=clip_norm)
    trainer = Trainer(run_dir, config, TinyRegressor, build_optimizer=sgd)
    make_dataset = dataset_maker(8, shuffle=False)
    trainer.build(make_dataset)
    kernel, bias = (np.array(v, dtype="float64") for v in trainer.model.dense.weights)
    history = trainer.fit(make_dataset, verbose=0)

    x, y = regression_data()
    losses, counts = [], []
    for start in range(0, len(x), 8):
        xb, yb = x[start:start + 8], y[start:start + 8]
        error = xb @ kernel + bias - yb
        losses.append(np.sum(error**2) / len(xb))
        counts.append(len(xb))
        grad_kernel = 2 * xb.T @ error / len(xb)
        grad_bias = 2 * error.sum(axis=0) / len(xb)
        if clip_norm is not None:
            norm = np.sqrt(np.sum(grad_kernel**2) + np.sum(grad_bias**2))
            scale = clip_norm / max(norm, clip_norm)
            assert scale < 1  # the clipping case really clips
            grad_kernel, grad_bias = grad_kernel * scale, grad_bias * scale
        kernel -= 0.1 * grad_kernel
        bias -= 0.1 * grad_bias

    np.testing.assert_allclose(trainer.model.dense.kernel, kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(trainer.model.dense.bias, bias, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(history[0]["loss"], np.average(losses, weights=counts), rtol=1e-4)
    assert history[0]["step"] == len(losses)


def test_resume_after_an_epoch_matches_uninterrupted_run(tmp_path):
    straight, straight_history = fit(tmp_path / "a", epochs=2, dropout=0.3)

    first, _ = fit(tmp_path / "b", epochs=1, dropout=0.3)
    assert json.loads((tmp_path / "b" / "status.json").read_text())["state"] == "finished"
    resumed, resumed_history = fit(tmp_path / "b", resume=True, epochs=2, dropout=0.3)

    assert [r["epoch"] for r in resumed_history] == [2]
    for got, want in zip(weights(resumed.model), weights(straight.model)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for got, want in zip(optimizer_state(resumed.optimizer), optimizer_state(straight.optimizer)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(resumed_history[0]["loss"], straight_history[1]["loss"], rtol=1e-6)
    assert resumed.state.as_dict() == {"step": 8, "epoch": 2, "step_in_epoch": 0}


def crash_in_epoch_1_at_batch_3(make_dataset):
    def crashing(epoch, context):
        dataset = make_dataset(epoch, context)
        if epoch != 1:
            return dataset

        def check(index, batch):
            with tf.control_dependencies([tf.debugging.assert_less(index, tf.constant(3, "int64"))]):
                return tf.nest.map_structure(tf.identity, batch)

        return dataset.enumerate().map(check)

    return crashing


def test_resume_mid_epoch_after_a_crash_matches_uninterrupted_run(tmp_path):
    straight, _ = fit(tmp_path / "a", epochs=2)
    run = tmp_path / "b"
    with pytest.raises(tf.errors.InvalidArgumentError):
        fit(run, epochs=2, make_dataset=crash_in_epoch_1_at_batch_3(dataset_maker(8)))
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "InvalidArgumentError" in status["error"]
    # Checkpoint every 2 steps: the last one before the crash is at step 6 = epoch 2 (the
    # log's numbering), 2 steps in; the status says the step it failed at, in epoch 2.
    assert (status["step"], status["epoch"], status["epochs_done"]) == (7, 2, 1)
    resumed, _ = fit(run, resume=True, epochs=2)
    for got, want in zip(weights(resumed.model), weights(straight.model)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    steps = [r["step"] for r in map(json.loads, (run / "history.jsonl").read_text().splitlines())
             if r["kind"] == "step"]
    assert steps == [2, 4, 6, 8]  # the lines of the lost step 7 were not duplicated


def logged(run_dir, tag):
    """`tag`'s TensorBoard events under `run_dir/logs` as (step, value), in step order."""
    return sorted((event.step, float(tf.make_ndarray(value.tensor)))
                  for path in event_files(run_dir / "logs") for event in read_events(path)
                  for value in event.summary.value if value.tag == tag)


def test_resume_cuts_tensorboard_events_back_to_the_checkpoint(tmp_path):
    run = tmp_path / "b"
    with pytest.raises(tf.errors.InvalidArgumentError):
        fit(run, epochs=2, log_every=1, make_dataset=crash_in_epoch_1_at_batch_3(dataset_maker(8)))
    # Saved at step 6, logged step 7 before the crash.
    assert [step for step, _ in logged(run, "train/loss")] == [1, 2, 3, 4, 5, 6, 7]
    fit(run, resume=True, epochs=2, log_every=1)
    assert [step for step, _ in logged(run, "train/loss")] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [step for step, _ in logged(run, "epoch/loss")] == [4, 8]
    straight = tmp_path / "a"
    fit(straight, epochs=2, log_every=1)
    np.testing.assert_allclose(logged(run, "train/loss"), logged(straight, "train/loss"),
                               rtol=1e-6)


def test_events_that_cannot_be_cut_back_are_one_run_dir_error(run_dir, monkeypatch):
    fit(run_dir, epochs=1)

    def no_space(logs, step):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("common.training.trainer.truncate_events", no_space)
    with pytest.raises(RunDirError, match=r"cannot write .*logs: No space left on device"):
        fit(run_dir, resume=True, epochs=2)


def test_a_resume_past_a_lowered_steps_per_epoch_ends_that_epoch_and_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(tf.errors.InvalidArgumentError):
        fit(run, epochs=2, make_dataset=crash_in_epoch_1_at_batch_3(dataset_maker(8)))
    config = TrainingConfig(epochs=3, batch_size=8, learning_rate=0.05, checkpoint_every=2,
                            log_every=2, steps_per_epoch=2)
    trainer = Trainer(run, config, TinyRegressor)
    capsys.readouterr()
    history = trainer.fit(dataset_maker(8), resume=True, verbose=2)
    said = capsys.readouterr().out
    assert "Epoch 2 already ran 2 steps, steps_per_epoch is now 2: it ends without training" in said
    # Epoch 2 ends at the checkpoint's step 6 with no loss; epoch 3 trains its 2 steps.
    assert [(r["epoch"], r["step"], "loss" in r) for r in history] == [(2, 6, False), (3, 8, True)]


@pytest.mark.parametrize("reset_optimizer", [False, True])
def test_a_resumed_run_says_it_does_not_take_a_warm_start(tmp_path, capsys, reset_optimizer):
    source, _ = fit(tmp_path / "source", epochs=1)
    fit(tmp_path / "run", epochs=1)
    config = TrainingConfig(epochs=2, batch_size=8, learning_rate=0.05)
    trainer = Trainer(tmp_path / "run", config, TinyRegressor)
    capsys.readouterr()
    trainer.fit(dataset_maker(8), resume=True, verbose=2, init_from=source.latest_checkpoint,
                reset_optimizer=reset_optimizer)
    said = capsys.readouterr().out
    assert f"Not starting from the weights of {source.latest_checkpoint}" in said


def test_nan_loss_stops_and_keeps_last_good_checkpoint(run_dir):
    config = TrainingConfig(epochs=3, batch_size=8, checkpoint_every=2, log_every=1)
    trainer = Trainer(run_dir, config, lambda: TinyRegressor(poison_step=5))
    with pytest.raises(TrainingDiverged, match=r"diverged.*nan.*step 6") as caught:
        trainer.fit(dataset_maker(8), verbose=0)
    assert isinstance(caught.value, UserError)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "TrainingDiverged" in status["error"]
    assert trainer.state.as_dict() == {"step": 4, "epoch": 1, "step_in_epoch": 0}
    # The trainer's model is back at the last good state; a fresh model restores the same.
    assert all(np.all(np.isfinite(w)) for w in weights(trainer.model))
    fresh = TinyRegressor()
    fresh.loss_terms(next(iter(dataset_maker(8)(0, tf.distribute.InputContext()))), False)
    restore_model(fresh, run_dir)
    for got, want in zip(weights(fresh), weights(trainer.model)):
        np.testing.assert_array_equal(got, want)
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss"]) for r in history)


def test_status_history_and_tensorboard(run_dir):
    trainer, history = fit(run_dir, epochs=2, log_every=3, checkpoint_every=0)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished"
    assert (status["epoch"], status["epochs_done"], status["step"], status["epochs"]) == (
        2, 2, 8, 2)
    lines = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in lines] == [
        ("step", 3), ("epoch", 4), ("step", 6), ("epoch", 8)
    ]
    assert lines[1] == history[0] and lines[3] == history[1]
    assert {"loss", "abs_error", "learning_rate"} <= set(lines[0])
    # checkpoint_every=0: only the two epoch-end checkpoints, named by their steps.
    assert [Path(p).name for p in complete_checkpoints(run_dir / "checkpoints")] == [
        "ckpt-8", "ckpt-4"]
    assert trainer.latest_checkpoint.endswith("ckpt-8")
    tags = set()
    for event_file in (run_dir / "logs").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags.update(value.tag for value in event.summary.value)
    assert {"train/loss", "train/abs_error", "epoch/loss", "epoch/examples_per_s"} <= tags


def test_validate_numbers_are_logged(run_dir):
    seen = []

    def validate(model, epoch):
        seen.append((type(model).__name__, epoch))
        return {"score": 10.0 + epoch}

    config = TrainingConfig(epochs=2, batch_size=16)
    history = Trainer(run_dir, config, TinyRegressor).fit(
        dataset_maker(16), validate=validate, verbose=0
    )
    assert seen == [("TinyRegressor", 0), ("TinyRegressor", 1)]
    assert [r["val_score"] for r in history] == [10.0, 11.0]


def test_refuses_a_directory_holding_another_run(run_dir):
    fit(run_dir, epochs=1)
    with pytest.raises(UserError, match="already holds a run"):
        fit(run_dir, epochs=1)
    # A finished run resumed with the same number of epochs has nothing to do.
    _, history = fit(run_dir, resume=True, epochs=1)
    assert history == []


def test_accepts_a_directory_with_only_the_family_files(run_dir):
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    (run_dir / "vocab.txt").write_text("<pad>\n")
    _, history = fit(run_dir, epochs=1)
    assert len(history) == 1


def test_checkpoint_holds_model_variables_optimizer_and_position(run_dir):
    trainer, _ = fit(run_dir, epochs=1, dropout=0.2)
    names = {name for name, _ in tf.train.list_variables(trainer.latest_checkpoint)}
    assert any(name.startswith("model/baseline") for name in names)  # a tf.Variable attribute
    saved = {name.split("/")[1] for name in names if name.startswith("model_variables/")}
    # Every Keras variable by position, the dropout's seed-generator state among them.
    assert len(saved) == len(trainer.model.variables)
    assert any("seed_generator" in v.path for v in trainer.model.variables)
    assert any(name.startswith("optimizer/") for name in names)
    assert {"step/.ATTRIBUTES/VARIABLE_VALUE", "epoch/.ATTRIBUTES/VARIABLE_VALUE"} <= names


def test_jit_compiled_step_matches_plain_step(tmp_path):
    plain, plain_history = fit(tmp_path / "a", epochs=1)
    jitted, jit_history = fit(tmp_path / "b", epochs=1, jit_compile=True)
    for got, want in zip(weights(jitted.model), weights(plain.model)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jit_history[0]["loss"], plain_history[0]["loss"], rtol=1e-4)


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains(run_dir, precision):
    try:
        trainer, history = fit(run_dir, epochs=3, precision=precision)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    is_scaled = isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_scaled == (precision == "mixed_float16")
    assert trainer.model.dense.compute_dtype == precision.removeprefix("mixed_")
    assert trainer.model.dense.kernel.dtype == "float32"
    assert history[-1]["loss"] < history[0]["loss"]


def test_steps_per_epoch_bounds_each_epoch(run_dir):
    repeated = dataset_maker(8)

    def make_dataset(epoch, context):
        return repeated(epoch, context).repeat()

    trainer, history = fit(run_dir, epochs=2, steps_per_epoch=6, make_dataset=make_dataset)
    assert [r["step"] for r in history] == [6, 12]
    assert trainer.state.as_dict() == {"step": 12, "epoch": 2, "step_in_epoch": 0}


class StackedRegressor(TinyRegressor):
    """TinyRegressor with a stack of layers kept in a Python list, as Transformer blocks are."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [keras.layers.Dense(4, name=f"block_{i}") for i in range(3)]

    def call(self, x, training=False):
        for block in self.blocks:
            x = block(x)
        return self.dense(x)


def test_restore_model_restores_layers_kept_in_lists(run_dir):
    config = TrainingConfig(epochs=1, batch_size=8, learning_rate=0.05, log_every=2)
    trainer = Trainer(run_dir, config, StackedRegressor)
    trainer.fit(dataset_maker(8), verbose=0)
    fresh = StackedRegressor()
    fresh(regression_data()[0][:1])
    restore_model(fresh, run_dir)
    for trained, restored in zip(weights(trainer.model), weights(fresh)):
        np.testing.assert_array_equal(trained, restored)


def test_restore_model_refuses_a_checkpoint_of_another_architecture(run_dir):
    fit(run_dir, epochs=1)
    other = StackedRegressor()
    other(regression_data()[0][:1])
    with pytest.raises(UserError, match="does not match the model"):
        restore_model(other, run_dir)


class WeightOnModel(TinyRegressor):
    """A Keras weight created directly on the model, reachable from both checkpoint entries."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")
        super().build(input_shape)

    def call(self, x, training=False):
        return super().call(x, training=training) * self.scale


def test_restore_model_counts_a_weight_created_on_the_model_itself(run_dir):
    config = TrainingConfig(epochs=1, batch_size=8, learning_rate=0.05, log_every=2)
    trainer = Trainer(run_dir, config, WeightOnModel)
    trainer.fit(dataset_maker(8), verbose=0)
    fresh = WeightOnModel()
    fresh(regression_data()[0][:1])
    restore_model(fresh, run_dir)
    for trained, restored in zip(weights(trainer.model), weights(fresh)):
        np.testing.assert_array_equal(trained, restored)


class Generators(keras.Model):
    """Random generators at three depths: a dropout of the model's, dropouts in a list, and
    one under a layer held privately."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.drop = keras.layers.Dropout(0.1, seed=1)
        self.stack = [keras.layers.Dropout(0.2, seed=2), keras.layers.Dropout(0.3, seed=3)]
        self._block = keras.Sequential([keras.layers.Dense(3), keras.layers.Dropout(0.4, seed=4)])

    def call(self, x, training=False):
        for layer in (self.drop, *self.stack, self._block):
            x = layer(x, training=training)
        return x

    def dropouts(self):
        return [self.drop, *self.stack, self._block.layers[-1]]


def test_seed_generator_states_are_every_generator_and_restore_in_any_rng_order(
        tmp_path, monkeypatch):
    """Every generator's state is found (each dropout's own `seed_generator`), and comes back
    from a checkpoint whose `rng` entry lists the states in another order: they are restored
    from their `model_variables` entries, so checkpoints written when `rng` was in layer order
    restore the same."""
    import common.training.checkpoints as checkpoints
    from common.training.checkpoints import TrainingState, make_checkpoint

    saved, fresh = Generators(), Generators()
    for model in (saved, fresh):
        model(np.zeros((1, 3), "float32"))
        assert [id(v) for v in checkpoints.seed_generator_states(model)] == [
            id(d.seed_generator.state) for d in model.dropouts()]
    for i, dropout in enumerate(saved.dropouts()):
        dropout.seed_generator.state.assign([10 + i, 100 * i])
    with monkeypatch.context() as patch:
        reversed_states = list(reversed(checkpoints.seed_generator_states(saved)))
        patch.setattr(checkpoints, "seed_generator_states", lambda model: reversed_states)
        path = make_checkpoint(saved, None, TrainingState()).save(str(tmp_path / "ckpt"))
    make_checkpoint(fresh, None, TrainingState()).restore(path).assert_existing_objects_matched()
    assert [np.asarray(d.seed_generator.state).tolist() for d in fresh.dropouts()] == [
        [10 + i, 100 * i] for i in range(4)]


def test_restore_model_reads_a_checkpoint_without_the_count(tmp_path):
    from common.training.checkpoints import model_variables

    model = StackedRegressor()
    model(regression_data()[0][:1])
    path = tf.train.Checkpoint(model=model, model_variables=model_variables(model)).save(
        str(tmp_path / "ckpt"))
    fresh = StackedRegressor()
    fresh(regression_data()[0][:1])
    restore_model(fresh, path)
    for saved, restored in zip(weights(model), weights(fresh)):
        np.testing.assert_array_equal(saved, restored)


def test_resume_trains_at_the_learning_rate_given_then(run_dir):
    # The checkpoint holds the optimizer's rate; the resumed run's config says the rate (what
    # robustness.md's "resume with a lower --learning-rate" after a NaN stop relies on).
    fit(run_dir, epochs=1, learning_rate=0.05)
    resumed, _ = fit(run_dir, resume=True, epochs=2, learning_rate=0.001)
    assert float(resumed.optimizer.learning_rate) == pytest.approx(0.001)
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    rates = [(r["epoch"], r["learning_rate"]) for r in map(json.loads, lines)
             if r["kind"] == "step"]
    assert [rate for epoch, rate in rates if epoch == 1] == pytest.approx([0.05] * 2)
    assert [rate for epoch, rate in rates if epoch == 2] == pytest.approx([0.001] * 2)


class Stopped(Exception):
    """What a kill during the validation looks like to the run: it ends there."""


def test_a_run_stopped_while_it_validates_validates_that_epoch_when_resumed(run_dir):
    calls = []

    def validate(model, epoch):
        calls.append(epoch)
        if len(calls) == 1:
            raise Stopped
        return {"score": 10.0 + epoch}

    with pytest.raises(Stopped):
        fit(run_dir, epochs=2, validate=validate)
    resumed = fit(run_dir, resume=True, epochs=2, validate=validate)[1]
    assert calls == [0, 0, 1]  # the first epoch (0 to `validate`) validated again
    records = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [(r["epoch"], r["val_score"]) for r in epochs] == [(1, 10.0), (2, 11.0)]
    assert [r["epoch"] for r in resumed] == [1, 2]


def test_early_stopping_without_validation_is_refused(run_dir):
    with pytest.raises(UserError, match="early_stopping 2 needs validation"):
        fit(run_dir, epochs=2, early_stopping=2)
    assert not (run_dir / "checkpoints").exists()


@pytest.mark.parametrize("name", ["logs", "best", "checkpoints"])
def test_a_file_in_the_way_of_a_run_folder_is_one_line_before_training(run_dir, name):
    run_dir.mkdir()
    (run_dir / name).write_text("in the way")
    with pytest.raises(RunDirError, match=f"{name} is a file; expected the run's") as info:
        fit(run_dir, epochs=1, validate=lambda model, epoch: {"score": 1.0})
    assert "\n" not in str(info.value)
    assert not (run_dir / "status.json").exists()


def test_tensorflows_write_errors_keep_their_reason():
    error = tf.errors.ResourceExhaustedError(
        None, None, "{{function_node __wrapped__SaveV2_dtypes_12_device_/job:localhost}} "
        "run/checkpoints/ckpt-3_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; "
        "No space left on device [Op:SaveV2]")
    message = str(write_failure("run/checkpoints", error))
    assert message.startswith("cannot write run/checkpoints: No space left on device;")
    assert "function_node" not in message and "tempstate" not in message


def test_history_lines_that_are_not_records_are_skipped(run_dir):
    fit(run_dir, epochs=1)
    with open(run_dir / "history.jsonl", "a", encoding="utf-8") as f:
        f.write("[1, 2]\n")
    _, history = fit(run_dir, resume=True, epochs=2)
    assert [r["epoch"] for r in history] == [2]


def test_a_resume_with_nothing_to_train_keeps_the_status_checkpoint(run_dir):
    fit(run_dir, epochs=1)
    before = json.loads((run_dir / "status.json").read_text())
    assert fit(run_dir, resume=True, epochs=1)[1] == []
    after = json.loads((run_dir / "status.json").read_text())
    assert after["state"] == "finished" and after["checkpoint"] == before["checkpoint"]


def test_weights_gone_non_finite_are_neither_validated_nor_kept_as_the_best(run_dir):
    # The epoch's last step leaves a weight NaN with a finite loss; the validation (which would
    # score a garbage decode, say 0.0) must not run, nor keep those weights as the best.
    config = TrainingConfig(epochs=2, batch_size=8, learning_rate=0.05, checkpoint_every=2,
                            log_every=2, best_metric="score")
    trainer = Trainer(run_dir, config, TinyRegressor)
    build = trainer.build

    def poisoned_build(make_dataset):
        build(make_dataset)
        step, count = trainer._step_fn, [0]

        def poisoned(batch):
            out = step(batch)
            count[0] += 1
            if count[0] == 4:  # the last step of epoch 0
                kernel = trainer.model.dense.kernel
                kernel.assign(np.full(kernel.shape, np.nan, "float32"))
            return out

        trainer._step_fn = poisoned

    trainer.build = poisoned_build
    validated = []
    with pytest.raises(TrainingDiverged, match="a weight became NaN or infinite"):
        trainer.fit(dataset_maker(8), verbose=0,
                    validate=lambda model, epoch: validated.append(epoch) or {"score": 0.0})
    assert validated == [] and not (run_dir / "best").exists()


def test_the_jax_dropout_generator_is_refused_before_anything_is_written(run_dir):
    """`dropout_rng="rbg"` is the JAX trainer's; the TensorFlow trainer draws Keras's masks, so
    it says so in one line rather than train with another generator than the config says."""
    with pytest.raises(UserError, match="dropout_rng 'rbg' is the JAX trainer's"):
        fit(run_dir, dropout_rng="rbg")
    assert not run_dir.exists() or not any(run_dir.iterdir())
    with pytest.raises(UserError, match="Unknown dropout_rng 'philox'; choose one of: keras, rbg"):
        TrainingConfig(dropout_rng="philox")
