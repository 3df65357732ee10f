"""`scripts/benchmark_loss.py`: both forms of the loss's gradient timed on TensorFlow, and the
same gradient from each (the figures themselves are the benchmark's, not a test's)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_loss_benchmark_times_both_forms_and_their_gradients_agree(tmp_path):
    out = tmp_path / "loss.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "benchmark_loss.py"), "--tokens", "16",
         "--vocab", "50", "--steps", "2", "--rounds", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["backend"] == "tensorflow" and (report["tokens"], report["vocab"]) == (16, 50)
    assert all(len(report["ms"][form]) == 3 and min(report["ms"][form]) > 0
               for form in ("closed", "autodiff"))
    assert report["autodiff_over_closed"] == (report["median_ms"]["autodiff"]
                                              / report["median_ms"]["closed"])
    assert report["max_abs_grad_difference"] < 1e-6
    assert "autodiff / closed" in result.stdout


def test_the_loss_benchmark_refuses_an_empty_size():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "benchmark_loss.py"), "--tokens", "0"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "--tokens must be at least 1, got 0" in result.stderr
