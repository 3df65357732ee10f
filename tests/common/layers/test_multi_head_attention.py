"""Multi-head attention: the NumPy formula with masks, the key/value cache, the layer checks."""

import ast
import inspect
import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.layers import MultiHeadAttention, multi_head_attention
from tests.helpers.layers import run_layer_test

B, T, S, D, H, K = 2, 5, 4, 8, 2, 3
# Right padding: row 0 has 5 real positions, row 1 has 3.
SELF_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)
SOURCE_MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=bool)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _numpy_mha(layer, query, value, allowed):
    """Reference multi-head attention from the layer's weights; `allowed` is (B, T, S) bool."""

    def dense(sublayer, x, equation):
        y = np.einsum(equation, x, np.asarray(sublayer.kernel))
        return y if sublayer.bias is None else y + np.asarray(sublayer.bias)

    q = dense(layer.query_dense, query, "btd,dhk->bthk")
    k = dense(layer.key_dense, value, "bsd,dhk->bshk")
    v = dense(layer.value_dense, value, "bsd,dhv->bshv")
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(layer.key_dim)
    allowed = np.broadcast_to(allowed[:, None], logits.shape)
    logits = np.where(allowed, logits, -np.inf)
    peak = np.max(np.where(allowed, logits, -1e30), axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(logits - peak), 0.0)
    total = e.sum(-1, keepdims=True)
    weights = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    context = np.einsum("bhts,bshv->bthv", weights, v)
    return dense(layer.output_dense, context, "bthv,hvd->btd"), weights


@pytest.mark.parametrize(
    "options",
    [{}, {"use_bias": False}, {"value_dim": 5, "output_shape": 6}],
    ids=["default", "no-bias", "value-dim-and-output-shape"],
)
def test_matches_numpy_with_padding_attention_mask_and_causal_mask(options):
    x = _x(B, T, D)
    attention_mask = _x(B, T, T, seed=1) > -0.5
    layer = MultiHeadAttention(num_heads=H, key_dim=K, **options)
    output, weights = layer(
        x, x, mask=SELF_MASK, attention_mask=attention_mask, use_causal_mask=True
    )
    assert output.shape == (B, T, options.get("output_shape", D))
    assert weights.shape == (B, H, T, T)
    causal = np.tril(np.ones((T, T), bool))[None]
    allowed = SELF_MASK[:, None, :] & attention_mask & causal
    expected_output, expected_weights = _numpy_mha(layer, x, x, allowed)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(np.asarray(output), expected_output, atol=1e-5)
    assert np.all(np.asarray(weights)[~np.broadcast_to(allowed[:, None], weights.shape)] == 0.0)


def test_fully_masked_query_row_gets_zero_weights_not_nan():
    x, source = _x(B, T, D), _x(B, S, D, seed=2)
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    no_keys = np.zeros((B, S), bool)
    no_keys[0] = True
    output, weights = layer(x, source, mask=no_keys)
    assert np.all(np.isfinite(np.asarray(output)))
    assert np.all(np.asarray(weights)[1] == 0.0)
    np.testing.assert_allclose(np.asarray(weights)[0].sum(-1), 1.0, rtol=1e-6)
    # No context: the output is the output projection's bias, with a cache too.
    bias = np.asarray(layer.output_dense.bias)
    np.testing.assert_allclose(np.asarray(output)[1], np.broadcast_to(bias, (T, D)), atol=1e-6)
    cached_output, cached_weights, _ = layer(
        x, source, mask=no_keys, cache=layer.compute_cache(source)
    )
    np.testing.assert_allclose(cached_output, output, atol=1e-5)
    np.testing.assert_allclose(cached_weights, weights, atol=1e-6)



@pytest.mark.parametrize("fused_projections", [False, True], ids=["keras-dense", "fused-proj"])
@pytest.mark.parametrize(
    "options",
    [{}, {"use_bias": False}, {"value_dim": 5, "output_shape": 6}],
    ids=["default", "no-bias", "value-dim-and-output-shape"],
)
def test_without_weights_matches_numpy(options, fused_projections, monkeypatch):
    """`return_weights=False` (attention by `ops.dot_product_attention` where the head sizes
    agree, on TensorFlow too here) gives the NumPy formula's output, a query row with no
    allowed key included."""
    monkeypatch.setattr(MultiHeadAttention, "FUSED_BACKENDS", ("tensorflow",))
    x = _x(B, T, D)
    attention_mask = _x(B, T, T, seed=1) > -0.5
    attention_mask[1, 2] = False  # row 1, query 2: no key allowed
    layer = MultiHeadAttention(num_heads=H, key_dim=K, fused_projections=fused_projections,
                               **options)
    output, weights = layer(x, x, mask=SELF_MASK, attention_mask=attention_mask,
                            use_causal_mask=True, return_weights=False)
    assert weights is None
    allowed = SELF_MASK[:, None, :] & attention_mask & np.tril(np.ones((T, T), bool))[None]
    expected, _ = _numpy_mha(layer, x, x, allowed)
    np.testing.assert_allclose(np.asarray(output), expected, atol=1e-5)
    if layer.output_dense.bias is not None:  # no context: the output projection's bias
        np.testing.assert_allclose(np.asarray(output)[1, 2], np.asarray(layer.output_dense.bias),
                                   atol=1e-6)


