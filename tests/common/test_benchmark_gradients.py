"""`scripts/benchmarks/benchmark_gradients.py`: both forms of each op's gradient timed on
TensorFlow, and the same gradients from each (the figures themselves are the benchmark's, not a
test's)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "benchmarks" / "benchmark_gradients.py"
ENV = {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}


@pytest.mark.parametrize("op, width", [("loss", 50), ("layer-norm", 8)])
def test_the_benchmark_times_both_forms_and_their_gradients_agree(tmp_path, op, width):
    out = tmp_path / "gradients.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--op", op, "--rows", "16", "--width", str(width),
         "--steps", "2", "--rounds", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["backend"], report["op"], report["rows"], report["width"]) == (
        "tensorflow", op, 16, width)
    assert all(len(report["ms"][form]) == 3 and min(report["ms"][form]) > 0
               for form in ("closed", "autodiff"))
    assert report["autodiff_over_closed"] == (report["median_ms"]["autodiff"]
                                              / report["median_ms"]["closed"])
    assert report["max_abs_grad_difference"] < 1e-4
    assert "autodiff / closed" in result.stdout


def test_the_benchmark_refuses_an_empty_size():
    result = subprocess.run([sys.executable, str(SCRIPT), "--rows", "0"], capture_output=True,
                            text=True, timeout=120, cwd=REPO, env=ENV)
    assert result.returncode == 2
    assert "--rows must be at least 1, got 0" in result.stderr
