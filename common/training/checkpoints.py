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

Atomicity: TensorFlow writes a checkpoint's shards into `ckpt-N_temp/`, merges them into
`ckpt-N.index` and `ckpt-N.data-*`, and only then rewrites the `checkpoint` state file (by an
atomic rename). A save interrupted before that last step leaves the state file naming the
previous checkpoint. Beyond that, `complete_checkpoints` ignores any checkpoint whose index or
data shards are missing, and `CheckpointKeeper.restore` falls back to the one before when a
newer one cannot be read (a truncated file), so a kill during a save never costs more than the
checkpoint being written.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from common.config import atomic_write_text
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
    """The state variables (`SeedGenerator.state`) of the `keras.random.SeedGenerator`s held by
    the model and its layers, at any depth, in `model.variables` order. Found by type, not by
    a variable name: the layers' attributes (and lists, tuples and dicts of them) are walked.

    They are `model_variables` entries too, so a checkpoint stores each once, under its
    position there, and restores it from there: the order of the `rng` entry does not decide
    which generator gets which state (checkpoints written when it listed them in another
    order restore the same).
    """
    found: set[int] = set()
    seen: set[int] = set()

    def walk(value) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, keras.random.SeedGenerator):
            found.add(id(value.state))
        elif isinstance(value, keras.layers.Layer):
            for item in vars(value).values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(model)
    return [v for v in model.variables if id(v) in found]


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
    model: keras.Model, optimizer: keras.optimizers.Optimizer | None, state: TrainingState
) -> tf.train.Checkpoint:
    """The `tf.train.Checkpoint` of a training run (see the module docstring); without
    `optimizer`, what a run resumed with a new optimizer restores (everything else)."""
    entries = dict(model_entries(model), rng=seed_generator_states(model), step=state.step,
                   epoch=state.epoch, step_in_epoch=state.step_in_epoch)
    if optimizer is not None:
        entries["optimizer"] = optimizer
    return tf.train.Checkpoint(**entries)


_NUMBER = re.compile(r"-(\d+)$")
_SHARD = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
# What reading a damaged or half-written checkpoint raises (a data file cut short gives
# IndexError "Read less bytes than requested").
UNREADABLE = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.OutOfRangeError,
              IndexError)


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _skip_warning(path: str, exc: BaseException) -> None:
    print(f"warning: skipping unreadable checkpoint {path} ({_reason(exc)}); trying the one "
          "before", file=sys.stderr)


def _is_complete(prefix: str) -> bool:
    """Whether `prefix.index` and every `prefix.data-0000i-of-0000n` shard exist, non-empty."""
    index = Path(prefix + ".index")
    if not index.is_file() or index.stat().st_size == 0:
        return False
    shards = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + ".data-*"):
        match = _SHARD.search(path.name)
        if match:
            shards[int(match.group(1))] = int(match.group(2))
    return bool(shards) and set(shards) == set(range(next(iter(shards.values()))))


