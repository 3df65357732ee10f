"""Soft attention: masking, the NumPy formula, step-by-step use, and the layer checks."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from common.errors import UserError
from common.layers import SCORES, Attention
from common.registry import UnknownNameError
from tests.helpers.layers import run_layer_test

B, T, S, D = 3, 4, 6, 5
SCORE_KWARGS = {"additive": {"units": 7}, "location": {"max_positions": 8}}
# Row 0: no padding; row 1: the last two keys are padding; row 2: every key is padding.
MASK = np.array([[1] * 6, [1, 1, 1, 1, 0, 0], [0] * 6], dtype=bool)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, D)).astype("float32")
    value = rng.normal(size=(B, S, D)).astype("float32")
    return query, value


@pytest.mark.parametrize("name", sorted(SCORES.names()))
def test_masked_weights_sum_to_one_and_padding_gets_exactly_zero(name):
    query, value = _inputs()
    attention = Attention(name, **SCORE_KWARGS.get(name, {}))
    context, weights = attention(query, value, mask=MASK)
    weights, context = np.asarray(weights), np.asarray(context)
    assert weights.shape == (B, T, S) and context.shape == (B, T, D)
    np.testing.assert_allclose(weights[:2].sum(-1), 1.0, rtol=1e-6)
    assert np.all(weights[1, :, 4:] == 0.0)
    assert np.all(weights[2] == 0.0) and np.all(context[2] == 0.0)
    np.testing.assert_allclose(context, np.einsum("bts,bsd->btd", weights, value), atol=1e-6)


def test_weights_are_the_numpy_masked_softmax_of_the_scores():
    query, value = _inputs()
    attention = Attention("general")
    _, weights = attention(query, value, mask=MASK)
    logits = np.asarray(attention.scorer(query, value), dtype=np.float64)
    for b in range(2):
        real = MASK[b]
        e = np.exp(logits[b][:, real] - logits[b][:, real].max(-1, keepdims=True))
        np.testing.assert_allclose(
            np.asarray(weights)[b][:, real], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6
        )


def test_fully_masked_row_gives_no_nan_in_outputs_or_gradients():
    query, value = _inputs()
    attention = Attention("additive", units=7)
    query, value = tf.constant(query), tf.constant(value)
    with tf.GradientTape() as tape:
        tape.watch([query, value])
        context, weights = attention(query, value, mask=MASK)
        loss = tf.reduce_sum(context**2) + tf.reduce_sum(weights * tf.range(S, dtype="float32"))
    gradients = tape.gradient(loss, [query, value, *attention.trainable_weights])
    assert np.all(np.isfinite(context.numpy())) and np.all(np.isfinite(weights.numpy()))
    for g in gradients:
        assert np.all(np.isfinite(np.asarray(g)))


def test_integer_mask_works_like_a_bool_mask():
    query, value = _inputs()
    attention = Attention("dot")
    context_bool, weights_bool = attention(query, value, mask=MASK)
    context_int, weights_int = attention(query, value, mask=MASK.astype("int32"))
    np.testing.assert_array_equal(np.asarray(weights_int), np.asarray(weights_bool))
    np.testing.assert_array_equal(np.asarray(context_int), np.asarray(context_bool))


def test_separate_keys_are_scored_and_values_averaged():
    rng = np.random.default_rng(1)
    query = rng.normal(size=(B, T, D)).astype("float32")
    key = rng.normal(size=(B, S, D)).astype("float32")
    value = rng.normal(size=(B, S, 2)).astype("float32")
    context, weights = Attention("scaled_dot")(query, value, key=key)
    logits = np.einsum("btd,bsd->bts", query, key) / np.sqrt(D)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(weights), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(context), expected @ value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["additive", "cosine", "location"])
def test_step_by_step_attend_matches_call(name):
    query, value = _inputs()
    attention = Attention(name, **SCORE_KWARGS.get(name, {}))
    projected = attention.project_keys(value)  # before any __call__, as a decoder would
    steps = [attention.attend(query[:, t], projected, value, mask=MASK) for t in range(T)]
    assert steps[0][0].shape == (B, D) and steps[0][1].shape == (B, S)
    context, weights = attention(query, value, mask=MASK)
    np.testing.assert_allclose(np.stack([s[0] for s in steps], 1), context, atol=1e-6)
    np.testing.assert_allclose(np.stack([s[1] for s in steps], 1), weights, atol=1e-6)


def test_unknown_score_name_lists_the_valid_names():
    with pytest.raises(UnknownNameError, match="choose one of: .*additive.*scaled_dot"):
        Attention("luong")


def test_wrong_score_arguments_are_user_errors():
    with pytest.raises(UserError, match="'additive' attention score needs units"):
        Attention("additive")
    with pytest.raises(UserError, match="unknown argument.*unit.* 'dot'"):
        Attention("dot", unit=16)
    assert Attention("dot", name="att", dtype="float32").name == "att"


@pytest.mark.parametrize("name", sorted(SCORES.names()))
def test_run_layer_test(name):
    query, value = _inputs()
    run_layer_test(
        Attention,
        {"score": name, **SCORE_KWARGS.get(name, {})},
        {"query": query, "value": value, "mask": MASK[[0, 1, 1]]},
        expected_output_shape=((B, T, D), (B, T, S)),
    )


def test_run_layer_test_with_separate_keys_and_single_step_query():
    query, value = _inputs()
    key = np.random.default_rng(2).normal(size=(B, S, 3)).astype("float32")
    run_layer_test(
        Attention,
        {"score": "additive", "units": 4},
        (query[:, 0], value, key),
        expected_output_shape=((B, D), (B, S)),
        expected_num_trainable_weights=4,
    )


@keras.saving.register_keras_serializable(package="tests_common_layers")
class _StepwiseDecoder(keras.layers.Layer):
    """Uses `project_keys` / `attend` step by step, as the LSTM decoders do, never `__call__`."""

    def __init__(self, score="general", **kwargs):
        super().__init__(**kwargs)
        self.score = score
        self.attention = Attention(score, name="attention")

    def build(self, query_shape, value_shape):
        # A step's query is (B, Dq): build the attention as it will be used.
        self.attention.build((query_shape[0], query_shape[-1]), value_shape)

    def call(self, query, value):
        projected = self.attention.project_keys(value)
        steps = [self.attention.attend(query[:, t], projected, value) for t in range(T)]
        return ops.stack([c for c, _ in steps], 1), ops.stack([w for _, w in steps], 1)

    def get_config(self):
        return {**super().get_config(), "score": self.score}


@pytest.mark.parametrize("score", ["general", "cosine"])
def test_attention_used_step_by_step_inside_a_layer_trains_and_reloads(score):
    query, value = _inputs()
    run_layer_test(
        _StepwiseDecoder,
        {"score": score},
        (query, value),
        expected_output_shape=((B, T, D), (B, T, S)),
        run_mixed_precision_check=False,
    )
