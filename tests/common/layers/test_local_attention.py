"""Luong local attention: the window, aligned positions, the Gaussian, steps, the layer checks."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.layers import Attention
from common.layers.local_attention import LocalAttention
from tests.helpers.layers import run_layer_test

B, T, S, D = 3, 5, 9, 6
# Row 0: no padding; row 1: the last four keys are padding; row 2: every key is padding.
MASK = np.array([[1] * S, [1] * 5 + [0] * 4, [0] * S], dtype=bool)
LENGTHS = MASK.sum(-1)


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, D)).astype("float32")
    value = rng.normal(size=(B, S, D)).astype("float32")
    return query, value


def _numpy_window_softmax(logits, positions, window, mask):
    """Softmax of `logits (B, T, S)` over `|s - p_t| <= window` and real keys (float64)."""
    offsets = np.arange(logits.shape[-1])[None, None, :] - positions[..., None]
    allowed = (np.abs(offsets) <= window) & mask[:, None, :]
    row_max = np.where(allowed, logits, -np.inf).max(-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(allowed, np.exp(np.where(allowed, logits - row_max, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0), offsets


@pytest.mark.parametrize("mode", ["monotonic", "predictive"])
@pytest.mark.parametrize("window", [1, 2])
def test_weights_outside_the_window_and_on_padding_are_exactly_zero(mode, window):
    query, value = _inputs()
    attention = LocalAttention("general", mode=mode, window=window)
    context, weights = attention(query, value, mask=MASK)
    weights = np.asarray(weights)
    positions = np.asarray(attention.aligned_positions(query, MASK))
    outside = np.abs(np.arange(S)[None, None, :] - positions[..., None]) > window
    assert outside.any() and np.all(weights[outside] == 0.0)
    assert np.all(weights[1, :, 5:] == 0.0)
    assert np.all(weights[2] == 0.0) and np.all(np.asarray(context)[2] == 0.0)
    assert np.all((weights[:2] > 0).sum(-1) >= 1)  # every real row attends somewhere
    np.testing.assert_allclose(context, np.einsum("bts,bsd->btd", weights, value), atol=1e-6)


def test_monotonic_softmax_is_renormalised_inside_the_window():
    query, value = _inputs()
    attention = LocalAttention("dot", window=1)
    _, weights = attention(query, value, mask=MASK)
    logits = np.asarray(attention.scorer(query, value), dtype=np.float64)
    positions = np.minimum(np.arange(T)[None, :], np.maximum(LENGTHS - 1, 0)[:, None])
    expected, _ = _numpy_window_softmax(logits, positions.astype(float), 1, MASK)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(weights)[:2].sum(-1), 1.0, rtol=1e-6)


def test_predictive_positions_lie_within_the_true_source_length():
    query, value = _inputs()
    attention = LocalAttention("general", mode="predictive", window=2, position_units=4)
    attention(query, value, mask=MASK)
    v_p = attention.position_output.kernel
    v_p.assign(np.asarray(v_p) * 1000.0)  # saturate the sigmoid at both ends
    positions = np.asarray(attention.aligned_positions(query, MASK))
    upper = np.maximum(LENGTHS - 1, 0)[:, None]
    assert np.all(positions >= 0.0) and np.all(positions <= upper + 1e-5)
    assert positions[0].max() > 7.0 and positions[0].min() < 1.0  # spans the whole source
    assert positions[1].max() <= 4.0 + 1e-5 and np.all(positions[2] == 0.0)


@pytest.mark.parametrize("renormalize", [False, True])
def test_predictive_weights_match_the_numpy_formula_with_the_gaussian(renormalize):
    query, value = _inputs(1)
    window = 2
    attention = LocalAttention(
        "general", mode="predictive", window=window, position_units=4, renormalize=renormalize
    )
    _, weights = attention(query, value, mask=MASK)
    w_p = np.asarray(attention.position_hidden.kernel, dtype=np.float64)
    v_p = np.asarray(attention.position_output.kernel, dtype=np.float64)
    sigmoid = 1.0 / (1.0 + np.exp(-(np.tanh(query @ w_p) @ v_p)[..., 0]))
    positions = np.maximum(LENGTHS - 1, 0)[:, None] * sigmoid  # (B, T)
    logits = np.asarray(attention.scorer(query, value), dtype=np.float64)
    aligned, offsets = _numpy_window_softmax(logits, positions, window, MASK)
    expected = aligned * np.exp(-(offsets**2) / (2 * (window / 2) ** 2))
    if renormalize:
        total = expected.sum(-1, keepdims=True)
        expected = np.divide(expected, total, out=np.zeros_like(expected), where=total > 0)
        np.testing.assert_allclose(np.asarray(weights)[:2].sum(-1), 1.0, rtol=1e-5)
    else:
        assert np.all(np.asarray(weights).sum(-1) <= 1.0 + 1e-6)
    np.testing.assert_allclose(weights, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("score,kwargs", [("general", {}), ("additive", {"units": 7})])
def test_monotonic_with_a_window_covering_the_source_equals_global_attention(score, kwargs):
    query, value = _inputs(2)
    local = LocalAttention(score, window=S - 1, **kwargs)
    reference = Attention(score, **kwargs)
    expected = reference(query, value, mask=MASK)
    local(query, value, mask=MASK)
    local.scorer.set_weights(reference.scorer.get_weights())
    actual = local(query, value, mask=MASK)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def test_monotonic_positions_may_be_passed_and_are_clipped_to_the_source():
    query, value = _inputs()
    attention = LocalAttention("dot", window=0)
    positions = np.array([[0, 2, 4, 8, 20]] * B)
    _, weights = attention(query, value, mask=MASK, positions=positions)
    weights = np.asarray(weights)
    # D = 0: all the weight on the (clipped) aligned key.
    np.testing.assert_array_equal(weights[0].argmax(-1), [0, 2, 4, 8, 8])
    np.testing.assert_array_equal(weights[1].argmax(-1), [0, 2, 4, 4, 4])
    np.testing.assert_allclose(weights[:2].max(-1), 1.0)


@pytest.mark.parametrize("mode", ["monotonic", "predictive"])
def test_step_by_step_matches_the_full_pass(mode):
    query, value = _inputs()
    attention = LocalAttention("additive", mode=mode, window=2, units=5)
    context, weights = attention(query, value, mask=MASK)
    projected = attention.project_keys(value)
    for t in range(T):
        positions = t if mode == "monotonic" else None
        step_context, step_weights = attention.attend(query[:, t], projected, value, MASK,
                                                      positions=positions)
        assert step_context.shape == (B, D) and step_weights.shape == (B, S)
        np.testing.assert_allclose(step_context, np.asarray(context)[:, t], atol=1e-6)
        np.testing.assert_allclose(step_weights, np.asarray(weights)[:, t], atol=1e-6)


def test_gradients_reach_the_position_network_and_are_finite():
    query, value = _inputs()
    attention = LocalAttention("general", mode="predictive", window=2)
    query = tf.constant(query)
    with tf.GradientTape() as tape:
        tape.watch(query)
        context, _ = attention(query, value, mask=MASK)
        loss = tf.reduce_sum(context**2)
    gradients = tape.gradient(loss, [query, *attention.trainable_weights])
    assert len(gradients) == 4
    for g in gradients:
        g = np.asarray(g)
        assert np.all(np.isfinite(g)) and np.any(g != 0.0)


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="monotonic, predictive"):
        LocalAttention("dot", mode="global")
    with pytest.raises(UserError, match=">= 1"):
        LocalAttention("dot", mode="predictive", window=0)
    with pytest.raises(UserError, match="window"):
        LocalAttention("dot", window=2.5)
    query, value = _inputs()
    with pytest.raises(UserError, match="step index"):
        LocalAttention("dot")(query[:, 0], value)
    with pytest.raises(UserError, match="monotonic"):
        LocalAttention("dot", mode="predictive", window=1)(query, value, positions=np.zeros((B, T)))


@pytest.mark.parametrize(
    "init_kwargs",
    [
        {"score": "general", "mode": "monotonic", "window": 2},
        {"score": "additive", "units": 4, "mode": "predictive", "window": 2, "position_units": 3},
    ],
)
def test_layer_checks(init_kwargs):
    query, value = _inputs()
    run_layer_test(
        LocalAttention,
        init_kwargs,
        {"query": query, "value": value, "mask": MASK},
        expected_output_shape=((B, T, D), (B, T, S)),
    )