def complete_checkpoints(directory: str | os.PathLike) -> list[str]:
    """The complete checkpoints of `directory` (see `_is_complete`), newest first.

    Both the ones the `checkpoint` state file lists and any `ckpt-N.index` on disk count (a
    state file lost or naming a checkpoint that was never finished does not hide the others).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    prefixes = {str(p)[: -len(".index")] for p in directory.glob("*.index")}
    try:
        state = tf.train.get_checkpoint_state(str(directory))
    except (tf.errors.OpError, ValueError):  # an unreadable state file
        state = None
    if state is not None:
        for path in state.all_model_checkpoint_paths:
            prefixes.add(path if os.path.isabs(path) else str(directory / path))

    def number(prefix: str) -> int:
        match = _NUMBER.search(prefix)
        return int(match.group(1)) if match else -1

    return sorted((p for p in prefixes if _is_complete(p)), key=number, reverse=True)


def latest_checkpoint(directory: str | os.PathLike) -> str | None:
    """The newest complete checkpoint of `directory`, or None."""
    found = complete_checkpoints(directory)
    return found[0] if found else None


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
        self.keep = keep
        write_dir = self.directory if chief else Path(tempfile.mkdtemp(prefix="ckpt-worker-"))
        self._write_dir = write_dir
        self.manager = tf.train.CheckpointManager(checkpoint, str(write_dir), max_to_keep=keep)

    @property
    def latest(self) -> str | None:
        """The newest complete checkpoint of the chief's directory, or None."""
        return latest_checkpoint(self.directory)

    def save(self, step: int | None = None) -> str | None:
        """Write a checkpoint `ckpt-STEP`, numbered by the training step it holds (`step`;
        None: by save count, `ckpt-1`, `ckpt-2`, ..., as runs written before numbered them);
        returns its path on the chief only.

        A save that fails (a full disk) or is interrupted removes the shard folder it was
        writing (`ckpt-N_temp/`, which TensorFlow leaves behind), then raises; the checkpoints
        before it are untouched.
        """
        before = set(self._write_dir.glob("*_temp"))
        try:
            path = self.manager.save(checkpoint_number=step)
        except BaseException:
            for partial in set(self._write_dir.glob("*_temp")) - before:
                shutil.rmtree(partial, ignore_errors=True)
            raise
        if not self.chief:
            shutil.rmtree(self._write_dir, ignore_errors=True)
            return None
        return path

    def restore(self, path: str | None = None,
                checkpoint: tf.train.Checkpoint | None = None) -> str | None:
        """Restore `path` (default: the newest readable checkpoint); returns it, or None.

        Without `path`, a checkpoint that cannot be read (cut short by a kill during its save)
        is reported on stderr and the one before it is tried. The model and optimizer
        variables must already exist. `checkpoint`: restore into this part of the run's
        checkpoint instead (`make_checkpoint` without the optimizer), the rest left unread.

        Raises:
            UserError: the checkpoint does not match the model (another architecture), or
                `path` cannot be read.
        """
        candidates = [path] if path else complete_checkpoints(self.directory)
        for candidate in candidates:
            try:
                if checkpoint is None:
                    status = self.checkpoint.restore(candidate)
                else:
                    status = checkpoint.restore(candidate).expect_partial()
            except UNREADABLE as exc:
                if path:
                    raise UserError(f"checkpoint {path} cannot be read: {_reason(exc)}") from None
                _skip_warning(candidate, exc)
                continue
            try:
                status.assert_existing_objects_matched()
            except AssertionError as exc:
                first = " ".join(str(exc).split())[:300]
                raise UserError(
                    f"checkpoint {candidate} does not match the model being trained: {first}"
                ) from None
            return candidate
        if candidates:  # never start over silently on top of a run's checkpoints
            raise UserError(f"no checkpoint in {self.directory} can be read; expected at least "
                            "one complete checkpoint (move the directory aside to start over)")
        return None

    def discard(self, path: str) -> None:
        """Delete checkpoint `path` and drop it from the state file (the chief only)."""
        if not self.chief:
            return
        for file in Path(path).parent.glob(Path(path).name + ".*"):
            file.unlink(missing_ok=True)
        remaining = [Path(p).name for p in self.manager.checkpoints if p != path]
        state_file = self.directory / "checkpoint"
        if remaining:  # the text proto TensorFlow writes, relative paths
            lines = [f'model_checkpoint_path: "{remaining[-1]}"']
            lines += [f'all_model_checkpoint_paths: "{name}"' for name in remaining]
            atomic_write_text(state_file, "\n".join(lines) + "\n")
        else:
            state_file.unlink(missing_ok=True)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self._write_dir), max_to_keep=self.keep)


def restore_model(model: keras.Model, checkpoint: str | os.PathLike,
                  weights_only: bool = False) -> str:
    """Load a training checkpoint's model weights into a built `model` (for evaluation, export).

    Args:
        model: a model of the same architecture whose variables exist (call it once first).
        checkpoint: a checkpoint path (`RUN_DIR/checkpoints/ckpt-N`) or a directory, whose
            latest checkpoint is used (`RUN_DIR/checkpoints` or `RUN_DIR`).
        weights_only: load the weights and leave the model's random-generator states as they
            are (a warm start: `Trainer.fit(init_from=...)`). The two models may then differ in
            their dropout layers: a rate of 0, where Keras keeps no generator, or a rate of
            their own (`--dropout`, `--attention-dropout`) change the generators, not the
            weights, which must be the same in number, order and shape.

    Returns:
        The checkpoint path that was restored.

    Raises:
        UserError: no checkpoint there, or one that does not match the model.
    """
    restore = _restore_weights if weights_only else _restore_model
    path = Path(checkpoint)
    if path.is_dir():
        directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        candidates = complete_checkpoints(directory)
        if not candidates:
            raise UserError(f"no checkpoint in {directory}; expected a training run directory")
        for candidate in candidates:  # newest first; one cut short by a kill is skipped
            try:
                return restore(model, Path(candidate))
            except UNREADABLE as exc:
                _skip_warning(candidate, exc)
        raise UserError(f"no checkpoint in {directory} can be read; expected at least one "
                        "complete checkpoint")
    if not tf.io.gfile.glob(str(path) + ".index"):
        raise UserError(f"no checkpoint at {path}; expected RUN_DIR/checkpoints/ckpt-N")
    try:
        return restore(model, path)
    except UNREADABLE as exc:
        raise UserError(f"checkpoint {path} cannot be read: {_reason(exc)}") from None


