"""Nadaraya–Watson kernel pooling: each kernel against NumPy, empty supports, the layer checks."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.layers.kernel_pooling import KERNELS, KernelPooling
from common.registry import UnknownNameError
from tests.helpers.layers import run_layer_test

B, T, S, DK, DV = 2, 5, 7, 2, 3
# Row 0: no padding; row 1: the last three keys are padding.
MASK = np.array([[1] * S, [1, 1, 1, 1, 0, 0, 0]], dtype=bool)


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


def _numpy_kernel(name, d, width):
    """Independent references, written from the formulas (float64)."""
    u = d / width
    if name == "gaussian":
        return np.exp(-0.5 * u**2)
    if name == "boxcar":
        return (d <= width).astype(np.float64)
    if name == "epanechnikov":
        return np.maximum(0.0, 1.0 - u**2)
    if name == "triangular":
        return np.maximum(0.0, 1.0 - u)
    raise AssertionError(name)


def _numpy_pooling(name, width, query, key, value, mask):
    d = np.sqrt(((query[:, :, None, :] - key[:, None, :, :]) ** 2).sum(-1))  # (B, T, S)
    k = _numpy_kernel(name, d.astype(np.float64), width) * mask[:, None, :]
    total = k.sum(-1, keepdims=True)
    weights = np.divide(k, total, out=np.zeros_like(k), where=total > 0)
    return weights @ value, weights


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.uniform(-1, 1, size=(B, T, DK)).astype("float32")
    key = rng.uniform(-1, 1, size=(B, S, DK)).astype("float32")
    value = rng.normal(size=(B, S, DV)).astype("float32")
    query[:, -1] = 5.0  # far from every key: outside every compact support
    return query, key, value


def test_registry_holds_the_kernels():
    assert KERNELS.names() == ["gaussian", "boxcar", "epanechnikov", "triangular"]


@pytest.mark.parametrize("name", KERNELS.names())
@pytest.mark.parametrize("width", [0.4, 1.3])
def test_each_kernel_matches_its_numpy_formula(name, width):
    query, key, value = _inputs()
    pooled, weights = KernelPooling(name, width=width)(query, key, value, mask=MASK)
    expected_pooled, expected_weights = _numpy_pooling(name, width, query, key, value, MASK)
    if name == "gaussian":  # the far query underflows in the naive formula; checked below
        expected_pooled, expected_weights = expected_pooled[:, :-1], expected_weights[:, :-1]
        pooled, weights = pooled[:, :-1], weights[:, :-1]
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", KERNELS.names())
def test_weights_sum_to_one_where_a_key_is_in_support_and_padding_gets_zero(name):
    query, key, value = _inputs(1)
    _, expected = _numpy_pooling(name, 0.7, query, key, value, MASK)
    pooled, weights = KernelPooling(name, width=0.7)(query, key, value, mask=MASK)
    weights, pooled = np.asarray(weights), np.asarray(pooled)
    in_support = expected.sum(-1) > 0
    if name == "gaussian":
        in_support[:] = True  # positive everywhere: every row has a key in support
    assert in_support.any() and (name == "gaussian" or not in_support.all())
    np.testing.assert_allclose(weights.sum(-1)[in_support], 1.0, rtol=1e-6)
    assert np.all(weights[~in_support] == 0.0) and np.all(pooled[~in_support] == 0.0)
    assert np.all(weights[1, :, 4:] == 0.0)
    assert np.all(np.isfinite(pooled))


def test_gaussian_far_query_averages_its_nearest_keys_instead_of_underflowing():
    key = np.array([[0.0, 1.0, 2.0, 2.0]], "float32")
    value = np.array([[10.0, 20.0, 30.0, 50.0]], "float32")
    pooled, weights = KernelPooling("gaussian", width=0.1)(np.array([[100.0]]), key, value)
    np.testing.assert_allclose(weights, [[[0.0, 0.0, 0.5, 0.5]]], atol=1e-7)
    np.testing.assert_allclose(pooled, [[40.0]], rtol=1e-6)


@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "triangular"])
def test_gradients_are_finite_with_empty_supports_and_zero_distances(name):
    query, key, value = _inputs(2)
    query[:, 0] = key[:, 0]  # zero distance to one key
    layer = KernelPooling(name, width=0.5, trainable_width=True)
    query, key = tf.constant(query), tf.constant(key)
    with tf.GradientTape() as tape:
        tape.watch([query, key])
        pooled, _ = layer(query, key, value, mask=MASK)
        loss = tf.reduce_sum(pooled**2)
    gradients = tape.gradient(loss, [query, key, *layer.trainable_weights])
    for g in gradients:
        assert np.all(np.isfinite(np.asarray(g)))
    assert np.asarray(gradients[-1]) != 0.0


def test_scalar_inputs_and_a_per_query_leave_one_out_mask():
    x = np.linspace(0, 4, 9, dtype="float32")[None]
    y = (2 * np.sin(x) + x).astype("float32")
    leave_one_out = ~np.eye(9, dtype=bool)[None]
    pooled, weights = KernelPooling("gaussian", width=0.5)(x, x, y, mask=leave_one_out)
    assert pooled.shape == (1, 9) and weights.shape == (1, 9, 9)
    assert np.all(np.diagonal(np.asarray(weights)[0]) == 0.0)
    expected, _ = _numpy_pooling("gaussian", 0.5, x[..., None], x[..., None], y[0, :, None],
                                 np.ones((1, 9)))
    assert not np.allclose(pooled, expected[..., 0])  # leaving a point out changes the fit


def test_a_single_query_per_example():
    query, key, value = _inputs()
    layer = KernelPooling("epanechnikov", width=0.9)
    pooled, weights = layer(query[:, 2], key, value, mask=MASK)
    full_pooled, full_weights = layer(query, key, value, mask=MASK)
    assert pooled.shape == (B, DV) and weights.shape == (B, S)
    np.testing.assert_allclose(pooled, np.asarray(full_pooled)[:, 2], atol=1e-6)
    np.testing.assert_allclose(weights, np.asarray(full_weights)[:, 2], atol=1e-7)


def test_wrong_kernel_name_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="gaussian, boxcar, epanechnikov, triangular"):
        KernelPooling("cosine")


@pytest.mark.parametrize("width", [0, -1.0, float("nan"), "wide"])
def test_bad_width_is_a_user_error(width):
    with pytest.raises(UserError, match="width"):
        KernelPooling("gaussian", width=width)


def test_boxcar_refuses_a_trainable_width():
    with pytest.raises(UserError, match="boxcar"):
        KernelPooling("boxcar", trainable_width=True)


def test_mismatched_query_and_key_sizes_are_a_user_error():
    query, key, value = _inputs()
    with pytest.raises(UserError, match="same size"):
        KernelPooling()(query[..., :1], key, value)


def test_layer_checks_with_a_learned_width():
    query, key, value = _inputs()
    outputs = run_layer_test(
        KernelPooling,
        {"kernel": "gaussian", "width": 0.8, "trainable_width": True},
        {"query": query, "key": key, "value": value, "mask": MASK},
        expected_output_shape=((B, T, DV), (B, T, S)),
        expected_num_trainable_weights=1,
    )
    expected, _ = _numpy_pooling("gaussian", 0.8, query, key, value, MASK)
    np.testing.assert_allclose(outputs[0][:, :-1], expected[:, :-1], rtol=1e-5, atol=1e-5)


def test_layer_checks_with_a_fixed_compact_kernel():
    query, key, value = _inputs()
    run_layer_test(
        KernelPooling,
        {"kernel": "boxcar", "width": 0.6},
        {"query": query, "key": key, "value": value},
        expected_output_shape=((B, T, DV), (B, T, S)),
        expected_num_trainable_weights=0,
    )
