"""Results over several seeds: one JSON line per run, and a summary line with the spread.

A stochastic result is reported over at least three seeds with its spread; the ablation and
recipe scripts (`scripts/experiments/captioner_ablation.py`, `scripts/translator_recipe.py`)
write one line per run with `record` and a `summarize` line per variant.

Example:
>>> summary = summarize({"name": "x"}, [{"bleu": 40.0}, {"bleu": 42.0}, {"bleu": 41.0}])
>>> summary["bleu"]["mean"], summary["bleu"]["std"]
(41.0, 1.0)
>>> summarize({}, [{"loss": [3.0, 2.0]}, {"loss": [5.0, 2.0]}])["loss"]["mean"]
[4.0, 2.0]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _numbers(value: Any) -> bool:
    """A number, or a non-empty list of numbers (a curve); booleans are neither."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_number(v) for v in value)
    return _number(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summarize(head: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
              skip: Sequence[str] = ("seed",)) -> dict[str, Any]:
    """`head` plus, for every numeric field that all `results` have, its mean, sample standard
    deviation (0 for one result), minimum and maximum; `kind` is `"summary"`. A field that is
    a list of numbers of one length in every result (a loss curve) is summarized point by
    point: its mean, std, min and max are lists."""
    summary = {**head, "kind": "summary", "runs": len(results)}
    if not results:
        return summary
    for key, value in results[0].items():
        if key in skip or not _numbers(value):
            continue
        rows = [r.get(key) for r in results]
        if not all(_numbers(r) and np.shape(r) == np.shape(value) for r in rows):
            continue
        values = np.array(rows, dtype=float)
        stats = {"mean": values.mean(axis=0),
                 "std": values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros_like(values[0]),
                 "min": values.min(axis=0), "max": values.max(axis=0)}
        summary[key] = {k: v.tolist() for k, v in stats.items()}
    return summary


def record(path: str | Path, result: Mapping[str, Any], digits: int = 2) -> str:
    """Append `result` (floats rounded to `digits`) as one JSON line to `path`, and return it."""
    def rounded(value):
        if isinstance(value, Mapping):
            return {k: rounded(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [rounded(v) for v in value]
        return round(float(value), digits) if isinstance(value, float) else value

    line = json.dumps(rounded(result), ensure_ascii=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return line
