"""Timing training steps: examples/s, tokens/s, the share of time spent waiting on input.

Shared by the benchmark scripts of both families (`scripts/benchmarks/`). `time_steps` drives
any step function with the `common.training.step` contract (a dict of scalars holding the
global `examples` and `count`, the tokens or captions the loss is over) over an iterator of
batches, excluding warm-up steps, and splits each step's wall time into

- input wait: the time in `next(iterator)` (the tf.data pipeline could not keep up), and
- compute: the time in the step itself, until its outputs are read back to the host.

`device_info()` says where the numbers were measured (the CPU is often shared: the load
average is part of the record), `format_table` prints results and `write_json` saves them.

Another program's figure is never hard-coded into a ratio: `load_peer` imports a peer program
(the public examples transcribed in `../shared/peers`, relative to the repository root) when
that folder exists, and `alternate` measures both sides in turns in one process, so that both
see the same machine load. Without the folder a benchmark times the project alone and gives
no ratio.

Example:
>>> result = time_steps(step, iter(dataset), steps=20, warmup=3)  # doctest: +SKIP
>>> result.examples_per_s, result.input_wait_share  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from common.errors import UserError

# The peer programs' folder: `../shared/peers` relative to the repository root.
PEERS_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "peers"


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What `time_steps` measured over the timed steps (warm-up excluded).

    Args:
        steps: timed steps.
        seconds: their total wall time (input wait + compute).
        examples: examples trained on (the steps' global `examples`).
        tokens: units the loss was over (the steps' global `count`: target tokens).
        input_wait_s: time spent in `next(iterator)`.
        step_times_s: wall time of each timed step, input wait included.
        warmup_s: wall time of the warm-up steps (tracing and compilation included).
    """

    steps: int
    seconds: float
    examples: float
    tokens: float
    input_wait_s: float
    step_times_s: tuple[float, ...]
    warmup_s: float

    @property
    def examples_per_s(self) -> float:
        return self.examples / max(self.seconds, 1e-12)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-12)

    @property
    def input_wait_share(self) -> float:
        """The fraction of the timed wall time spent waiting for the next batch."""
        return self.input_wait_s / max(self.seconds, 1e-12)

    @property
    def median_step_ms(self) -> float:
        return 1000.0 * statistics.median(self.step_times_s)

    def as_dict(self) -> dict[str, Any]:
        """The measured fields and the derived rates, JSON-ready."""
        return {
            "steps": self.steps, "seconds": self.seconds, "examples": self.examples,
            "tokens": self.tokens, "input_wait_s": self.input_wait_s,
            "warmup_s": self.warmup_s, "examples_per_s": self.examples_per_s,
            "tokens_per_s": self.tokens_per_s, "input_wait_share": self.input_wait_share,
            "median_step_ms": self.median_step_ms,
        }


def time_steps(
    step: Callable[[Any], Mapping[str, Any]],
    batches: Iterator[Any],
    steps: int,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> Throughput:
    """Runs `warmup + steps` steps of `step` on `batches` and times the last `steps`.

    Args:
        step: `step(batch) -> dict` of scalars with the global `examples` and `count` (as
            returned by `common.training.step.make_train_step`). Reading them back (`float`)
            waits for the step to finish.
        batches: an iterator of batches (a distributed dataset's iterator, for instance).
        steps: the steps to time (>= 1).
        warmup: untimed steps first (tracing, compilation, pipeline fill).
        clock: the clock, in seconds.

    Returns:
        A `Throughput`.

    Raises:
        UserError: `steps` < 1, `warmup` < 0, or `batches` ran out first.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UserError(f"steps must be an integer >= 1, got {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise UserError(f"warmup must be an integer >= 0, got {warmup!r}")
    warmup_start = clock()
    for index in range(warmup):
        _read(step(_next(batches, index, warmup + steps)))
    warmup_s = clock() - warmup_start
    waits, times = [], []
    examples = tokens = 0.0
    for index in range(steps):
        start = clock()
        batch = _next(batches, warmup + index, warmup + steps)
        fetched = clock()
        metrics = _read(step(batch))
        end = clock()
        waits.append(fetched - start)
        times.append(end - start)
        examples += metrics["examples"]
        tokens += metrics["count"]
    return Throughput(steps=steps, seconds=sum(times), examples=examples, tokens=tokens,
                      input_wait_s=sum(waits), step_times_s=tuple(times), warmup_s=warmup_s)


def _next(batches: Iterator[Any], index: int, total: int) -> Any:
    try:
        return next(batches)
    except StopIteration:
        raise UserError(
            f"the data ran out after {index} batches; expected {total} (warm-up + timed steps)"
        ) from None


def _read(metrics: Mapping[str, Any]) -> dict[str, float]:
    missing = [key for key in ("examples", "count") if key not in metrics]
    if missing:
        raise TypeError(f"the step must return 'examples' and 'count'; missing {missing}")
    return {key: float(value) for key, value in metrics.items()}


def device_info() -> dict[str, Any]:
    """Where a benchmark ran: versions, CPU model and count, GPUs, and the load average."""
    import keras
    import tensorflow as tf

    info: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = os.getloadavg()[0]
    return info


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (2 decimals), None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table of `rows` (dicts) showing `columns`; floats get 4 significant
    digits, missing entries a dash.

    Example:
    >>> print(format_table([{"model": "a", "examples_per_s": 12.345}],
    ...                    ["model", "examples_per_s"]))
    model  examples_per_s
    a      12.35
    """
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def write_json(path: str | os.PathLike, results: Sequence[Mapping[str, Any]],
               **extra: Any) -> Path:
    """Writes `{"device": device_info(), **extra, "results": results}` to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"device": device_info(), **extra, "results": list(results)}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def load_peer(name: str, folder: str | os.PathLike | None = None) -> ModuleType | None:
    """The peer program `name` (e.g. `"keras_io_nmt"`) imported from `folder` (default
    `PEERS_DIR`), or None when the folder or its `name.py` is missing.

    The module is loaded from its file (the folder is not put on `sys.path`), once per
    process; it is registered in `sys.modules` as `peer_<name>`.
    """
    path = Path(folder if folder is not None else PEERS_DIR) / f"{name}.py"
    if not path.is_file():
        return None
    key = f"peer_{name}"
    loaded = sys.modules.get(key)
    if loaded is not None and Path(loaded.__file__ or "").resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def alternate(measures: Mapping[str, Callable[[], float]], rounds: int
              ) -> dict[str, list[float]]:
    """Calls every measure once per round, in turns, the order reversed every other round
    (so that a change in the machine's load falls on every side alike).

    Args:
        measures: name -> a function that measures once and returns the figure.
        rounds: how many times each is called (>= 1).

    Returns:
        name -> its figures, one per round, in round order.

    Example:
    >>> calls = []
    >>> figures = alternate({"a": lambda: calls.append("a") or 1.0,
    ...                      "b": lambda: calls.append("b") or 2.0}, rounds=3)
    >>> calls, figures["b"]
    (['a', 'b', 'b', 'a', 'a', 'b'], [2.0, 2.0, 2.0])
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise UserError(f"rounds must be an integer >= 1, got {rounds!r}")
    names = list(measures)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            figures[name].append(float(measures[name]()))
    return figures
