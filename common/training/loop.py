"""`TrainingLoop`: the one training loop, over a step backend (TensorFlow or JAX).

The loop is what a run does between its start and its end, written once for both backends:
the epochs and the batches of each, the step metrics (read one step late where the backend
dispatches asynchronously), the divergence checks and the rollback to the last good
checkpoint, the step and epoch records (`history.jsonl`, TensorBoard where the backend writes
it), the progress bar, the checkpoint cadence, the validation after each epoch, the best
checkpoint and early stopping (`common.training.best.BestPolicy`), exact resume (the position
`step, epoch, step_in_epoch` and the batches of the interrupted epoch skipped), and
`status.json`.

A backend (`StepBackend`) supplies what differs: the compiled step and where it runs
(`common.training.trainer.Trainer`: `tf.function` under a `tf.distribute` strategy;
`common.training.jax_trainer.JaxTrainer`: `jax.jit` under a `keras.distribution`), the
batches of an epoch, the checkpoint format, and how to start (build, restore, warm start).
What one backend has and the other lacks is refused before a run starts, in one line naming
the backend that has it (`common.training.capabilities`).

Epochs are numbered from 0 inside (the position, `batches(epoch, skip)`, the `validate(epoch)`
callable, a dataset's `seed + epoch`) and from 1 wherever a user reads them: the progress lines
(`Epoch 4/8 ...`), the `epoch` and `best_epoch` of `history.jsonl`'s records and of `fit`'s,
`best.json` (`common.training.best`), `status.json` and the messages. `status.json` gives the
epoch of its newest step (`epoch`, 0 before the first) and the epochs done (`epochs_done`).
Records written before that numbering (an `epoch` 0 among them) are read renumbered
(`RunDir.read_history`) and rewritten so on resume (`RunDir.truncate_history`).

Order of the writes at an epoch's end (both backends, see the README's "Robustness"): the
weights are checked finite; the validation runs; the epoch's record is appended to
`history.jsonl`; then the checkpoint is written. A run killed between any two resumes from
the checkpoint before, where `truncate_history` cuts the record off, and the epoch is run and
recorded again: every epoch is recorded once, whenever the run was stopped.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

from common.errors import UserError
from common.training.best import BestPolicy
from common.training.config import TrainingConfig
from common.training.progress import (
    EpochProgress,
    RunningMeans,
    say_compiling,
    say_epoch_already_ran,
)
from common.training.run_dir import RunDir

Validate = Callable[[int], Mapping[str, Any] | None]


class TrainingDiverged(UserError):
    """The loss or a weight became NaN or infinite; training stopped without saving the bad
    state, and the model is back at the newest checkpoint left."""


class StepBackend(Protocol):
    """What `TrainingLoop` asks of a backend.

    Attributes:
        name: `"tensorflow"` or `"jax"` (`RunDir.claim`'s `backend`).
        first_claim: whether the run's config and vocabularies are written after the claim
            (`RunDir.claim`'s `first`: the JAX trainer copies them from the prepared folder).
        pipelined: the step returns before it has run (JAX's asynchronous dispatch): the loop
            reads step N's metrics after queueing step N + 1.
        run_dir, config, chief, model: the run directory, the `TrainingConfig`, whether this
            process writes, the Keras model.
    """

    name: str
    first_claim: bool
    pipelined: bool
    run_dir: RunDir
    config: TrainingConfig
    chief: bool
    model: Any

    def begin(self, resume: bool, verbose: int) -> None:
        """Build, then restore the run's newest checkpoint (`resume`) or start it afresh."""

    def get_position(self) -> dict[str, int]:
        """`{"step", "epoch", "step_in_epoch"}` of the training now."""

    def set_position(self, step: int, epoch: int, step_in_epoch: int) -> None:
        """Move the position (saved with the next checkpoint)."""

    def pass_steps(self) -> int | None:
        """The steps of one pass over the training data, when known before the first."""

    def batches(self, epoch: int, skip: int) -> Iterable[Any]:
        """Epoch `epoch`'s batches after its first `skip` (the same from the same seed)."""

    def step(self, batch: Any) -> Mapping[str, Any]:
        """One optimizer step; its metrics (`loss`, `count`, `examples`, extra terms), which
        may be device scalars that `float` waits for."""

    def learning_rate(self, step: int) -> float:
        """The learning rate after `step` steps (NaN when it cannot be read)."""

    def weights_finite(self) -> bool:
        """Whether every floating-point weight is finite."""

    def save_checkpoint(self) -> str | None:
        """Write a checkpoint at the position (weights checked finite just before); its path,
        or None where this process does not write."""

    def newest_checkpoint(self) -> str | None:
        """The newest complete checkpoint of the run, or None."""

    def rollback(self, bad_weights_step: int | None) -> str | None:
        """Delete the newest checkpoint when it was written at `bad_weights_step` (it holds
        the weights that diverged), and restore the newest left; returns it, or None."""

    def evaluate_losses(self) -> dict[str, float]:
        """The loss terms over a validation split, recorded as `val_*` (may be `{}`)."""

    def best_writer(self) -> dict[str, Any]:
        """`BestCheckpoint`'s `write`, `file` and `errors` for this backend's best weights."""

    def summaries(self) -> contextlib.AbstractContextManager:
        """Where `write_scalars` and `write_samples` go while the run trains."""

    def write_scalars(self, record: Mapping[str, Any]) -> None:
        """Log a step or epoch record's numbers (TensorBoard)."""

    def write_samples(self, samples: Mapping[str, Any], step: int) -> None:
        """Log a validation's texts and images (TensorBoard)."""

    def truncate_logs(self, step: int) -> None:
        """Cut the logs back to `step` on resume (TensorBoard events)."""

    def finish(self) -> None:
        """What a run writes at its end besides the last checkpoint."""

    def status_fields(self) -> dict[str, Any]:
        """Extra fields of `status.json`."""


class TrainingLoop:
    """Runs `backend` for `config.epochs` epochs (see the module docstring).

    Args:
        backend: a `StepBackend`.
        validate: `(epoch) -> dict`, called after each epoch: its numbers are logged as
            `val_<name>` and choose the best checkpoint; its other values (texts, images) go to
            `write_samples`. None: no validation.
    """

    def __init__(self, backend: StepBackend, validate: Validate | None = None):
        self.backend = backend
        self.validate = validate
        self.config = backend.config
        self.best: BestPolicy | None = None
        self._pass_steps: int | None = None
        self._first_step = 1  # the number of the first step `fit` trains
        self._started = 0.0  # when it was queued

    def fit(self, resume: bool = False, verbose: int = 1) -> list[dict[str, Any]]:
        """Train up to `config.epochs` epochs; returns one record per epoch run.

        Raises:
            UserError: the run directory holds another run and `resume` is false.
            TrainingDiverged: the loss or a weight became NaN or infinite; the model is put
                back to the last good checkpoint, and nothing bad is saved.
            RunDirError: a checkpoint or log file could not be written.
        """
        backend, config = self.backend, self.config
        self.best = BestPolicy(backend.run_dir.path, config, self.validate is not None,
                               backend.chief, **backend.best_writer())
        if backend.chief:
            backend.run_dir.claim(resume, first=backend.first_claim, backend=backend.name)
        backend.begin(resume, verbose)
        self._pass_steps = backend.pass_steps()
        position = backend.get_position()
        if backend.chief:
            backend.run_dir.truncate_history(position["step"])
            backend.truncate_logs(position["step"])
        if position["epoch"] >= config.epochs or self.best.stops_after(position["epoch"] - 1):
            if verbose:
                print(f"Nothing to train: the run has done {position['epoch']} of its "
                      f"{config.epochs} epochs" + (" and stopped early" if position["epoch"] <
                                                   config.epochs else ""), flush=True)
            self._finish()
            return []
        self._write_status("training")
        records = []
        try:
            with backend.summaries():
                skip = position["step_in_epoch"]
                self._first_step = position["step"] + 1
                for epoch in range(position["epoch"], config.epochs):
                    records.append(self._run_epoch(epoch, skip, verbose))
                    skip = 0
                    if self.best.stops_after(epoch):
                        if verbose:
                            print(self.best.stop_message(epoch), flush=True)
                        break
            backend.finish()
        except BaseException as exc:
            reason = " ".join(str(exc).split())[:500] or type(exc).__name__
            try:
                self._write_status("failed", error=f"{type(exc).__name__}: {reason}")
            except UserError:  # the directory cannot be written: the first error tells why
                pass
            raise
        self._write_status("finished", checkpoint=backend.newest_checkpoint())
        return records

    def _finish(self) -> None:
        self.backend.finish()
        self._write_status("finished", checkpoint=self.backend.newest_checkpoint())

    def _run_epoch(self, epoch: int, skip: int, verbose: int) -> dict[str, Any]:
        backend, config = self.backend, self.config
        steps, every = config.steps_per_epoch, config.checkpoint_every
        step = backend.get_position()["step"]
        if verbose:
            say_epoch_already_ran(epoch, skip, steps)
        progress = EpochProgress(epoch, config.epochs, steps or self._pass_steps, skip, verbose)
        window = RunningMeans()
        step_in_epoch = skip

        def settle(number: int, queued: Mapping[str, Any]) -> None:
            """Read step `number`'s metrics (waiting for it), check and log them."""
            metrics = {k: float(v) for k, v in queued.items()}
            if number == self._first_step and verbose:
                progress.first_step(time.perf_counter() - self._started)
            if not math.isfinite(metrics["loss"]):
                self._diverged(f"the loss was {metrics['loss']}", epoch, number, number - 1)
            progress.update(metrics)
            window.add(metrics)
            if number % config.log_every == 0:
                self._log({"kind": "step", "epoch": epoch + 1, "step": number,
                           **window.result(),
                           "learning_rate": backend.learning_rate(number)})
                window.reset()

        # On a pipelined backend step N's metrics are read after step N + 1 is queued, so the
        # device never waits on Python between steps; a checkpoint reads its step's metrics
        # first, so that a diverged step is never saved. A checkpoint due mid-epoch is written
        # once the next batch exists: on an epoch's last step the epoch-end one is written
        # instead, not a second one.
        pending: tuple[int, Mapping[str, Any]] | None = None
        save_due = False
        runs_steps = steps is None or skip < steps
        if runs_steps and step + 1 == self._first_step:  # it compiles the training step
            if verbose:
                say_compiling(epoch, config.epochs)
            self._started = time.perf_counter()
        if runs_steps:
            for batch in _limited(backend.batches(epoch, skip), steps, skip):
                if save_due:
                    self.save()
                    save_due = False
                queued = backend.step(batch)
                step += 1
                step_in_epoch += 1
                backend.set_position(step, epoch, step_in_epoch)
                if pending is not None:
                    settle(*pending)
                pending = (step, queued)
                due = bool(every) and step % every == 0
                if due or not backend.pipelined:
                    settle(*pending)
                    pending = None
                save_due = due
        if pending is not None:
            settle(*pending)
        if step_in_epoch == 0:
            raise UserError(f"epoch {epoch + 1} gave no batches; expected at least one")
        if steps is None and skip == 0:
            self._pass_steps = step_in_epoch
        progress.finish()
        record = {"kind": "epoch", "epoch": epoch + 1, "step": step, **progress.means.result(),
                  "examples_per_s": progress.examples_per_second, "time_s": progress.elapsed}
        # Validation comes before the epoch-end checkpoint: a run stopped while it validates
        # resumes before the epoch's end and validates again, rather than after it with the
        # epoch never validated (and a best checkpoint chosen without it). Weights gone
        # non-finite stop the run first, so they are neither validated, recorded nor kept.
        if not backend.weights_finite():
            self._diverged("a weight became NaN or infinite", epoch, step, None)
        record.update({f"val_{k}": v for k, v in backend.evaluate_losses().items()})
        if self.validate is not None:
            results = self.validate(epoch) or {}
            metrics = {k: float(v) for k, v in results.items() if _is_number(v)}
            record.update({f"val_{k}": v for k, v in metrics.items()})
            if backend.chief:
                backend.write_samples({k: v for k, v in results.items() if k not in metrics},
                                      step)
            record.update(self.best.update(backend.model, metrics, epoch, step))
        # The record before the checkpoint (see the module docstring).
        self._log(record)
        backend.set_position(step, epoch + 1, 0)
        self.save()
        if verbose:  # the progress bar has shown the loss
            self._say_validation(record, epoch)
        return record

    def _say_validation(self, record: dict[str, Any], epoch: int) -> None:
        """`Epoch 4/8: val_loss 1.92, val_bleu 31.2 (best)`: the epoch's validation, the metric
        the best checkpoint follows marked when this epoch holds the best so far."""
        tracked = self.best.checkpoint if self.best is not None else None
        best = (f"val_{tracked.metric}" if tracked is not None
                and record.get("best_epoch") == epoch + 1 else None)
        shown = ", ".join(f"{k} {v:.4g}" + (" (best)" if k == best else "")
                          for k, v in record.items()
                          if k.startswith("val_") and isinstance(v, float))
        if shown:
            print(f"Epoch {epoch + 1}/{self.config.epochs}: {shown}", flush=True)

    def save(self) -> None:
        """Write a checkpoint at the backend's position; weights gone non-finite are never
        saved (`TrainingDiverged`, the model put back to the newest checkpoint)."""
        if not self.backend.weights_finite():
            position = self.backend.get_position()
            # The epoch of the newest step (at an epoch's end the position is the next's).
            epoch = position["epoch"] - (position["step_in_epoch"] == 0)
            self._diverged("a weight became NaN or infinite", max(epoch, 0),
                           position["step"], None)
        path = self.backend.save_checkpoint()
        if path is not None:
            self._write_status("training", checkpoint=path)

    def _diverged(self, what: str, epoch: int, step: int, bad_weights_step: int | None) -> None:
        """Put the model back to the newest good checkpoint and raise `TrainingDiverged`
        (`epoch` from 0, said from 1).

        `bad_weights_step`: the step after which the weights gave the non-finite loss; a
        checkpoint of that step holds the very weights that diverged, so it is deleted first.
        """
        restored = self.backend.rollback(bad_weights_step)
        raise TrainingDiverged(
            f"training diverged: {what} at step {step} (epoch {epoch + 1}); stopped without "
            f"saving. Last good checkpoint: {restored or 'none yet'}; expected a finite "
            "loss, try a lower learning_rate or set clip_norm")

    def _log(self, record: dict[str, Any]) -> None:
        if self.backend.chief:
            self.backend.run_dir.append_history(record)
            self.backend.write_scalars(record)

    def _write_status(self, state: str, **fields: Any) -> None:
        backend = self.backend
        if backend.chief:
            position = backend.get_position()
            done = position["epoch"]  # the position counts the epochs done
            # The epoch of the newest step, from 1 as the log prints it (0 before any step).
            epoch = done + 1 if position["step_in_epoch"] else done
            backend.run_dir.write_status(state, step=position["step"], epoch=epoch,
                                         epochs_done=done,
                                         step_in_epoch=position["step_in_epoch"],
                                         epochs=self.config.epochs, **backend.status_fields(),
                                         **fields)


def _limited(batches: Iterable[Any], steps: int | None, skip: int) -> Iterator[Any]:
    """The batches of an epoch resumed after `skip` steps, at most `steps - skip` of them."""
    iterator = iter(batches)
    if steps is None:
        yield from iterator
        return
    for _ in range(steps - skip):
        batch = next(iterator, _END)
        if batch is _END:
            return
        yield batch


_END = object()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) or (
        isinstance(value, np.ndarray) and value.ndim == 0)
