"""Hard (stochastic) attention: sampling statistics, REINFORCE gradients, masking, checks."""

import numpy as np
import pytest
import tensorflow as tf

from common.layers import HardAttention
from tests.helpers.layers import run_layer_test

B, T, S, D = 2, 3, 5, 4
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(B, T, D)).astype("float32"),
        rng.normal(size=(B, S, D)).astype("float32"),
    )


def test_sampled_indices_follow_the_weights():
    # 10,000 rows with the same query give 10,000 draws from one distribution over S = 5 keys,
    # the last of them padding.
    n = 10_000
    keys = np.eye(S, D, dtype="float32") * np.array([[2.0], [1.0], [0.5], [-1.0], [3.0]])
    query = np.ones((n, 1, D), "float32")
    value = np.broadcast_to(keys, (n, S, D))
    mask = np.broadcast_to(np.array([1, 1, 1, 1, 0], bool), (n, S))
    layer = HardAttention("dot", seed=1234)
    _, index, _, weights = layer(query, value, mask=mask, sample=True)
    p = np.asarray(weights)[0, 0].astype(np.float64)
    assert p[4] == 0.0 and np.all(p[:4] > 0.02)
    counts = np.bincount(np.asarray(index).ravel(), minlength=S)
    assert counts[4] == 0, "a padded key was sampled"
    expected = n * p[:4]
    chi_square = float(np.sum((counts[:4] - expected) ** 2 / expected))
    # Pearson's chi-square with 4 - 1 = 3 degrees of freedom: the 0.999 quantile is 16.27, so
    # a correct sampler fails this (for a random seed) one time in a thousand.
    assert chi_square < 16.27, (counts, expected)


def test_same_seed_gives_same_samples_and_argmax_without_sampling():
    query, value = _inputs()
    a = HardAttention("dot", seed=7)(query, value, mask=MASK, sample=True)[1]
    b = HardAttention("dot", seed=7)(query, value, mask=MASK, sample=True)[1]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    layer = HardAttention("dot", seed=7)
    _, index, _, weights = layer(query, value, mask=MASK)  # not training: argmax
    np.testing.assert_array_equal(np.asarray(index), np.argmax(np.asarray(weights), -1))
    _, index_training, _, _ = layer(query, value, mask=MASK, training=True)
    assert np.asarray(index_training).shape == (B, T)


def test_context_log_prob_and_masks_are_consistent():
    query, value = _inputs()
    mask = MASK.copy()
    mask[1] = False  # row 1: every key is padding
    context, index, log_prob, weights = HardAttention("additive", units=6, seed=3)(
        query, value, mask=mask, sample=True
    )
    context, index, log_prob, weights = map(np.asarray, (context, index, log_prob, weights))
    assert index.dtype == np.int32 and log_prob.dtype == np.float32
    for t in range(T):
        np.testing.assert_array_equal(context[0, t], value[0, index[0, t]])
        np.testing.assert_allclose(log_prob[0, t], np.log(weights[0, t, index[0, t]]), rtol=1e-5)
    np.testing.assert_allclose(weights[0].sum(-1), 1.0, rtol=1e-6)
    assert np.all(index[1] == 0) and np.all(context[1] == 0) and np.all(log_prob[1] == 0)
    assert np.all(weights[1] == 0)
    for x in (context, log_prob, weights):
        assert np.all(np.isfinite(x))


@pytest.mark.parametrize("name, kwargs", [("additive", {"units": 6}), ("general", {})])
def test_log_prob_gradient_reaches_the_score_weights(name, kwargs):
    query, value = _inputs()
    layer = HardAttention(name, seed=5, **kwargs)
    layer(query, value, mask=MASK)
    with tf.GradientTape() as tape:
        _, _, log_prob, _ = layer(query, value, mask=MASK, sample=True)
        loss = -tf.reduce_sum(log_prob)  # REINFORCE with reward 1
    gradients = tape.gradient(loss, layer.trainable_weights)
    assert layer.trainable_weights
    for w, g in zip(layer.trainable_weights, gradients):
        assert g is not None and np.all(np.isfinite(np.asarray(g))), w.path
        assert np.any(np.asarray(g) != 0), f"zero gradient for {w.path}"


def test_sample_may_be_a_tensor():
    query, value = _inputs()
    layer = HardAttention("dot", seed=2)
    _, greedy, _, weights = layer(query, value, sample=tf.constant(False))
    np.testing.assert_array_equal(np.asarray(greedy), np.argmax(np.asarray(weights), -1))


def test_single_step_query_drops_the_time_axis():
    query, value = _inputs()
    layer = HardAttention("scaled_dot", seed=2)
    projected = layer.project_keys(value)
    context, index, log_prob, weights = layer.attend(query[:, 0], projected, value, MASK)
    assert context.shape == (B, D) and index.shape == (B,) and log_prob.shape == (B,)
    assert weights.shape == (B, S)


@pytest.mark.parametrize("call_kwargs", [{}, {"sample": True}])
def test_run_layer_test(call_kwargs):
    query, value = _inputs()
    run_layer_test(
        HardAttention,
        {"score": "additive", "units": 6, "seed": 11},
        {"query": query, "value": value, "mask": MASK},
        expected_output_shape=((B, T, D), (B, T), (B, T), (B, T, S)),
        call_kwargs=call_kwargs,
        run_saving_check=not call_kwargs,  # sampled outputs differ between calls
    )
