"""`common.layers.LayerNormalization`: Keras's layer by default; with `CLOSED_FORM_GRADIENT`,
`layer_norm`'s output and closed-form gradient against a NumPy reference and against Keras's
automatic differentiation, on TensorFlow here and on JAX in a worker process."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.layers import LayerNormalization, layer_norm
from common.layers.layer_norm import normalize
from tests.jax.conftest import requires_jax, run_worker


def case(seed=0, shape=(2, 3, 8)):
    rng = np.random.default_rng(seed)
    x = (2 * rng.normal(size=shape) + 0.5).astype(np.float32)
    gamma = (1 + 0.3 * rng.normal(size=shape[-1:])).astype(np.float32)
    beta = (0.3 * rng.normal(size=shape[-1:])).astype(np.float32)
    w = rng.normal(size=shape).astype(np.float32)
    return x, gamma, beta, w


def reference(x, gamma, beta, w, epsilon=1e-5):
    """y and the gradients of sum(y * w) by x, gamma, beta, in float64, from the definition
    (the input gradient by central differences of the NumPy function, not by a formula)."""
    x = x.astype(np.float64)

    def norm(x):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon)

    normed = norm(x)
    dx = np.zeros_like(x)
    h = 1e-6
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        dx[index] = ((norm(up) - norm(down)) * gamma * w).sum() / (2 * h)
    rows = tuple(range(x.ndim - 1))
    return normed * gamma + beta, [dx, (w * normed).sum(rows), w.sum(rows)]


def tf_output_and_gradients(layer, x, w):
    x = tf.constant(x)

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * w)
        return y, tape.gradient(loss, [x, layer.gamma, layer.beta])

    y, grads = run(x)
    return y, grads


def built(gamma, beta, shape, **kwargs):
    layer = LayerNormalization(epsilon=1e-5, **kwargs)
    layer.build(shape)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    return layer


@pytest.fixture
def closed(monkeypatch):
    monkeypatch.setattr(LayerNormalization, "CLOSED_FORM_GRADIENT", True)


def test_by_default_it_is_keras_layer_normalization():
    x, gamma, beta, _ = case()
    ours = built(gamma, beta, x.shape)
    theirs = keras.layers.LayerNormalization(epsilon=1e-5)
    theirs.build(x.shape)
    theirs.set_weights([gamma, beta])
    assert [v.path.split("/")[-1] for v in ours.weights] == ["gamma", "beta"]
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(theirs(x)))


def test_closed_form_output_and_gradients_match_numpy(closed):
    x, gamma, beta, w = case()
    y, grads = tf_output_and_gradients(built(gamma, beta, x.shape), x, w)
    want_y, want_grads = reference(x, gamma, beta, w)
    np.testing.assert_allclose(y.numpy(), want_y, atol=2e-6)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)


def test_closed_form_keeps_the_compute_dtype_under_mixed_precision(closed):
    """mixed_bfloat16: bf16 in and out, float32 variables and gradients of them; within bf16
    rounding (of the input, and of the upstream gradient, which reaches the layer in bf16) of
    the float64 reference."""
    x, gamma, beta, w = case(1)
    layer = built(gamma, beta, x.shape, dtype="mixed_bfloat16")
    y, grads = tf_output_and_gradients(layer, tf.cast(x, tf.bfloat16), w)
    assert y.dtype == tf.bfloat16 and grads[0].dtype == tf.bfloat16
    assert grads[1].dtype == grads[2].dtype == tf.float32
    rounded = tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy()
    want_y, want_grads = reference(rounded, gamma, beta, w)
    np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), want_y, atol=3e-2)
    np.testing.assert_allclose(tf.cast(grads[0], tf.float32).numpy(), want_grads[0], atol=3e-2)
    for got, want in zip(grads[1:], want_grads[1:]):
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-2)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "float64"])
def test_closed_form_runs_eagerly_on_tensorflow_as_keras_does(closed, policy):
    """Outside a tf.function (eager: how a model is built), with a tape: the same output and
    gradients as Keras's layer, in float64 too (computed in float64 there, as Keras does)."""
    x, gamma, beta, w = case(5)
    dtype = "float64" if policy == "float64" else "float32"
    results = []
    for layer in (LayerNormalization(epsilon=1e-5, dtype=policy),
                  keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy)):
        layer.build(x.shape)
        layer.set_weights([gamma, beta])
        xt = tf.constant(x, dtype)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt)
            loss = tf.reduce_sum(tf.cast(y, dtype) * tf.constant(w, dtype))
        results.append((y, tape.gradient(loss, [xt, *layer.trainable_variables])))
    (y, grads), (want_y, want_grads) = results
    assert y.dtype == want_y.dtype
    atol = {"float32": 2e-5, "mixed_bfloat16": 3e-2, "float64": 1e-10}[policy]
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(),
                               tf.cast(want_y, tf.float64).numpy(), atol=atol)
    for got, want in zip(grads, want_grads):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(tf.cast(got, tf.float64).numpy(),
                                   tf.cast(want, tf.float64).numpy(), atol=atol)


