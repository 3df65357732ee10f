"""`Trainer`: training on TensorFlow, the TensorFlow backend of the one training loop.

The epochs, checkpoint cadence, validation, best checkpoint, early stopping, records and
divergence checks are `common.training.loop.TrainingLoop`'s, which the JAX trainer
(`common.training.jax_trainer`) runs too; this module supplies the TensorFlow side: the
strategy, the compiled step (`tf.function` through `strategy.run`), `tf.train.Checkpoint`s and
TensorBoard.

A family supplies a model with `loss_terms(batch, training) -> {"loss_sum", "count", ...}` (see
`common.training.step`) and a function `make_dataset(epoch, input_context) -> tf.data.Dataset`;
the trainer does the rest: strategy, mixed precision, a custom step through `strategy.run`
(which, unlike `model.fit`, works under `MultiWorkerMirroredStrategy` on TF 2.21 / Keras 3.15),
checkpoints, resume, logging and a progress bar.

`make_dataset(epoch, input_context)` is called through
`strategy.distribute_datasets_from_function`. It must:
- yield batches of `input_context.get_per_replica_batch_size(config.batch_size)` examples,
  sharded with `input_context.input_pipeline_id` / `num_input_pipelines` when there are
  several workers (with one pipeline the trainer hands consecutive batches to the replicas);
- be deterministic given the epoch (shuffle with `seed + epoch`), so that a resumed run can
  skip the batches of the interrupted epoch already trained on;
- repeat when `steps_per_epoch` is set and one pass is shorter than that (an epoch whose data
  runs out early simply ends early).
It is also called once with a default `tf.distribute.InputContext()` (one replica) for a batch
on which the model's variables are built (`Trainer.build`), before the first step or a restore.

Epochs are numbered from 0 in the API (`make_dataset(epoch, ...)`, `validate(model, epoch)`,
the checkpoint's position) and from 1 wherever a user reads them: the progress lines,
`history.jsonl`, `best.json`, `status.json` (`common.training.loop`). `fit` returns one record per epoch it ran: the count-weighted
means of the step metrics (`loss` and the model's extra terms), `val_*` entries from
`validate`, `examples_per_s` and `time_s`; the same record is the epoch's line in
`history.jsonl`. On resume the record of the interrupted epoch covers the steps run after the
restart, and `history.jsonl` and the TensorBoard events are cut back to the restored step, so
the steps trained again are logged once.

Robustness, as promised in the README's "Robustness" section:
- Resume: a run killed at any moment (SIGKILL included) and started again with `resume=True`
  restores the newest complete checkpoint, so at most `checkpoint_every` steps (or the epoch in
  progress, when it is 0) are trained again. The epoch's dataset is rebuilt from the same
  `seed + epoch` and the batches already trained on are skipped, and the random state of
  dropout and sampling is in the checkpoint, so the resumed run sees the same batches and
  draws the same numbers as an uninterrupted one and ends at the same step.
- Divergence: a NaN or infinite loss, or a non-finite weight about to be saved, stops the run
  with `TrainingDiverged` (a `UserError`: one line and exit 2 from the command lines). Nothing
  non-finite is saved; a checkpoint holding exactly the weights whose loss was not finite is
  deleted, and the model is put back to the newest checkpoint left.
- Records: an epoch's line in `history.jsonl` (with its validation) is written before the
  epoch's checkpoint, so a run killed between the two resumes from the checkpoint before,
  the line is cut off with the steps after it, and the epoch is trained and recorded again:
  every epoch is recorded once, whenever the run was stopped.
- Writes: a checkpoint, the best checkpoint, `history.jsonl`, `status.json` or the TensorBoard
  events that cannot be written (no space, read-only) stops the run with a `RunDirError`
  naming the file and the reason; the complete checkpoints already written stay usable.
- Determinism: `keras.utils.set_random_seed(config.seed)` before the model is built, and on a
  machine without accelerators `tf.config.experimental.enable_op_determinism()`, so the same
  seed and data give the same weights, bit for bit, run after run.

Only the chief writes into the run directory; every worker must call `fit` (the steps and
checkpoint saves are collective). `validate` runs on every worker. The Keras dtype policy is
set globally from `config.precision` before the model is built.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from common.errors import UserError
from common.training.best import BestPolicy
from common.training.checkpoints import (
    CheckpointKeeper,
    TrainingState,
    latest_checkpoint,
    make_checkpoint,
    restore_model,
    write_model_checkpoint,
)
from common.training.config import TrainingConfig, refuse_jax_dropout_rng, resolve_auto
from common.training.distribute import is_chief, make_strategy
from common.training.events import truncate_events
from common.training.loop import TrainingDiverged, TrainingLoop
from common.training.run_dir import RunDir, failed_writes_named, write_errors
from common.training.step import make_train_step

__all__ = ["Trainer", "TrainingDiverged", "make_deterministic"]

DatasetFn = Callable[[int, tf.distribute.InputContext], tf.data.Dataset]
ValidateFn = Callable[[keras.Model, int], dict[str, float]]

# What TensorFlow raises when a file cannot be written (no space, read-only, a file in the way).
_WRITE_ERRORS = write_errors()


def make_deterministic(seed: int, strict: bool = False) -> None:
    """Seed Python, NumPy, TensorFlow and Keras; on CPU-only machines also make ops deterministic.

    Seeding and op determinism are not enough for bit-identical runs: Grappler, TensorFlow's
    graph optimizer, rewrites each `tf.function` graph, and the order in which it combines a
    gradient's partial sums differs from process to process (measured on the captioner's
    training step: the first step's gradients differ in the last bits between two processes
    with everything else equal, and training amplifies that). `strict=True` (`--deterministic`)
    also turns Grappler off and asks for op determinism on every device (where a GPU op has no
    deterministic kernel TensorFlow then raises, naming it).

    Without `strict`, `enable_op_determinism` is left off where a GPU is visible: there it can
    be much slower and makes some ops raise.
    """
    keras.utils.set_random_seed(seed)
    accelerators = tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU")
    if strict or not accelerators:
        tf.config.experimental.enable_op_determinism()
    if strict:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


class Trainer:
    """Trains a model that implements `loss_terms`, under any `tf.distribute` strategy.

    Args:
        run_dir: the run directory (see `common.training.run_dir`).
        config: a `TrainingConfig`.
        build_model: `() -> keras.Model`, called inside the strategy's scope after the seed
            and dtype policy are set. The model must implement `loss_terms`.
        build_optimizer: `(config) -> keras.optimizers.Optimizer`, called inside the scope;
            default `keras.optimizers.Adam(config.learning_rate)`. Leave clipping to
            `config.clip_norm` (an optimizer's own `global_clipnorm` would clip per replica).
            Under "mixed_float16" it is wrapped in a `keras.optimizers.LossScaleOptimizer`.
        strategy: a `tf.distribute.Strategy`; default `make_strategy(config.distribute,
            config.logical_cpus)`.

    Example:
    >>> trainer = Trainer("runs/demo", TrainingConfig(epochs=2), build_model)  # doctest: +SKIP
    >>> history = trainer.fit(make_dataset, validate=lambda model, epoch: {"bleu": 0.3})
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: TrainingConfig,
        build_model: Callable[[], keras.Model],
        build_optimizer: Callable[[TrainingConfig], keras.optimizers.Optimizer] | None = None,
        strategy: tf.distribute.Strategy | None = None,
    ):
        refuse_jax_dropout_rng(config.dropout_rng)
        self.config = config = resolve_auto(config)
        self.run_dir = RunDir(run_dir)
        self.strategy = strategy or make_strategy(config.distribute, config.logical_cpus)
        replicas = self.strategy.num_replicas_in_sync
        if config.batch_size % replicas:
            raise UserError(
                f"batch_size {config.batch_size} does not split over {replicas} replicas; "
                f"expected a multiple of {replicas}"
            )
        self.chief = is_chief(self.strategy)
        keras.mixed_precision.set_dtype_policy(config.precision)
        make_deterministic(config.seed, strict=config.deterministic)
        with self.strategy.scope():
            self.model = build_model()
            if build_optimizer is None:
                optimizer = keras.optimizers.Adam(config.learning_rate)
            else:
                optimizer = build_optimizer(config)
            if config.precision == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
        if not callable(getattr(self.model, "loss_terms", None)):
            raise TypeError(
                f"{type(self.model).__name__} has no loss_terms(batch, training) method"
            )
        self.state = TrainingState()
        self.loop: TrainingLoop | None = None  # made by `fit`
        self._keeper: CheckpointKeeper | None = None
        self._step_fn = None
        self._pass_steps: int | None = None  # steps of one pass, for the progress bar

    # -- building --------------------------------------------------------------------------

    def build(self, make_dataset: DatasetFn) -> None:
        """Create the model's and optimizer's variables with one forward pass on a batch.

        `fit` calls it; call it yourself before `restore` or to read the initial weights.
        """
        if self._keeper is not None:
            return
        dataset = make_dataset(int(self.state.epoch.numpy()), tf.distribute.InputContext())
        batch = next(iter(dataset), None)
        if batch is None:
            raise UserError("make_dataset returned an empty dataset; expected some batches")
        with self.strategy.scope():
            self.model.loss_terms(batch, training=False)
            self.optimizer.build(self.model.trainable_variables)
        cardinality = int(dataset.cardinality().numpy())
        if cardinality > 0 and self.strategy.num_replicas_in_sync == 1:
            self._pass_steps = cardinality
        checkpoint = make_checkpoint(self.model, self.optimizer, self.state)
        self._keeper = CheckpointKeeper(
            checkpoint, self.run_dir.checkpoints, self.config.keep_checkpoints, self.chief
        )
        self._step_fn = make_train_step(
            self.model, self.optimizer, self.strategy,
            clip_norm=self.config.clip_norm, jit_compile=self.config.jit_compile,
        )

    def restore(self, checkpoint: str | None = None) -> str | None:
        """Restore `checkpoint` (default: the run's latest) into the model and optimizer.

        Returns the checkpoint restored, or None when the run has none. Call `build` first.
        """
        if self._keeper is None:
            raise RuntimeError("Trainer.restore needs the variables: call build(make_dataset)")
        restored = self._keeper.restore(checkpoint)
        self._apply_learning_rate()
        return restored

    def _apply_learning_rate(self) -> None:
        """Set the optimizer's rate to the config's after a restore, which brings back the
        rate the checkpoint was saved with: `--resume --learning-rate X` then trains at X.
        A schedule (the Transformer's) has no rate to set: it is a function of the step."""
        try:
            self.optimizer.learning_rate = self.config.learning_rate
        except (TypeError, AttributeError):  # a LearningRateSchedule, or a callable
            pass

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest complete checkpoint in `RUN_DIR/checkpoints`, or None."""
        return latest_checkpoint(self.run_dir.checkpoints)

    # -- training --------------------------------------------------------------------------

    def fit(
        self,
        make_dataset: DatasetFn,
        resume: bool = False,
        validate: ValidateFn | None = None,
        verbose: int = 1,
        init_from: str | os.PathLike | None = None,
        reset_optimizer: bool = False,
    ) -> list[dict[str, Any]]:
        """Train up to `config.epochs` epochs; returns one record per epoch run.

        The epochs run in `common.training.loop.TrainingLoop`, the loop the JAX trainer
        runs too; this class is its TensorFlow backend.

        Args:
            make_dataset: `(epoch, input_context) -> tf.data.Dataset` (see the module doc).
            resume: continue from the latest checkpoint of the run directory (from scratch
                when it has none). Without it a directory holding a run is refused.
            validate: `(model, epoch) -> dict`, called after each epoch; its numbers are
                logged as `val_<name>` (history and TensorBoard scalars), its strings as
                TensorBoard text (sample outputs) and its arrays as images (`(H, W, C)` or
                `(N, H, W, C)`, uint8 or floats in [0, 1]; attention maps).
            verbose: 0 silent, 1 a live progress bar, 2 one line per epoch.
            init_from: a checkpoint (of another run, or averaged) whose model weights start
                this run (a warm start: the optimizer, the position and the random generators,
                seeded by this run, start afresh; the dropout rates may differ). Used only when
                the run starts; a resumed run continues from its own checkpoint.
            reset_optimizer: on resume, restore everything but the optimizer, which starts
                afresh (its variables no longer match: more of the model became trainable,
                as when `captioner train --resume --fine-tune N` unfreezes encoder layers).

        Returns:
            The epoch records (also written to `history.jsonl`).

        Raises:
            UserError: the run directory holds another run and `resume` is false.
            TrainingDiverged: the loss became NaN or infinite; the model and optimizer are
                put back to the last good checkpoint, and nothing bad is saved.
            RunDirError: a checkpoint or log file could not be written.
        """
        self._make_dataset = make_dataset
        self._start = {"init_from": init_from, "reset_optimizer": reset_optimizer}
        self.loop = TrainingLoop(
            self, None if validate is None else lambda epoch: validate(self.model, epoch))
        return self.loop.fit(resume, verbose)

    @property
    def best(self) -> BestPolicy | None:
        """The best checkpoint and early stopping of the run `fit` trains (None before)."""
        return self.loop.best if self.loop is not None else None

    # -- the loop's backend (`common.training.loop.StepBackend`) ---------------------------

    name, first_claim, pipelined = "tensorflow", False, False

    def begin(self, resume: bool, verbose: int) -> None:
        init_from, reset_optimizer = self._start["init_from"], self._start["reset_optimizer"]
        self.build(self._make_dataset)
        resumed = True  # from the run's own checkpoint
        if resume and reset_optimizer and self._keeper.latest:
            partial = make_checkpoint(self.model, None, self.state)
            restored = self._keeper.restore(checkpoint=partial)
            # The numbering goes on from the restored checkpoint's (ckpt-N+1, not ckpt-1).
            self._keeper.checkpoint.save_counter.assign(partial.save_counter)
            if verbose:
                print(f"Resuming from {restored} at {self.state.as_dict()} with a new "
                      "optimizer")
        elif resume and (restored := self.restore()):
            if verbose:
                print(f"Resuming from {restored} at {self.state.as_dict()}")
        else:
            resumed = False
            if resume and verbose:
                print(f"No checkpoint in {self.run_dir.checkpoints}; starting from scratch")
            if init_from is not None:
                restored = restore_model(self.model, init_from, weights_only=True)
                if verbose:
                    print(f"Starting from the weights of {restored}")
        if resumed and init_from is not None and verbose:
            print(f"Not starting from the weights of {init_from}: a warm start is for a run's "
                  "start, and this run goes on from its own checkpoint", flush=True)

    def get_position(self) -> dict[str, int]:
        return self.state.as_dict()

    def set_position(self, step: int, epoch: int, step_in_epoch: int) -> None:
        self.state.set(step, epoch, step_in_epoch)

    def pass_steps(self) -> int | None:
        return self._pass_steps

    def batches(self, epoch: int, skip: int):
        make_dataset = self._make_dataset

        def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = make_dataset(epoch, context)
            if skip:
                per_pipeline = context.num_replicas_in_sync // context.num_input_pipelines
                dataset = dataset.skip(skip * per_pipeline)
            return dataset

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def step(self, batch: Any) -> dict[str, Any]:
        return self._step_fn(batch)

    def learning_rate(self, step: int) -> float:
        try:
            return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))
        except (TypeError, ValueError):
            return float("nan")

    def weights_finite(self) -> bool:
        return _all_finite(self.model.variables)

    def save_checkpoint(self) -> str | None:
        with failed_writes_named(self.run_dir.checkpoints):
            return self._keeper.save(self.get_position()["step"])

    def newest_checkpoint(self) -> str | None:
        return self._keeper.latest if self._keeper is not None else None

    def rollback(self, bad_weights_step: int | None) -> str | None:
        latest = self._keeper.latest
        if latest is not None and bad_weights_step is not None and (
                _checkpoint_step(latest) == bad_weights_step):
            self._keeper.discard(latest)
        return self._keeper.restore() if self._keeper.latest else None

    def evaluate_losses(self) -> dict[str, float]:
        return {}

    def best_writer(self) -> dict[str, Any]:
        """The best weights as a model-only checkpoint, `best/ckpt-STEP`."""
        return {"write": write_model_checkpoint, "errors": (OSError, tf.errors.OpError)}

    @contextlib.contextmanager
    def summaries(self):
        """TensorBoard's event writer (the chief's; the others' write nothing)."""
        with failed_writes_named(self.run_dir.logs):
            writer = (tf.summary.create_file_writer(str(self.run_dir.logs)) if self.chief
                      else tf.summary.create_noop_writer())
        try:
            with writer.as_default():
                yield
        except BaseException:
            with contextlib.suppress(*_WRITE_ERRORS):  # the first error tells why
                writer.close()
            raise
        with failed_writes_named(self.run_dir.logs):  # flushes the events still queued
            writer.close()

    def write_scalars(self, record: dict[str, Any]) -> None:
        prefix = "epoch" if record["kind"] == "epoch" else "train"
        # A full disk shows in a summary op once its queue is flushed (every few events).
        with failed_writes_named(self.run_dir.logs):
            for name, value in record.items():
                if name not in ("kind", "epoch", "step") and isinstance(value, (int, float)):
                    tf.summary.scalar(f"{prefix}/{name}", value, step=record["step"])
            tf.summary.flush()

    def write_samples(self, samples: dict[str, Any], step: int) -> None:
        """A validation's non-numeric results: text as text summaries, images as images."""
        # (An image of the wrong shape stays the validation's error: an InvalidArgumentError.)
        with failed_writes_named(self.run_dir.logs):
            for name, value in samples.items():
                if isinstance(value, str):
                    tf.summary.text(f"val/{name}", value, step=step)
                else:
                    images = np.asarray(value)
                    if images.ndim == 3:
                        images = images[None]
                    if images.dtype != np.uint8:
                        images = np.clip(images, 0.0, 1.0).astype(np.float32)
                    tf.summary.image(f"val/{name}", images, step=step, max_outputs=len(images))
            tf.summary.flush()

    def truncate_logs(self, step: int) -> None:
        with failed_writes_named(self.run_dir.logs,
                                 errors=_WRITE_ERRORS + (tf.errors.OpError,)):
            truncate_events(self.run_dir.logs, step)

    def finish(self) -> None:
        pass

    def status_fields(self) -> dict[str, Any]:
        return {}

    def _save(self) -> None:
        """Write a checkpoint now (`TrainingLoop.save`: never one of non-finite weights)."""
        self.loop.save()


def _checkpoint_step(path: str) -> int | None:
    """The global step a checkpoint was written at (None when unreadable)."""
    try:
        return int(tf.train.load_checkpoint(path).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.OpError, ValueError):
        return None


def _all_finite(variables: list) -> bool:
    """Whether every floating-point variable holds only finite values."""
    checks = [tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in variables
              if tf.as_dtype(v.dtype).is_floating]
    return bool(tf.reduce_all(checks)) if checks else True
