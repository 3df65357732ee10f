"""Results over several seeds: one JSON line per run, and a summary line with the spread.

A stochastic result is reported over at least three seeds with its spread; the ablation and
recipe scripts (`scripts/captioner_ablation.py`, `scripts/translator_recipe.py`) write one
line per run with `record` and a `summarize` line per variant.

Example:
>>> summary = summarize({"name": "x"}, [{"bleu": 40.0}, {"bleu": 42.0}, {"bleu": 41.0}])
>>> summary["bleu"]["mean"], summary["bleu"]["std"]
(41.0, 1.0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def summarize(head: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
              skip: Sequence[str] = ("seed",)) -> dict[str, Any]:
    """`head` plus, for every numeric field that all `results` have, its mean, sample standard
    deviation (0 for one result), minimum and maximum; `kind` is `"summary"`."""
    summary = {**head, "kind": "summary", "runs": len(results)}
    if not results:
        return summary
    for key, value in results[0].items():
        if key in skip or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        values = np.array([r[key] for r in results if r.get(key) is not None], dtype=float)
        if len(values) == len(results):
            summary[key] = {"mean": float(values.mean()),
                            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                            "min": float(values.min()), "max": float(values.max())}
    return summary


def record(path: str | Path, result: Mapping[str, Any], digits: int = 2) -> str:
    """Append `result` (floats rounded to `digits`) as one JSON line to `path`, and return it."""
    def rounded(value):
        if isinstance(value, Mapping):
            return {k: rounded(v) for k, v in value.items()}
        return round(float(value), digits) if isinstance(value, float) else value

    line = json.dumps(rounded(result), ensure_ascii=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return line
