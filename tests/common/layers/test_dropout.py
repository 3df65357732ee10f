"""`common.layers.Dropout` is `keras.layers.Dropout` outside `dropout_rng("rbg")` and on
TensorFlow (its JAX generator is tested in tests/jax/test_dropout.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from common.layers import Dropout, dropout_rng


@pytest.mark.parametrize("rng", ["keras", "rbg"])  # "rbg" acts on JAX only
def test_the_same_masks_as_keras_dropout_on_tensorflow(rng):
    x = np.random.default_rng(0).normal(size=(16, 32)).astype("float32")
    ours, theirs = Dropout(0.3, seed=7), keras.layers.Dropout(0.3, seed=7)
    with dropout_rng(rng):
        for _ in range(2):  # the seed state advances alike
            np.testing.assert_array_equal(np.asarray(ours(x, training=True)),
                                          np.asarray(theirs(x, training=True)))
    np.testing.assert_array_equal(np.asarray(ours(x, training=False)), x)
    # The same state (a checkpoint holds the same entries).
    assert [(v.name, v.shape, v.dtype) for v in ours.variables] == [
        (v.name, v.shape, v.dtype) for v in theirs.variables]


def test_an_unknown_generator_is_refused():
    with pytest.raises(ValueError, match="unknown dropout generator 'philox'; expected one of"):
        with dropout_rng("philox"):
            pass
