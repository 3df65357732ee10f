"""Running means of the step metrics, and the per-epoch progress bar.

Metrics from the training step are means over a step's global count (tokens, captions);
`RunningMeans` combines steps weighted by that count, so an epoch's loss is the mean over all
of its units, not the mean of step means.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import keras


def say_epoch_already_ran(epoch: int, skip: int, steps: int | None) -> None:
    """Say so when a resumed epoch has run its `steps` already (`steps_per_epoch` lowered on
    resume below the checkpoint's `skip` steps in the epoch): it ends with no step trained."""
    if steps is not None and skip >= steps:
        print(f"Epoch {epoch + 1} already ran {skip} steps, steps_per_epoch is now {steps}: it "
              "ends without training (its record has no loss)", flush=True)


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
        verbose: 0 silent, 1 a live bar, 2 one line per epoch.
    """

    def __init__(self, epoch: int, epochs: int, steps: int | None, initial_step: int = 0,
                 verbose: int = 1):
        self.verbose = verbose
        self.means = RunningMeans()
        self.start = time.perf_counter()
        self.step = initial_step
        self.steps = steps
        self._bar = None
        if verbose:
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

    def finish(self) -> None:
        """Close the bar (a bar that reached its known target has closed itself)."""
        if self._bar is not None and (self.steps is None or self.step != self.steps):
            values = [("loss", self.means.result().get("loss", float("nan"))),
                      ("examples/s", self.examples_per_second)]
            self._bar.update(self.step, values=values, finalize=True)
