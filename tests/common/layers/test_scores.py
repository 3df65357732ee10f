"""Each attention score against an independent NumPy version of its formula."""

import numpy as np
import pytest

from common.errors import UserError
from common.layers import SCORES, get_score
from common.registry import UnknownNameError

B, T, S, DQ, DK = 2, 3, 5, 4, 6


def _np(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float64)


def _inputs(query_dim=DQ, key_dim=DK, seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, query_dim)).astype("float32")
    keys = rng.normal(size=(B, S, key_dim)).astype("float32")
    return query, keys


def test_registry_holds_the_six_scores():
    assert sorted(SCORES.names()) == sorted(
        ["additive", "dot", "scaled_dot", "general", "cosine", "location"]
    )


def test_unknown_score_name_lists_the_valid_names():
    with pytest.raises(UnknownNameError) as info:
        get_score("bilinear")
    message = str(info.value)
    assert "'bilinear'" in message
    for name in SCORES.names():
        assert name in message


def test_additive_matches_numpy():
    query, keys = _inputs()
    score = get_score("additive", units=7)
    logits = _np(score(query, keys))
    w_q = _np(score.query_dense.kernel)
    w_k, b_k = _np(score.key_dense.kernel), _np(score.key_dense.bias)
    v = _np(score.energy_dense.kernel)[:, 0]
    expected = np.zeros((B, T, S))
    for b in range(B):
        for t in range(T):
            for s in range(S):
                expected[b, t, s] = v @ np.tanh(query[b, t] @ w_q + keys[b, s] @ w_k + b_k)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_dot_matches_numpy():
    query, keys = _inputs(key_dim=DQ)
    logits = _np(get_score("dot")(query, keys))
    expected = np.einsum("btd,bsd->bts", query.astype(np.float64), keys.astype(np.float64))
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_scaled_dot_matches_numpy():
    query, keys = _inputs(key_dim=DQ)
    logits = _np(get_score("scaled_dot")(query, keys))
    expected = np.einsum("btd,bsd->bts", query, keys) / np.sqrt(DQ)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_general_matches_numpy():
    query, keys = _inputs()
    score = get_score("general")
    logits = _np(score(query, keys))
    w = _np(score.kernel)
    assert w.shape == (DQ, DK)
    expected = np.einsum("btq,qk,bsk->bts", query, w, keys)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_cosine_matches_numpy_with_its_scale():
    query, keys = _inputs(key_dim=DQ)
    score = get_score("cosine")
    score(query, keys)
    assert float(score.scale.numpy()) == 1.0  # Graves' key strength starts at 1
    score.scale.assign(2.5)
    logits = _np(score(query, keys))
    q = query / np.linalg.norm(query, axis=-1, keepdims=True)
    k = keys / np.linalg.norm(keys, axis=-1, keepdims=True)
    expected = 2.5 * np.einsum("btd,bsd->bts", q, k)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_cosine_of_zero_vectors_is_zero_not_nan():
    import tensorflow as tf

    query, keys = _inputs(key_dim=DQ)
    query[0, 0] = 0.0
    keys[1, 2] = 0.0
    score = get_score("cosine")
    query_t, keys_t = tf.constant(query), tf.constant(keys)
    with tf.GradientTape() as tape:
        tape.watch([query_t, keys_t])
        logits = score(query_t, keys_t)
        loss = tf.reduce_sum(logits)
    gradients = tape.gradient(loss, [query_t, keys_t, score.scale])
    assert np.all(np.isfinite(_np(logits)))
    np.testing.assert_array_equal(_np(logits)[0, 0], 0.0)
    np.testing.assert_array_equal(_np(logits)[1, :, 2], 0.0)
    for g in gradients:
        assert np.all(np.isfinite(_np(g)))


def test_location_matches_numpy_and_uses_first_s_outputs():
    query, keys = _inputs()
    score = get_score("location", max_positions=9)
    logits = _np(score(query, keys))
    w, b = _np(score.position_dense.kernel), _np(score.position_dense.bias)
    assert w.shape == (DQ, 9)
    expected = (query @ w + b)[..., :S]
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    # Depends only on the query: other keys of the same length give the same logits.
    np.testing.assert_allclose(_np(score(query, keys * 3.0 + 1.0)), logits, rtol=1e-6)


def test_location_rejects_sources_longer_than_max_positions():
    query, keys = _inputs()
    with pytest.raises(UserError, match="max_positions=4"):
        get_score("location", max_positions=4)(query, keys)


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "cosine"])
def test_same_size_scores_reject_different_sizes(name):
    query, keys = _inputs()
    with pytest.raises(UserError, match="query size 4 and key size 6"):
        get_score(name)(query, keys)


@pytest.mark.parametrize("name", ["additive", "general", "location"])
def test_projected_keys_then_score_equals_call(name):
    kwargs = {"additive": {"units": 5}, "location": {"max_positions": 8}}.get(name, {})
    query, keys = _inputs()
    score = get_score(name, **kwargs)
    projected = score.project_keys(keys)  # used before any __call__, as a decoder would
    stepwise = np.stack(
        [_np(score.score(query[:, t : t + 1], projected))[:, 0] for t in range(T)], 1
    )
    np.testing.assert_allclose(stepwise, _np(score(query, keys)), rtol=1e-6, atol=1e-6)