@pytest.mark.parametrize("fused_backend", [True, False], ids=["fused", "tf-weights-dropped"])
@pytest.mark.parametrize("fused_projections", [False, True], ids=["keras-dense", "fused-proj"])
def test_without_weights_has_the_gradients_of_the_weights_path(fused_projections, fused_backend,
                                                               monkeypatch):
    if fused_backend:
        monkeypatch.setattr(MultiHeadAttention, "FUSED_BACKENDS", ("tensorflow",))
    x, source = tf.constant(_x(B, T, D)), tf.constant(_x(B, S, D, seed=2))
    probe = tf.constant(_x(B, T, D, seed=3))
    layer = MultiHeadAttention(num_heads=H, key_dim=K, fused_projections=fused_projections)
    layer(x, source)

    def gradients(return_weights):
        with tf.GradientTape() as tape:
            tape.watch([x, source])
            self_out, _ = layer(x, x, mask=SELF_MASK, use_causal_mask=True, training=True,
                                return_weights=return_weights)
            cross_out, _ = layer(x, source, mask=SOURCE_MASK, training=True,
                                 return_weights=return_weights)
            loss = tf.reduce_sum((self_out + cross_out) * probe)
        return tape.gradient(loss, [x, source] + layer.trainable_variables)

    for fused, reference in zip(gradients(False), gradients(True)):
        np.testing.assert_allclose(np.asarray(fused), np.asarray(reference), atol=1e-5)


def test_without_weights_dropout_still_applies_when_training():
    x = _x(B, T, D)
    layer = MultiHeadAttention(num_heads=H, key_dim=K, dropout=0.5, seed=3)
    plain, _ = layer(x, x, mask=SELF_MASK, return_weights=False)
    dropped, weights = layer(x, x, mask=SELF_MASK, training=True, return_weights=False)
    assert weights is None
    assert not np.allclose(np.asarray(dropped), np.asarray(plain), atol=1e-3)
    with pytest.raises(ValueError, match="always returns the weights"):
        layer(x, x, cache=layer.compute_cache(x), return_weights=False)


def test_cross_attention_with_precomputed_cache_equals_uncached_call():
    query, source = _x(B, T, D), _x(B, S, D, seed=3)
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    output, weights = layer(query, source, mask=SOURCE_MASK)
    cache = layer.compute_cache(source)
    assert cache.shape == (B, 2, S, H, K)
    cached_output, cached_weights, same_cache = layer(
        query[:, 1:2], source, mask=SOURCE_MASK, cache=cache
    )
    np.testing.assert_allclose(cached_output, np.asarray(output)[:, 1:2], atol=1e-5)
    np.testing.assert_allclose(cached_weights, np.asarray(weights)[:, :, 1:2], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(same_cache), np.asarray(cache))


def test_cached_call_refuses_training_with_dropout():
    x = _x(B, T, D)
    layer = MultiHeadAttention(num_heads=H, key_dim=K, dropout=0.1)
    layer(x, x)
    cache = layer.compute_cache(x)
    with pytest.raises(ValueError, match="training=False"):
        layer(x, x, cache=cache, training=True)
    layer(x, x, cache=cache, training=False)


def test_variables_are_laid_out_as_keras_multi_head_attention():
    """Checkpoints key variables by position: the layout must stay keras' (seed included)."""
    x = _x(B, T, D)
    ours = MultiHeadAttention(num_heads=H, key_dim=K, dropout=0.1, name="mha")
    theirs = keras.layers.MultiHeadAttention(num_heads=H, key_dim=K, dropout=0.1, name="mha")
    ours(x, x)
    theirs(x, x)

    def layout(layer):  # seed generators are numbered process-wide: drop the number
        return [(re.sub(r"_\d+/", "/", v.path), tuple(v.shape), v.dtype) for v in layer.variables]

    assert layout(ours) == layout(theirs)
    assert len(ours.variables) == 9  # 4 kernels, 4 biases, the dropout's seed


def test_uses_only_public_keras_api():
    """No private attribute or method of keras' layer is read or overridden.

    They change between the Keras versions setup.py allows (keras 3.5 has no
    `_sliding_window`; `_compute_attention` changed its arguments), so the layer reads only
    names it defines itself.
    """
    tree = ast.parse(inspect.getsource(multi_head_attention))
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    defined |= {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
    }
    private = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    }
    assert private <= defined, f"reads keras internals: {sorted(private - defined)}"
    keras_layer = keras.layers.MultiHeadAttention(num_heads=H, key_dim=K)
    keras_layer(_x(B, T, D), _x(B, T, D))
    keras_names = {name for name in dir(keras_layer) if name.startswith("_")}
    overridden = {name for name in defined if name.startswith("_")} & keras_names
    assert overridden <= {"__init__"}, f"overrides keras internals: {sorted(overridden)}"


