"""The attentive LSTM decoder: shapes, attention rows, teacher forcing vs step by step."""

import keras
import numpy as np
import pytest

from captioner.decoder import ShowAttendTellDecoder

B, L, D, T, V = 3, 6, 5, 4, 11


def _decoder(**kwargs):
    kwargs = {"vocab_size": V, "embedding_dim": 8, "units": 12, "attention_units": 7,
              "dropout": 0.0, "num_regions": L, **kwargs}
    decoder = ShowAttendTellDecoder(**kwargs)
    decoder.build((None, L, D))
    return decoder


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    annotations = rng.normal(size=(B, L, D)).astype("float32")
    caption_in = rng.integers(1, V, size=(B, T)).astype("int32")
    return annotations, caption_in


@pytest.mark.parametrize("score", ["additive", "dot", "scaled_dot", "general", "cosine",
                                   "location"])
def test_step_shapes_and_attention_rows_sum_to_one(score):
    decoder = _decoder(score=score)
    annotations, caption_in = _inputs()
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    logits, h, c, alpha = decoder.step(caption_in[:, 0], h, c, annotations, projected)
    assert tuple(logits.shape) == (B, V)
    assert tuple(h.shape) == tuple(c.shape) == (B, 12)
    assert tuple(alpha.shape) == (B, L)
    np.testing.assert_allclose(np.sum(alpha, axis=-1), 1.0, atol=1e-5)


def test_initial_state_is_an_mlp_of_the_mean_annotation():
    decoder = _decoder()
    annotations, _ = _inputs()
    h, c = decoder.initial_state(annotations)
    mean = annotations.mean(axis=1)
    w, b = (np.asarray(v) for v in decoder.init_h.weights)
    np.testing.assert_allclose(h, np.tanh(mean @ w + b), atol=1e-5)
    w, b = (np.asarray(v) for v in decoder.init_c.weights)
    np.testing.assert_allclose(c, np.tanh(mean @ w + b), atol=1e-5)


@pytest.mark.parametrize("query,score", [("hidden", "additive"), ("hidden+word", "additive"),
                                         ("hidden+word", "dot")])
def test_teacher_forcing_equals_step_by_step(query, score):
    decoder = _decoder(query=query, score=score)
    annotations, caption_in = _inputs()
    out = decoder(annotations, caption_in, training=False)
    assert tuple(out["logits"].shape) == (B, T, V)
    assert tuple(out["alpha"].shape) == (B, T, L)
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    for t in range(T):
        logits, h, c, alpha = decoder.step(caption_in[:, t], h, c, annotations, projected)
        np.testing.assert_allclose(out["logits"][:, t], logits, atol=1e-5)
        np.testing.assert_allclose(out["alpha"][:, t], alpha, atol=1e-6)


@pytest.mark.parametrize("query", ["hidden", "hidden+word"])
def test_with_coverage_teacher_forcing_equals_step_by_step_with_the_attention_summed(query):
    decoder = _decoder(query=query, coverage=True)
    decoder.coverage_dense.kernel.assign(  # a strong coverage term, so that it shows
        np.random.default_rng(1).normal(scale=3.0, size=(1, 7)).astype("float32"))
    annotations, caption_in = _inputs()
    out = decoder(annotations, caption_in, training=False)
    plain = _decoder(query=query)
    plain.set_weights([w for w in decoder.get_weights()
                       if w.shape != decoder.coverage_dense.kernel.shape])
    without = plain(annotations, caption_in, training=False)
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    coverage = np.zeros((B, L), "float32")
    for t in range(T):
        logits, h, c, alpha = decoder.step(caption_in[:, t], h, c, annotations, projected,
                                           coverage=coverage)
        np.testing.assert_allclose(out["logits"][:, t], logits, atol=1e-5)
        np.testing.assert_allclose(out["alpha"][:, t], alpha, atol=1e-6)
        coverage = coverage + np.asarray(alpha)
    # The first step has no coverage yet; later ones differ from the same decoder without it.
    np.testing.assert_allclose(out["alpha"][:, 0], without["alpha"][:, 0], atol=1e-6)
    assert np.abs(np.asarray(out["alpha"][:, 1:]) - np.asarray(without["alpha"][:, 1:])).max() > 1e-3