def _is_generator_state(dtype, shape) -> bool:
    """Whether a variable of this dtype and shape is a Keras `SeedGenerator`'s state (two
    integers, the seed and a counter)."""
    return np.dtype(dtype).kind in "iu" and list(shape) == [2]


def _restore_weights(model: keras.Model, path: Path) -> str:
    """`restore_model(..., weights_only=True)`: the checkpoint's variables that are not
    random-generator states, by order, into the model's."""
    states = {id(v) for v in seed_generator_states(model)}
    if any(_is_generator_state(v.dtype, v.shape) != (id(v) in states) for v in model.variables):
        raise UserError(f"cannot load the weights of {path} alone: the model has a weight "
                        "shaped like a random-generator state")
    targets = [v for v in model.variables if id(v) not in states]
    reader = tf.train.load_checkpoint(str(path))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    pattern = re.compile(r"model_variables/\d+/\.ATTRIBUTES/VARIABLE_VALUE")
    keys = sorted(k for k in shapes if pattern.fullmatch(k))
    saved = [k for k in keys if not _is_generator_state(dtypes[k].as_numpy_dtype, shapes[k])]
    if len(saved) != len(targets):
        raise UserError(f"checkpoint {path} does not match the model: it holds {len(saved)} "
                        f"weights, the model has {len(targets)}")
    for key, variable in zip(saved, targets):
        if shapes[key] != list(variable.shape):
            raise UserError(f"checkpoint {path} does not match the model: {variable.path} is "
                            f"{tuple(variable.shape)} in the model, {tuple(shapes[key])} there")
    for key, variable in zip(saved, targets):
        variable.assign(reader.get_tensor(key))
    return str(path)


def _restore_model(model: keras.Model, path: Path) -> str:
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
    # Shapes first, by name: a mismatch is named plainly (and nothing is left half-restored
    # for TensorFlow to warn about).
    shapes = reader.get_variable_to_shape_map()
    for name, variable in variables.items():
        theirs = shapes.get(f"model_variables/{name}/.ATTRIBUTES/VARIABLE_VALUE")
        if theirs is not None and theirs != list(variable.shape):
            raise UserError(
                f"checkpoint {path} does not match the model: {variable.path} is "
                f"{tuple(variable.shape)} in the model, {tuple(theirs)} there (the model is "
                "built from the run's config and vocabularies: a vocabulary file changed "
                "since training changes the sizes)")
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


def average_checkpoints(model: keras.Model, checkpoints: list[str | os.PathLike]) -> list[str]:
    """Set `model`'s weights to the mean of their values in `checkpoints` (checkpoint averaging).

    Averaging the last few checkpoints of a run smooths the noise of the final updates (Vaswani
    et al. 2017 average the last 5 or 20; OpenNMT-tf's `average_checkpoints`). Every floating
    variable becomes the arithmetic mean of its values (summed in float64, then cast back to
    its dtype); integer variables (random-generator states, counters) keep the value of the
    first checkpoint listed.

    Args:
        model: a built model of the run's architecture.
        checkpoints: checkpoint paths (`RUN_DIR/checkpoints/ckpt-N`), at least one; the first
            one gives the integer variables.

    Returns:
        The checkpoint paths read, in the order given.

    Raises:
        UserError: no checkpoint given, or one that cannot be read or does not match the model.
    """
    if not checkpoints:
        raise UserError("nothing to average: no checkpoint given")
    paths = [str(p) for p in checkpoints]
    floating = [v for v in model.variables if np.dtype(v.dtype).kind == "f"]
    sums = [np.zeros(v.shape, np.float64) for v in floating]
    for path in reversed(paths):  # the first listed is read last: its integers stay
        restore_model(model, path)
        for total, variable in zip(sums, floating, strict=True):
            total += np.asarray(keras.ops.convert_to_numpy(variable.value), np.float64)
    for total, variable in zip(sums, floating, strict=True):
        variable.assign((total / len(paths)).astype(np.dtype(variable.dtype)))
    return paths


