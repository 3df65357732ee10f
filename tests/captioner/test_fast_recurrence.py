"""The decoder's teacher-forced recurrence (hoisted word products, one fused product of h per
step) against a plain per-timestep implementation of the paper's equations, from the same
weights: outputs, loss and gradients of every trainable variable.

Tolerance: float32, relative 1e-4 and absolute 1e-5 (the fast path sums the same products in
another order; a wrong fusion, e.g. a kernel's rows swapped, is off by O(1)).
"""

import numpy as np
import pytest
import tensorflow as tf

from captioner.decoder import ShowAttendTellDecoder

B, L, D, T, V, E, U, A = 3, 6, 5, 4, 11, 8, 12, 7
RTOL, ATOL = 1e-4, 1e-5


def _decoder(**kwargs):
    kwargs = {"vocab_size": V, "embedding_dim": E, "units": U, "attention_units": A,
              "dropout": 0.0, "num_regions": L, **kwargs}
    decoder = ShowAttendTellDecoder(**kwargs)
    decoder.build((None, L, D))
    rng = np.random.default_rng(1)  # non-zero biases too, so a misplaced bias shows
    for variable in decoder.trainable_variables:
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    return decoder


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    annotations = tf.constant(rng.normal(size=(B, L, D)).astype("float32"))
    caption_in = tf.constant(rng.integers(1, V, size=(B, T)).astype("int32"))
    caption_out = tf.constant(rng.integers(1, V, size=(B, T)).astype("int32"))
    alpha_weights = tf.constant(rng.normal(size=(B, T, L)).astype("float32"))
    return annotations, caption_in, caption_out, alpha_weights


def _reference(decoder, annotations, caption_in):
    """Xu et al. 2015 step by step, written from the layers' weights with plain TF ops:
    logits `(B, T, V)` and alpha `(B, T, L)` (soft attention, or hard attention's expected
    context)."""
    w = {v.path.split("/", 1)[1]: v for v in decoder.trainable_variables}
    embedded = tf.gather(w["embedding/embeddings"], caption_in)
    mean = tf.reduce_mean(annotations, axis=1)
    h = tf.tanh(mean @ w["init_h/kernel"] + w["init_h/bias"])
    c = tf.tanh(mean @ w["init_c/kernel"] + w["init_c/bias"])
    if decoder.score == "additive":
        keys = tf.einsum("bld,da->bla", annotations, w["attention/score/key_dense/kernel"])
        keys += w["attention/score/key_dense/bias"]
    logits, alphas = [], []
    coverage = tf.zeros(annotations.shape[:2])  # Σ of the earlier steps' α (B, L)
    for t in range(T):
        query = h if decoder.query == "hidden" else tf.concat([h, embedded[:, t]], axis=-1)
        if decoder.score == "additive":
            q = query @ w["attention/score/query_dense/kernel"]  # (B, A)
            covered = keys + coverage[..., None] * w["coverage/kernel"][0] if decoder.coverage \
                else keys
            hidden = tf.tanh(q[:, None, :] + covered)
            scores = tf.einsum("bla,a->bl", hidden, w["attention/score/energy_dense/kernel"][:, 0])
        else:  # dot: the query projected into the annotations' space
            q = query @ w["query_proj/kernel"]  # (B, D)
            scores = tf.einsum("bd,bld->bl", q, annotations)
        alpha = tf.nn.softmax(scores, axis=-1)
        coverage += alpha
        z = tf.einsum("bl,bld->bd", alpha, annotations)
        beta = tf.sigmoid(h @ w["gate/kernel"] + w["gate/bias"])
        z = beta * z
        x = tf.concat([embedded[:, t], z], axis=-1)
        gates = x @ w["lstm/kernel"] + h @ w["lstm/recurrent_kernel"] + w["lstm/bias"]
        i, f, g, o = tf.split(gates, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        out = (embedded[:, t] + h @ w["L_h/kernel"] + w["L_h/bias"] + z @ w["L_z/kernel"])
        logits.append(out @ w["L_o/kernel"] + w["L_o/bias"])
        alphas.append(alpha)
    return tf.stack(logits, axis=1), tf.stack(alphas, axis=1)


def _loss(logits, alpha, caption_out, alpha_weights):
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(caption_out, logits)
    return tf.reduce_sum(xent) + tf.reduce_sum(alpha * alpha_weights)


def _loss_and_gradients(decoder, forward):
    annotations, caption_in, caption_out, alpha_weights = _inputs()
    with tf.GradientTape() as tape:
        logits, alpha = forward(annotations, caption_in)
        loss = _loss(logits, alpha, caption_out, alpha_weights)
    grads = tape.gradient(loss, decoder.trainable_variables)
    return loss, logits, alpha, [tf.convert_to_tensor(g) for g in grads]


def _check(decoder, training, **call_kwargs):
    def fast(annotations, caption_in):
        out = decoder(annotations, caption_in, training=training, **call_kwargs)
        return out["logits"], out["alpha"]

    new = _loss_and_gradients(decoder, fast)
    old = _loss_and_gradients(decoder, lambda a, c: _reference(decoder, a, c))
    for name, x, y in zip(("loss", "logits", "alpha"), new[:3], old[:3]):
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=name)
    assert len(new[3]) == len(old[3]) == len(decoder.trainable_variables)
    for variable, x, y in zip(decoder.trainable_variables, new[3], old[3]):
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=variable.path)


@pytest.mark.parametrize("query,score,coverage", [
    ("hidden", "additive", False), ("hidden+word", "additive", False),
    ("hidden", "dot", False), ("hidden+word", "dot", False),
    ("hidden", "additive", True), ("hidden+word", "additive", True)])
def test_soft_attention_loss_and_gradients_equal_the_per_step_reference(query, score, coverage):
    _check(_decoder(query=query, score=score, coverage=coverage), training=True)


@pytest.mark.parametrize("query,score", [("hidden+word", "additive"), ("hidden", "dot")])
def test_hard_attention_expected_context_equals_the_per_step_reference(query, score):
    # With probability 1 every caption takes the expected context Σ αᵢ aᵢ: deterministic.
    decoder = _decoder(attention="hard", query=query, score=score)
    _check(decoder, training=True, expected_context_prob=1.0)


def test_hard_attention_samples_the_same_locations_as_step_by_step():
    """Sampled contexts: the teacher-forced pass and `recurrence` step by step draw from the
    same seed stream, so with the generators reset they pick the same locations."""
    decoder = _decoder(attention="hard", query="hidden+word")
    annotations, caption_in, _, _ = _inputs()
    state = [np.asarray(v) for v in decoder.non_trainable_variables]
    out = decoder(annotations, caption_in, training=True, expected_context_prob=0.0)
    for variable, value in zip(decoder.non_trainable_variables, state):
        variable.assign(value)
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    embedded = decoder.embedding(caption_in)
    log_probs = []
    for t in range(T):
        h, c, _, _, log_prob = decoder.recurrence(
            embedded[:, t], h, c, annotations, projected, training=True, sample=True)
        log_probs.append(log_prob)
    np.testing.assert_allclose(out["log_prob"], np.stack(log_probs, axis=1),
                               rtol=RTOL, atol=ATOL)