@pytest.mark.parametrize("kwargs", [{"axis": 1}, {"center": False}, {"scale": False}])
def test_other_layer_norms_stay_keras_with_the_switch_on(closed, kwargs):
    """Only the last axis with a scale and an offset takes the closed form; any other layer
    norm is Keras's, bit for bit."""
    x, _, _, _ = case(2)
    ours = LayerNormalization(epsilon=1e-5, **kwargs)
    theirs = keras.layers.LayerNormalization(epsilon=1e-5, **kwargs)
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(theirs(x)))


def test_layer_norm_function_matches_keras_ops():
    x, gamma, beta, _ = case(3)
    np.testing.assert_allclose(np.asarray(layer_norm(x, gamma, beta, 1e-5)),
                               np.asarray(keras.ops.layer_normalization(x, gamma, beta,
                                                                        epsilon=1e-5)),
                               atol=2e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_normalize_is_layer_norm_forward_and_keras_layer(dtype):
    """`normalize` (the decoding step's norm) is `layer_norm`'s forward pass, the same values,
    and Keras's layer's output to rounding: computed in float32, returned in `x`'s dtype."""
    x, gamma, beta, _ = case(5)
    x = tf.cast(x, dtype)
    y = normalize(x, gamma, beta, 1e-5)
    assert y.dtype == dtype
    np.testing.assert_array_equal(np.asarray(tf.cast(y, tf.float32)),
                                  np.asarray(tf.cast(layer_norm(x, gamma, beta, 1e-5),
                                                     tf.float32)))
    policy = "mixed_bfloat16" if dtype == "bfloat16" else "float32"
    keras_y = built(gamma, beta, x.shape, dtype=policy)(x)
    assert keras_y.dtype == dtype
    np.testing.assert_allclose(np.asarray(tf.cast(y, tf.float32)),
                               np.asarray(tf.cast(keras_y, tf.float32)),
                               atol=2e-6 if dtype == "float32" else 2e-2)


@requires_jax
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_closed_form_matches_keras_autodiff_on_jax(dtype):
    x, gamma, beta, w = case(4)
    result = run_worker("layer_norm", {"x": x.tolist(), "gamma": gamma.tolist(),
                                       "beta": beta.tolist(), "w": w.tolist(), "dtype": dtype})
    keras_, closed_ = result["keras"], result["closed"]
    assert closed_["y_dtype"] == keras_["y_dtype"] == dtype
    assert closed_["dtypes"] == keras_["dtypes"] == [dtype, "float32", "float32"]
    atol = 2e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(closed_["y"], keras_["y"], atol=atol)
    rounded = tf.cast(tf.cast(x, dtype), tf.float32).numpy()
    _, want = reference(rounded, gamma, beta, w)
    for got, expected in zip(closed_["grads"], want):
        np.testing.assert_allclose(np.asarray(got), expected, atol=atol)
    for got, expected in zip(closed_["grads"][1:], keras_["grads"][1:]):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-3)
