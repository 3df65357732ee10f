"""token_loss_terms against a NumPy reference, with and without label smoothing: its value, and
its gradient by the logits (the closed form `softmax - q`, and automatic differentiation of the
same formula), on TensorFlow here and on JAX in a worker process."""

import numpy as np
import pytest
import tensorflow as tf

from seq2seq.losses import token_loss_terms
from tests.jax.conftest import requires_jax, run_worker


def reference(logits, targets, eps):
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    total, count, correct = 0.0, 0, 0
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            y = targets[b, t]
            if y == 0:
                continue
            q = np.full(logits.shape[-1], eps / logits.shape[-1])
            q[y] += 1 - eps
            total += -(q * logp[b, t]).sum()
            count += 1
            correct += int(logits[b, t].argmax() == y)
    return total, count, correct


def reference_gradient(logits, targets, eps):
    """d loss_sum / d logits: `softmax - q` at the real tokens, 0 at padding (float64)."""
    logits = logits.astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    vocab = logits.shape[-1]
    q = (1 - eps) * np.eye(vocab)[targets] + eps / vocab
    return (p - q) * (targets != 0)[..., None]


def case(seed=0, shape=(3, 5, 7)):
    rng = np.random.default_rng(seed)
    logits = (3 * rng.normal(size=shape)).astype(np.float32)
    targets = rng.integers(1, shape[-1], size=shape[:2]).astype(np.int32)
    targets[0, 3:] = 0
    targets[2, 1:] = 0
    return logits, targets


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_numpy_reference(eps):
    logits, targets = case()
    terms = token_loss_terms(logits, targets, label_smoothing=eps)
    total, count, correct = reference(logits, targets, eps)
    assert float(terms["count"]) == count
    assert float(terms["accuracy"]) == correct
    np.testing.assert_allclose(float(terms["loss_sum"]), total, rtol=1e-5)


def tf_loss_and_gradient(logits, targets, eps, dtype, closed):
    x = tf.cast(tf.constant(logits), dtype)

    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = token_loss_terms(x, targets, eps, closed_form_gradient=closed)["loss_sum"]
        return loss, tape.gradient(loss, x)

    loss, grad = run(x)
    return float(loss), grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("closed", [True, False])
def test_gradient_matches_numpy_on_tensorflow(eps, closed):
    logits, targets = case(1)
    loss, grad = tf_loss_and_gradient(logits, targets, eps, "float32", closed)
    assert grad.dtype == tf.float32
    np.testing.assert_allclose(loss, reference(logits, targets, eps)[0], rtol=1e-5)
    np.testing.assert_allclose(grad.numpy(), reference_gradient(logits, targets, eps),
                               atol=1e-6)


def test_gradient_keeps_the_logits_dtype_on_tensorflow():
    """bfloat16 logits (mixed precision): the gradient is bfloat16, within its rounding of the
    float64 gradient of the same (rounded) logits."""
    logits, targets = case(2)
    rounded = tf.cast(tf.cast(logits, tf.bfloat16), tf.float32).numpy()
    loss, grad = tf_loss_and_gradient(logits, targets, 0.1, "bfloat16", True)
    assert grad.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(grad, tf.float32).numpy(),
                               reference_gradient(rounded, targets, 0.1), atol=4e-3)
    np.testing.assert_allclose(loss, reference(rounded, targets, 0.1)[0], rtol=1e-5)


@requires_jax
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradient_matches_numpy_on_jax(dtype):
    logits, targets = case(3)
    eps = 0.1
    result = run_worker("loss_gradient", {"logits": logits.tolist(), "targets": targets.tolist(),
                                          "eps": eps, "dtype": dtype})
    rounded = tf.cast(tf.cast(logits, dtype), tf.float32).numpy()
    expected = reference_gradient(rounded, targets, eps)
    atol = 1e-6 if dtype == "float32" else 4e-3
    for name in ("closed", "autodiff"):
        assert result[name]["dtype"] == dtype
        np.testing.assert_allclose(result[name]["loss"], reference(rounded, targets, eps)[0],
                                   rtol=1e-5)
        np.testing.assert_allclose(np.asarray(result[name]["grad"]), expected, atol=atol)
