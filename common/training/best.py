"""The best checkpoint of a run by a validation metric, kept apart from the rotation.

The trainer keeps the last `keep_checkpoints` checkpoints for resuming; a run that peaks early
would lose its best weights to that rotation. `BestCheckpoint` writes the weights of every
validation that beats the best so far into `RUN_DIR/best/` (a model-only checkpoint, see
`write_model_checkpoint`) and records it in `RUN_DIR/best/best.json`:

    {"metric": "bleu", "mode": "max", "value": 31.2, "epoch": 4, "step": 5000,
     "checkpoint": "best/ckpt-5000", "version": 2}

(the checkpoint relative to the run directory, so that a moved run keeps its best; the epoch
numbered from 1, as the training log prints it: `Epoch 4/8: val_bleu 31.2 (best)`). A record
without `version`, written before epochs were numbered from 1, counted them from 0:
`best_record` reads it as if it were of version 2 (its epoch plus one), so an older run
resumes, stops early and reports its best as a new one does. The JAX
trainer, which has no TensorFlow, gives `write` and keeps `best/model.weights.h5` instead
(`"checkpoint": "best/model.weights.h5"`), by the same rules.

Early stopping reads the same record: training stops once `patience` validations in a row
have not beaten it. Both survive a resume, since they are read back from `best.json`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.config import load_json, save_json
from common.errors import UserError
from common.training.run_dir import RunDir, write_failure

BEST_DIR = RunDir.best
BEST_FILE = "best.json"
MODES = ("max", "min")
#: 2: `epoch` counts from 1, as the log prints it (a record without `version` counts from 0).
VERSION = 2


def best_record(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's `best.json` (epochs from 1, whatever version wrote it), or None when it has no
    best checkpoint yet."""
    path = Path(run_dir) / BEST_DIR / BEST_FILE
    if not path.is_file():
        return None
    record = load_json(path)
    epoch = record.get("epoch") if isinstance(record, dict) else None
    if isinstance(record, dict) and "version" not in record and isinstance(epoch, int):
        record = {**record, "epoch": epoch + 1, "version": VERSION}  # counted from 0
    return record


def best_checkpoint(run_dir: str | os.PathLike) -> str | None:
    """The path of the run's best checkpoint, or None when it has none."""
    record = best_record(run_dir)
    return str(Path(run_dir) / record["checkpoint"]) if record else None


def best_weights_file(run_dir: str | os.PathLike) -> str | None:
    """The run's best weights when they are a `.weights.h5` file (the JAX trainer's
    `best/model.weights.h5`), or None (no best, or a TensorFlow checkpoint)."""
    best = best_checkpoint(run_dir)
    return best if best is not None and best.endswith(".weights.h5") else None


class BestCheckpoint:
    """Tracks the best value of `metric` and saves the weights that reach it.

    Args:
        run_dir: the run directory.
        metric: the name the validation function returns (`"bleu"`; logged as `val_bleu`).
        mode: `"max"` (higher is better) or `"min"`.
        patience: stop after this many validations without a new best (0: never stop).
        chief: whether this process writes (every worker tracks, only the chief saves).
        write: `(model, path)` writes the weights to `path` in `best/`, which the record
            names: the backend's (`StepBackend.best_writer`): the TensorFlow trainer's
            checkpoint `best/ckpt-STEP`, the JAX trainer's `best/model.weights.h5`.
        file: the name `write` writes, in `best/` (None: `ckpt-STEP`).
        errors: what a failed write raises (no space, a file in the way): a one-line
            `RunDirError`.
    """

    def __init__(self, run_dir: str | os.PathLike, metric: str, mode: str = "max",
                 patience: int = 0, chief: bool = True,
                 write: Callable[[Any, Path], None] | None = None,
                 file: str | None = None,
                 errors: tuple[type[BaseException], ...] = (OSError,)):
        if mode not in MODES:
            raise UserError(f"unknown best-checkpoint mode {mode!r}; choose one of: "
                            f"{', '.join(MODES)}")
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / BEST_DIR
        self.metric, self.mode, self.patience, self.chief = metric, mode, patience, chief
        self.write, self.file, self.errors = write, file, errors
        record = best_record(run_dir)
        if record is not None and (record.get("metric"), record.get("mode")) != (metric, mode):
            raise UserError(
                f"{self.directory / BEST_FILE} tracks {record.get('mode')} "
                f"{record.get('metric')}, this run asks for {mode} {metric}; expected the "
                "same metric on resume (or move best/ aside)")
        self.record = record

    def better(self, value: float) -> bool:
        """Whether `value` beats the best so far (a NaN never does)."""
        if math.isnan(value):
            return False
        if self.record is None:
            return True
        best = self.record["value"]
        return value > best if self.mode == "max" else value < best

    def update(self, model: Any, metrics: dict[str, float], epoch: int, step: int) -> bool:
        """Record the validation of epoch `epoch` (the loop's position, from 0; recorded from
        1); save the weights when they are the new best.

        Returns:
            Whether they were the new best.

        Raises:
            UserError: the validation did not report `metric`.
        """
        if self.metric not in metrics:
            raise UserError(f"the best checkpoint is chosen by {self.metric!r}, which the "
                            f"validation does not report; it reports: "
                            f"{', '.join(sorted(metrics)) or 'nothing'}")
        value = float(metrics[self.metric])
        if not self.better(value):
            return False
        name = self.file or f"ckpt-{step}"
        record = {"metric": self.metric, "mode": self.mode, "value": value,
                  "epoch": epoch + 1, "step": step, "checkpoint": f"{BEST_DIR}/{name}",
                  "version": VERSION}
        if self.chief:
            old = self.record["checkpoint"] if self.record else None
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self.write(model, self.run_dir / record["checkpoint"])
                save_json(self.directory / BEST_FILE, record)  # atomic: the new one is complete
            except self.errors as exc:  # no space, a file in the way, ...
                raise write_failure(self.directory, exc) from None
            if old and Path(old).name != Path(record["checkpoint"]).name:
                for file in self.directory.glob(Path(old).name + ".*"):
                    file.unlink(missing_ok=True)
        self.record = record
        return True

    def should_stop(self, epoch: int) -> bool:
        """Whether `patience` validations since the best one did not beat it, epoch `epoch`
        (from 0, done) the last."""
        if not self.patience or self.record is None:
            return False
        return epoch + 1 - self.record["epoch"] >= self.patience