def test_outputs_carry_no_implicit_keras_mask():
    """A downstream layer must not receive the attention mask as an implicit Keras mask."""
    x = _x(B, T, D)
    output, weights = MultiHeadAttention(num_heads=H, key_dim=K)(x, x, mask=SELF_MASK)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Flatten warns when it is passed a masked input
        keras.layers.Flatten()(weights)
        keras.layers.Flatten()(output)


def test_compute_cache_after_build_without_a_call():
    layer = MultiHeadAttention(num_heads=H, key_dim=K)
    source = _x(B, S, D)
    with pytest.raises(ValueError, match="build"):
        layer.compute_cache(source)
    layer.build((B, T, D), (B, S, D))
    assert layer.compute_cache(source).shape == (B, 2, S, H, K)


def test_run_layer_test_self_attention():
    x = _x(B, T, D)
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": H, "key_dim": K},
        {"query": x, "value": x, "mask": SELF_MASK},
        expected_output_shape=((B, T, D), (B, H, T, T)),
        call_kwargs={"use_causal_mask": True},
        expected_num_trainable_weights=8,
    )


def test_run_layer_test_cross_attention_with_dropout():
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": H, "key_dim": K, "dropout": 0.1, "output_shape": 6},
        {"query": _x(B, T, D), "value": _x(B, S, D, seed=4), "mask": SOURCE_MASK},
        expected_output_shape=((B, T, 6), (B, H, T, S)),
        atol=1e-5,
    )


def _loss_and_gradients(layer, query, value, **kwargs):
    with tf.GradientTape() as tape:
        output, weights = layer(query, value, **kwargs)
        loss = tf.reduce_sum(output**2) + tf.reduce_sum(output)
    return output, weights, tape.gradient(loss, layer.trainable_variables)


@pytest.mark.parametrize(
    "options",
    [{}, {"use_bias": False}, {"value_dim": 5, "output_shape": 6}],
    ids=["default", "no-bias", "value-dim-and-output-shape"],
)
@pytest.mark.parametrize("self_attention", [True, False], ids=["self", "cross"])
def test_fused_projections_equal_keras_call_with_gradients(options, self_attention):
    """The fused products (one `(B * T, D) x (D, 3 H K)` product for self-attention) give
    keras' `call` (fused_projections=False) and its gradients, to float rounding."""
    x, source = _x(B, T, D), _x(B, S, D, seed=2)
    value = x if self_attention else source
    kwargs = ({"mask": SELF_MASK, "use_causal_mask": True} if self_attention
              else {"mask": SOURCE_MASK})
    fused = MultiHeadAttention(num_heads=H, key_dim=K, fused_projections=True, **options)
    reference = MultiHeadAttention(num_heads=H, key_dim=K, **options)
    fused(x, value)
    reference(x, value)
    reference.set_weights(fused.get_weights())
    got = _loss_and_gradients(fused, x, value, training=True, **kwargs)
    want = _loss_and_gradients(reference, x, value, training=True, **kwargs)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=1e-6)
    assert len(got[2]) == len(want[2]) == len(fused.trainable_variables)
    for g, w in zip(got[2], want[2]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    assert MultiHeadAttention.from_config(fused.get_config()).fused_projections
    assert not MultiHeadAttention.from_config(reference.get_config()).fused_projections


def test_weights_dropout_weighs_the_values_and_leaves_the_returned_weights():
    """`weights_dropout` (a fixed mask here) applies to the weights that weigh the values;
    the weights returned are the undropped ones, as keras returns them."""
    x, source = _x(B, T, D), _x(B, S, D, seed=2)
    layer = MultiHeadAttention(num_heads=H, key_dim=K, dropout=0.5, fused_projections=True)
    layer(x, source)
    keep = _x(B, H, T, S, seed=5) > 0

    def dropout(weights):
        return weights * keep.astype("float32") * 2.0

    output, weights = layer(x, source, mask=SOURCE_MASK, training=True,
                            weights_dropout=dropout)
    allowed = np.broadcast_to(SOURCE_MASK[:, None, :], (B, T, S))
    _, expected_weights = _numpy_mha(layer, x, source, allowed)
    v = np.einsum("bsd,dhv->bshv", source, np.asarray(layer.value_dense.kernel))
    v = v + np.asarray(layer.value_dense.bias)
    context = np.einsum("bhts,bshv->bthv", expected_weights * keep * 2.0, v)
    expected = np.einsum("bthv,hvd->btd", context, np.asarray(layer.output_dense.kernel))
    expected = expected + np.asarray(layer.output_dense.bias)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(np.asarray(output), expected, atol=1e-5)
    # Without training the function is not called: the plain attention.
    output, _ = layer(x, source, mask=SOURCE_MASK, training=False, weights_dropout=dropout)
    np.testing.assert_allclose(np.asarray(output), _numpy_mha(layer, x, source, allowed)[0],
                               atol=1e-5)
