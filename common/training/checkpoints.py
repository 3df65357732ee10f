"""Checkpoints of a training run: model, optimizer, random state and position in the data.

A checkpoint is a `tf.train.Checkpoint` with these entries:

- `model`: the Keras model as TensorFlow tracks it (this is what picks up a plain
  `tf.Variable` attribute such as a REINFORCE baseline);
- `model_variables`: every Keras variable of the model (`model.variables`), keyed by position.
  TensorFlow's checkpoint graph does not see layers that Keras 3 keeps in Python lists (a
  stack of Transformer blocks, say), so `model` alone would silently leave them out;
- `num_model_variables`: how many that is, so that `restore_model` can refuse a checkpoint
  of another architecture (a variable reachable through both entries is stored under one
  name only, so the count cannot be read off the names);
- `optimizer`: the optimizer's slots, iteration count and (for float16) its loss scale;
- `rng`: the states of the model's `keras.random.SeedGenerator`s (dropout, sampling), so that a
  resumed run draws the same random numbers as an uninterrupted one;
- `step`, `epoch`, `step_in_epoch`: int64 counters. `step` counts optimizer steps since the
  start of the run; `epoch` is the epoch in progress (0-based) and `step_in_epoch` the steps of
  it already done. A checkpoint written at the end of epoch `e` holds `epoch=e+1`,
  `step_in_epoch=0`.

Only the chief writes into `RUN_DIR/checkpoints`; other workers of a multi-worker run save
into a temporary directory and delete it (as in the TensorFlow multi-worker tutorial), because
saving mirrored variables may need every worker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from common.errors import UserError


class TrainingState:
    """The position of a run, as checkpointed int64 variables.

    Example:
    >>> state = TrainingState()
    >>> state.set(step=10, epoch=1, step_in_epoch=4)
    >>> state.as_dict()
    {'step': 10, 'epoch': 1, 'step_in_epoch': 4}
    """

    def __init__(self):
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")

    def set(self, step: int, epoch: int, step_in_epoch: int) -> None:
        self.step.assign(step)
        self.epoch.assign(epoch)
        self.step_in_epoch.assign(step_in_epoch)

    def as_dict(self) -> dict[str, int]:
        return {
            "step": int(self.step.numpy()),
            "epoch": int(self.epoch.numpy()),
            "step_in_epoch": int(self.step_in_epoch.numpy()),
        }


def seed_generator_states(model: keras.Model) -> list:
    """The state variables of the `SeedGenerator`s owned by the model's layers, in layer order."""
    states = []
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", []) or []:
            states.append(generator.state)
    return states


def model_variables(model: keras.Model) -> dict[str, tf.Variable]:
    """Every variable of `model`, keyed by its position in `model.variables` ("00000", ...).

    The order is the model's construction order, the same for the same architecture, so a
    checkpoint restores into a freshly built model of the same config.
    """
    return {f"{i:05d}": variable for i, variable in enumerate(model.variables)}


def model_entries(model: keras.Model) -> dict:
    """The checkpoint entries that hold a model: `model`, `model_variables`, `num_model_variables`.

    `tf.train.Checkpoint(**model_entries(model)).save(path)` writes a checkpoint that
    `restore_model` reads; the trainer's checkpoints hold these entries too.
    """
    return {
        "model": model,
        "model_variables": model_variables(model),
        "num_model_variables": tf.Variable(
            len(model.variables), dtype=tf.int64, trainable=False, name="num_model_variables"
        ),
    }


def make_checkpoint(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, state: TrainingState
) -> tf.train.Checkpoint:
    """The `tf.train.Checkpoint` of a training run (see the module docstring)."""
    return tf.train.Checkpoint(
        **model_entries(model),
        optimizer=optimizer,
        rng=seed_generator_states(model),
        step=state.step,
        epoch=state.epoch,
        step_in_epoch=state.step_in_epoch,
    )


class CheckpointKeeper:
    """Saves checkpoints into `directory` on the chief, into a throw-away directory elsewhere.

    Args:
        checkpoint: the `tf.train.Checkpoint` to save and restore.
        directory: where the chief keeps its checkpoints (`RUN_DIR/checkpoints`).
        keep: how many checkpoints to keep.
        chief: whether this process is the chief.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str | os.PathLike,
                 keep: int, chief: bool = True):
        self.checkpoint = checkpoint
        self.directory = Path(directory)
        self.chief = chief
        write_dir = self.directory if chief else Path(tempfile.mkdtemp(prefix="ckpt-worker-"))
        self._write_dir = write_dir
        self.manager = tf.train.CheckpointManager(checkpoint, str(write_dir), max_to_keep=keep)

    @property
    def latest(self) -> str | None:
        """The newest checkpoint of the chief's directory, or None."""
        return tf.train.latest_checkpoint(str(self.directory))

    def save(self) -> str | None:
        """Write a checkpoint (`ckpt-1`, `ckpt-2`, ...); returns its path on the chief only."""
        path = self.manager.save()
        if not self.chief:
            shutil.rmtree(self._write_dir, ignore_errors=True)
            return None
        return path

    def restore(self, path: str | None = None) -> str | None:
        """Restore `path` (default: the latest checkpoint); returns what was restored or None.

        The model and optimizer variables must already exist.

        Raises:
            UserError: the checkpoint does not match the model (another architecture).
        """
        path = path or self.latest
        if path is None:
            return None
        status = self.checkpoint.restore(path)
        try:
            status.assert_existing_objects_matched()
        except AssertionError as exc:
            first = " ".join(str(exc).split())[:300]
            raise UserError(
                f"checkpoint {path} does not match the model being trained: {first}"
            ) from None
        return path


def restore_model(model: keras.Model, checkpoint: str | os.PathLike) -> str:
    """Load a training checkpoint's model weights into a built `model` (for evaluation, export).

    Args:
        model: a model of the same architecture whose variables exist (call it once first).
        checkpoint: a checkpoint path (`RUN_DIR/checkpoints/ckpt-N`) or a directory, whose
            latest checkpoint is used (`RUN_DIR/checkpoints` or `RUN_DIR`).

    Returns:
        The checkpoint path that was restored.

    Raises:
        UserError: no checkpoint there, or one that does not match the model.
    """
    path = Path(checkpoint)
    if path.is_dir():
        directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        latest = tf.train.latest_checkpoint(str(directory))
        if latest is None:
            raise UserError(f"no checkpoint in {directory}; expected a training run directory")
        path = Path(latest)
    elif not tf.io.gfile.glob(str(path) + ".index"):
        raise UserError(f"no checkpoint at {path}; expected RUN_DIR/checkpoints/ckpt-N")
    variables = model_variables(model)
    reader = tf.train.load_checkpoint(str(path))
    count_key = "num_model_variables/.ATTRIBUTES/VARIABLE_VALUE"
    # Checkpoints written before the count was recorded are checked by the match alone.
    saved = int(reader.get_tensor(count_key)) if reader.has_tensor(count_key) else None
    if saved is not None and saved != len(variables):
        raise UserError(
            f"checkpoint {path} does not match the model: it holds {saved} model "
            f"variables, the model has {len(variables)}"
        )
    try:
        entries = model_entries(model)
        if saved is None:
            del entries["num_model_variables"]
        checkpoint = tf.train.Checkpoint(**entries)
        status = checkpoint.restore(str(path)).expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as exc:
        first = " ".join(str(exc).split())[:300]
        raise UserError(f"checkpoint {path} does not match the model: {first}") from None
    return str(path)
