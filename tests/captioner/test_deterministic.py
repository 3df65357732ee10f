"""`captioner train --deterministic`: two processes, one seed, the same weights bit for bit.

Without the flag the demo's hard-attention step differs between two processes in the last bits
of its gradients already at step 1 (Grappler sums partial gradients in a different order), so
the comparison below fails if `--deterministic` stops doing its job.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _train(run_dir: Path, *extra: str) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "captioner", "train", "--preset", "demo", "--attention", "hard",
         "--no-coverage", "--data-option", "num_images=128", "--epochs", "1", "--steps-per-epoch", "3",
         "--out", str(run_dir), "--verbose", "0", *extra],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]


def _variables(run_dir: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run_dir / "checkpoints")))
    values = {name: np.asarray(reader.get_tensor(name))
              for name in reader.get_variable_to_shape_map()}
    return {name: value for name, value in values.items() if value.dtype.kind in "fiu"}


def test_two_deterministic_runs_are_bit_identical(tmp_path):
    _train(tmp_path / "a", "--deterministic")
    _train(tmp_path / "b", "--deterministic")
    a, b = _variables(tmp_path / "a"), _variables(tmp_path / "b")
    assert a.keys() == b.keys() and len(a) > 20
    different = [name for name in a if not np.array_equal(a[name], b[name])]
    assert not different, f"{len(different)} variables differ, e.g. {different[:3]}"
    # The runs trained: the weights moved away from the (seeded, equal) initial ones.
    assert any("optimizer" in name and np.any(a[name]) for name in a)