def test_the_covered_keys_add_w_c_times_each_regions_coverage():
    decoder = _decoder(coverage=True)
    annotations, _ = _inputs()
    projected = np.asarray(decoder.project_keys(annotations))
    coverage = np.random.default_rng(2).uniform(size=(B, L)).astype("float32")
    w_c = np.asarray(decoder.coverage_dense.kernel)  # (1, A)
    np.testing.assert_allclose(decoder.covered_keys(projected, coverage),
                               projected + coverage[..., None] * w_c[0], atol=1e-6)


@pytest.mark.parametrize("kwargs", [{"attention": "hard"}, {"score": "dot"}])
def test_coverage_is_refused_outside_soft_additive_attention(kwargs):
    from captioner.config import DecoderConfig
    from common.errors import UserError

    with pytest.raises(ValueError, match="coverage is a term of the additive score"):
        _decoder(coverage=True, **kwargs)
    with pytest.raises(UserError, match="coverage is a term of the additive score"):
        DecoderConfig(coverage=True, **kwargs)


@pytest.mark.parametrize("query", ["hidden", "hidden+word"])
def test_only_the_word_query_lets_the_word_read_move_the_attention(query):
    decoder = _decoder(query=query)
    annotations, _ = _inputs()
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    maps = [np.asarray(decoder.step(np.full((B,), token, "int32"), h, c, annotations,
                                    projected)[3]) for token in (3, 7)]
    moved = np.abs(maps[0] - maps[1]).max()
    if query == "hidden":
        assert moved < 1e-7  # the paper's query h_{t-1} does not see y_{t-1}
    else:
        assert moved > 1e-4


def test_unknown_query_is_refused():
    with pytest.raises(ValueError, match="attention query"):
        _decoder(query="word")


def test_gate_scales_the_context():
    decoder = _decoder()
    annotations, caption_in = _inputs()
    base = np.asarray(decoder(annotations, caption_in)["logits"])
    # A gate bias of -30 closes the gate (β ≈ 0): the image no longer reaches the LSTM input
    # or the output except through the initial state.
    kernel, bias = decoder.gate.weights
    bias.assign(np.full((1,), -30.0, "float32"))
    kernel.assign(np.zeros(kernel.shape, "float32"))
    closed = np.asarray(decoder(annotations, caption_in)["logits"])
    shuffled = annotations.copy()
    shuffled[:, :] = annotations.mean(axis=1, keepdims=True)  # same mean, no detail
    same_mean = np.asarray(decoder(shuffled, caption_in)["logits"])
    assert not np.allclose(base, closed)
    np.testing.assert_allclose(closed, same_mean, atol=1e-4)


def test_hard_attention_outputs_and_argmax_at_inference():
    decoder = _decoder(attention="hard", expected_context_prob=0.5)
    annotations, caption_in = _inputs()
    out = decoder(annotations, caption_in, training=True)
    assert tuple(out["log_prob"].shape) == (B, T)
    assert tuple(out["entropy"].shape) == (B, T)
    assert np.all(np.asarray(out["log_prob"]) <= 0)
    assert set(np.asarray(out["sampled"]).tolist()) <= {0.0, 1.0}
    alpha = np.asarray(out["alpha"])
    np.testing.assert_allclose(out["entropy"], -(alpha * np.log(alpha)).sum(-1), atol=1e-5)
    # At inference the context is the annotation at the most likely location.
    h, c = decoder.initial_state(annotations)
    projected = decoder.project_keys(annotations)
    embedded = decoder.embedding(caption_in[:, 0])
    context, alpha, _ = decoder._attend(h, embedded, annotations, projected, training=False)
    best = np.argmax(np.asarray(alpha), axis=-1)
    np.testing.assert_allclose(context, annotations[np.arange(B), best], atol=1e-6)


def test_config_round_trip():
    decoder = _decoder(attention="hard", score="general", query="hidden+word")
    clone = ShowAttendTellDecoder.from_config(decoder.get_config())
    assert clone.get_config() == decoder.get_config()
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(decoder))
    assert isinstance(restored, ShowAttendTellDecoder)
