"""scripts/benchmarks/benchmark_determinism.py: both settings measured in child processes, in
turns."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "benchmarks" / "benchmark_determinism.py"
# The script imports the packages as installed: this checkout first, so it is what is tested.
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

pytestmark = pytest.mark.slow


def test_both_settings_are_timed_and_the_ratio_is_theirs(tmp_path):
    out = tmp_path / "determinism.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--steps", "1", "--warmup", "1",
         "--batch-size", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=900, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    medians = result["median_ms_per_step"]
    assert set(medians) == {"default", "deterministic"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["ms_per_step"].values())
    assert result["slowdown"] == pytest.approx(medians["deterministic"] / medians["default"])


def test_bad_options_are_one_line_errors():
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 2 and "--rounds must be >= 1" in done.stderr
    assert "Traceback" not in done.stderr
