"""The Keras backend a test runs on: markers for tests that only one backend can run.

The suite runs on TensorFlow (`tests/conftest.py`); `tests/jax/test_backend_neutral.py` runs the
backend-neutral test files again on JAX, in a process that may not import TensorFlow.
"""

from __future__ import annotations

import keras
import pytest

BACKEND = keras.backend.backend()

#: A test of what only TensorFlow has: `tf.function`, XLA through `jit_compile`, SavedModels.
tf_only = pytest.mark.skipif(BACKEND != "tensorflow",
                             reason="TensorFlow graphs and SavedModels: the TensorFlow backend")


def compile_search(fn):
    """`fn` compiled by the backend's compiler: `tf.function(jit_compile=True)` (XLA) on
    TensorFlow, `jax.jit` on JAX; as it is elsewhere."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True, autograph=False)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    return fn
