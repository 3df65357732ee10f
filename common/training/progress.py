"""Running means of the step metrics, and the per-epoch progress bar.

Metrics from the training step are means over a step's global count (tokens, captions);
`RunningMeans` combines steps weighted by that count, so an epoch's loss is the mean over all
of its units, not the mean of step means.

The live bar is for a terminal: written to a file or a pipe (`train ... > demo.log`) its
redraws would fill the log with cursor escapes, so there each epoch gets one plain line
instead, as with `--verbose 2`.

A run's first step traces and compiles the training step (a self-critical captioner's
sampling, greedy decoding and reward with it: a minute or more on a loaded CPU); a line says
so before it (`say_compiling`), and, in a log, one when it is done (`EpochProgress.first_step`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

import keras


def say_epoch_already_ran(epoch: int, skip: int, steps: int | None) -> None:
    """Say so when a resumed epoch has run its `steps` already (`steps_per_epoch` lowered on
    resume below the checkpoint's `skip` steps in the epoch): it ends with no step trained."""
    if steps is not None and skip >= steps:
        print(f"Epoch {epoch + 1} already ran {skip} steps, steps_per_epoch is now {steps}: it "
              "ends without training (its record has no loss)", flush=True)


def say_compiling(epoch: int, epochs: int) -> None:
    """The line before a run's first step (of epoch `epoch`, from 0), which compiles the
    training step: what the run does while nothing else shows."""
    print(f"Epoch {epoch + 1}/{epochs}: compiling the training step (the first step waits "
          "for it)", flush=True)


class RunningMeans:
    """Count-weighted means of the metrics of several steps.

    Example:
    >>> means = RunningMeans()
    >>> means.add({"loss": 1.0, "count": 1.0, "examples": 1.0})
    >>> means.add({"loss": 4.0, "count": 3.0, "examples": 2.0})
    >>> means.result()["loss"], means.examples
    (3.25, 3.0)
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._weighted: dict[str, float] = {}
        self.count = 0.0
        self.examples = 0.0
        self.steps = 0

    def add(self, metrics: Mapping[str, float]) -> None:
        count = float(metrics["count"])
        self.count += count
        self.examples += float(metrics.get("examples", 0.0))
        self.steps += 1
        for key, value in metrics.items():
            if key not in ("count", "examples"):
                self._weighted[key] = self._weighted.get(key, 0.0) + float(value) * count

    def result(self) -> dict[str, float]:
        denominator = max(self.count, 1e-12)
        return {key: total / denominator for key, total in self._weighted.items()}


class EpochProgress:
    """A `keras.utils.Progbar` for one epoch showing the running loss and examples/s.

    Args:
        epoch: the epoch (0-based; shown 1-based).
        epochs: the number of epochs of the run.
        steps: the steps this epoch will run, or None when unknown (one pass over the data).
        initial_step: steps of the epoch already done (resumed runs).
        verbose: 0 silent, 1 a live bar (one line per epoch when stdout is not a terminal),
            2 one line per epoch.

    The one line, printed by `finish`:
    `Epoch 2/10 - 250/250 steps - 41s - loss: 1.8354 - examples/s: 387.2`.
    """

    def __init__(self, epoch: int, epochs: int, steps: int | None, initial_step: int = 0,
                 verbose: int = 1):
        self.verbose = verbose
        self.means = RunningMeans()
        self.start = time.perf_counter()
        self.step = initial_step
        self.steps = steps
        self.epoch, self.epochs = epoch, epochs
        self._bar = None
        self._line = verbose == 2 or (verbose == 1 and not _is_terminal(sys.stdout))
        if verbose and not self._line:
            print(f"Epoch {epoch + 1}/{epochs}", flush=True)
            self._bar = keras.utils.Progbar(
                steps, verbose=verbose, stateful_metrics=["loss", "examples/s"]
            )

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def examples_per_second(self) -> float:
        return self.means.examples / max(self.elapsed, 1e-9)

    def update(self, metrics: Mapping[str, float]) -> None:
        self.means.add(metrics)
        self.step += 1
        if self._bar is not None:
            values = [("loss", self.means.result()["loss"]),
                      ("examples/s", self.examples_per_second)]
            self._bar.update(self.step, values=values)

    def first_step(self, seconds: float) -> None:
        """In a log (one line per epoch), say that the run's first step, compiling included,
        took `seconds`: the epoch's line may be minutes away. (A live bar shows it.)"""
        if self._line:
            print(f"Epoch {self.epoch + 1}/{self.epochs}: first step done in {seconds:.0f}s "
                  "(compiling included)", flush=True)

    def finish(self) -> None:
        """Close the bar (a bar that reached its known target has closed itself), or print
        the epoch's one line."""
        if self._line:
            print(self.summary(), flush=True)
        elif self._bar is not None and (self.steps is None or self.step != self.steps):
            values = [("loss", self.means.result().get("loss", float("nan"))),
                      ("examples/s", self.examples_per_second)]
            self._bar.update(self.step, values=values, finalize=True)

    def summary(self) -> str:
        """The epoch's one plain line: its steps, time, mean loss and examples/s."""
        steps = f"{self.step}/{self.steps}" if self.steps is not None else f"{self.step}"
        loss = self.means.result().get("loss", float("nan"))
        shown = f"{loss:.4f}" if abs(loss) > 1e-3 or loss != loss else f"{loss:.4e}"
        return (f"Epoch {self.epoch + 1}/{self.epochs} - {steps} steps - {self.elapsed:.0f}s - "
                f"loss: {shown} - examples/s: {self.examples_per_second:.1f}")


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False
