"""The backend-neutral test files, run again on JAX: `tests/common/decoding` (greedy, beam
search and sampling against their NumPy references), in a pytest of their own with
`KERAS_BACKEND=jax` and TensorFlow unimportable (`tests/jax/no_tensorflow.py`). The files'
TensorFlow-only tests (graphs, XLA through `jit_compile`, SavedModels) are left out there by
their own markers (`tests/helpers/backends.py`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO, requires_jax, worker_env

pytestmark = [requires_jax, pytest.mark.slow]

FILES = ["tests/common/decoding"]


def test_decoding_passes_on_jax_without_tensorflow():
    env = worker_env()
    env["XLA_FLAGS"] += " --xla_backend_optimization_level=0"  # tiny programs: compile fast
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.jax.no_tensorflow", *FILES],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