def write_model_checkpoint(model: keras.Model, prefix: str | os.PathLike) -> str:
    """Write `model`'s weights as a checkpoint that `restore_model` reads; returns its path.

    The checkpoint holds the model entries only (no optimizer, no training position), so it
    serves evaluation, decoding and export, and `--init-from`-style warm starts, not `--resume`.
    """
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    checkpoint = tf.train.Checkpoint(**model_entries(model))
    checkpoint.save_counter  # noqa: B018 (created on first read; `restore_model` expects it)
    return checkpoint.write(str(prefix))


CHECKPOINT_CHOICES = "best, last, a step N (ckpt-N) or a path"


def resolve_checkpoint(run_dir: str | os.PathLike, which: str | None = None,
                       option: str = "--checkpoint") -> str:
    """The checkpoint of `run_dir` that `which` names (the `--checkpoint` option).

    Args:
        run_dir: a run directory.
        which: "best" (the best validation, `common.training.best`), "last" (the newest
            complete checkpoint), a checkpoint number N (`checkpoints/ckpt-N`, or the best,
            `best/ckpt-N`, when the run no longer keeps that one in `checkpoints/`: both are
            numbered by the training step they hold; runs written before numbered
            `checkpoints/` by save count, and N is read as they are named), or a path;
            None: the best when the run keeps one, else the last.
        option: the command-line option that named it, for the error message.

    Raises:
        UserError: the run has no such checkpoint; the message lists what it has.
    """
    from common.training.best import best_checkpoint

    run_dir = Path(run_dir)
    directory = run_dir / "checkpoints"
    available = complete_checkpoints(directory)
    best = best_checkpoint(run_dir)

    def have() -> str:
        names = ([Path(best).name + " (best)"] if best else []) + [Path(p).name for p in available]
        return ", ".join(names) or "none"

    if which is None:
        which = "best" if best else "last"
    if which == "best":
        if best is None:
            raise UserError(f"{run_dir} keeps no best checkpoint (train with --best-metric); "
                            f"it has: {have()}")
        return best
    if which == "last":
        if not available:
            raise UserError(f"no checkpoint in {directory}; expected a training run directory")
        return available[0]
    if which.isascii() and which.isdigit():  # not "²" or "١", which str.isdigit accepts
        path = str(directory / f"ckpt-{int(which)}")
        if path not in available and best is not None and Path(best).name == Path(path).name:
            return best
        if path not in available:
            raise UserError(f"{run_dir} has no checkpoint number {which}; it has: {have()}")
        return path
    if tf.io.gfile.glob(which + ".index"):
        return which
    raise UserError(f"{option} {which!r}: expected {CHECKPOINT_CHOICES}; {run_dir} has: "
                    f"{have()}")


def jax_run_weights(run) -> Path | None:
    """The weights file of a run trained on JAX (a `RunDir`) that holds its last weights:
    `model.weights.h5` once the run has finished; while it trains again, or after it failed
    or was killed, its newest checkpoint's (`jax/ckpt-STEP/model.weights.h5`), which is newer.
    None: the run has neither (not a JAX run)."""
    from common.training.run_dir import RunDir, complete_jax_checkpoints

    newest = complete_jax_checkpoints(run.jax_checkpoints)
    finished = (run.read_status() or {}).get("state") == "finished"
    if run.jax_weights.is_file() and (finished or not newest):
        return run.jax_weights
    return newest[0] / RunDir.jax_weights if newest else None


def restore_run_checkpoint(model: keras.Model, run_dir: str | os.PathLike,
                           which: str | None = None) -> str:
    """Restore the checkpoint of `run_dir` that `which` names (see `resolve_checkpoint`) into
    `model`; returns its path.

    The last checkpoint (`which` "last", or None when the run keeps no best) is read as
    `restore_model` reads a directory: one cut short by a kill is skipped for the one before.
    A run trained on JAX (`common.training.jax_trainer`), which has no TensorFlow checkpoint,
    is read from its backend-neutral weights: its best (`best/model.weights.h5`) before its
    last (`jax_run_weights`), as for a TensorFlow run.
    """
    from common.training.best import best_checkpoint, best_weights_file
    from common.training.run_dir import RunDir

    run = RunDir(run_dir)
    best = best_weights_file(run_dir) if which in (None, "best") else None
    if best is not None:
        model.load_weights(best)  # a JAX run's best
        return best
    weights = jax_run_weights(run) if which in (None, "last") else None
    if weights is not None and not complete_checkpoints(run.checkpoints):
        model.load_weights(weights)
        return str(weights)
    if which == "last" or (which is None and best_checkpoint(run_dir) is None):
        return restore_model(model, run_dir)
    return restore_model(model, resolve_checkpoint(run_dir, which))