class BestPolicy:
    """What `best_metric`, `best_mode` and `early_stopping` ask of a trainer, the same on every
    backend: which metric the best checkpoint follows (a named one from the start; "auto": the
    one a resumed run's `best.json` names, else the validation's first metric once it has run),
    what an epoch's record says of it after each validation, and when early stopping ends the
    run.

    Args:
        run_dir: the run directory.
        training: the run's `common.training.TrainingConfig`.
        validates: whether the training has a validation.
        chief, write, file: as `BestCheckpoint`'s.

    Raises:
        UserError: `early_stopping` or a named `best_metric` without a validation.
    """

    def __init__(self, run_dir: str | os.PathLike, training: Any, validates: bool,
                 chief: bool = True, **writer: Any):
        self.run_dir, self.training, self.chief = Path(run_dir), training, chief
        self.writer = writer  # `BestCheckpoint`'s write, file and errors
        self.checkpoint: BestCheckpoint | None = None
        metric = training.best_metric
        if not validates and training.early_stopping:
            raise UserError(f"early_stopping {training.early_stopping} needs validation; "
                            "this training has none (no validation split, or "
                            "validation_examples 0)")
        if metric not in (None, "auto"):
            if not validates:
                raise UserError(f"best_metric {metric!r} needs a validation function; this "
                                "training has none")
            self._track(metric)
        elif metric == "auto" and validates:
            record = best_record(run_dir)
            if record is not None:  # a resumed run keeps the metric it started with
                self._track(record["metric"])

    def _track(self, metric: str) -> None:
        self.checkpoint = BestCheckpoint(self.run_dir, metric, self.training.best_mode,
                                         self.training.early_stopping, self.chief,
                                         **self.writer)

    def update(self, model: Any, metrics: dict[str, float], epoch: int,
               step: int) -> dict[str, Any]:
        """Record epoch `epoch`'s validation `metrics` (the loop's position, from 0), saving
        the weights of a new best; returns what the epoch's record says of it:
        `{"best_epoch": ...}` (from 1, as `best.json`), or `{}` when no best checkpoint is
        kept."""
        if self.checkpoint is None and self.training.best_metric == "auto" and metrics:
            self._track(next(iter(metrics)))
        if self.checkpoint is None:
            return {}
        self.checkpoint.update(model, metrics, epoch, step)
        record = self.checkpoint.record
        return {"best_epoch": record["epoch"] if record else None}

    def stops_after(self, epoch: int) -> bool:
        """Whether early stopping ends the run after `epoch` (from 0, done; -1 before the
        first)."""
        return (self.checkpoint is not None and epoch >= 0
                and self.checkpoint.should_stop(epoch))

    def stop_message(self, epoch: int) -> str:
        """The line a trainer prints when it stops after `epoch` (from 0; `stops_after`),
        its epochs numbered from 1 as the log and `best.json` number them."""
        record = self.checkpoint.record
        return (f"Early stopping after epoch {epoch + 1}: no better {self.checkpoint.metric} "
                f"for {self.training.early_stopping} validations (best {record['value']:.4g} "
                f"at epoch {record['epoch']})")
