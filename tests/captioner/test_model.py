"""The captioner model: its loss terms against NumPy, decoding, the hard-attention baseline."""

import keras
import numpy as np
import pytest

from captioner.config import DecoderConfig, EncoderConfig
from captioner.model import (
    MovingAverage,
    ShowAttendTell,
    doubly_stochastic_penalty,
    reinforce_surrogate,
)

V = 13


def _model(**decoder):
    decoder = {"embedding_dim": 8, "units": 16, "attention_units": 8, "dropout": 0.0,
               "max_length": 6, **decoder}
    return ShowAttendTell(V, EncoderConfig("small-cnn", (16, 16), "none", filters=(4, 6)),
                          DecoderConfig(**decoder))


def _batch(seed=0, batch=3):
    rng = np.random.default_rng(seed)
    caption_out = np.array([[5, 6, 7, 2], [8, 2, 0, 0], [4, 4, 9, 2]], "int32")[:batch]
    caption_in = np.concatenate([np.ones((batch, 1), "int32"), caption_out[:, :-1]], axis=1)
    caption_in[caption_out == 0] = 0
    return {"image": rng.uniform(0, 255, (batch, 16, 16, 3)).astype("float32"),
            "caption_in": caption_in, "caption_out": caption_out}


def _numpy_penalty(alpha, mask, tau):
    coverage = (alpha * mask[:, :, None]).sum(1)
    if tau is None:
        tau = (mask.sum(1) / alpha.shape[-1])[:, None]
    return ((tau - coverage) ** 2).sum(-1)


@pytest.mark.parametrize("tau", [None, 1.0, 0.25])
def test_penalty_matches_numpy(tau):
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(4, 5, 7))
    alpha = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    mask = (rng.uniform(size=(4, 5)) > 0.3).astype("float32")
    got = doubly_stochastic_penalty(alpha.astype("float32"), mask, tau)
    np.testing.assert_allclose(got, _numpy_penalty(alpha, mask, tau), rtol=1e-5)


def test_paper_penalty_is_zero_only_for_full_coverage():
    # τ = 1 with T = L: attending each region once in turn costs nothing.
    alpha = np.eye(4, dtype="float32")[None]
    assert float(doubly_stochastic_penalty(alpha, np.ones((1, 4)), 1.0)[0]) == 0.0
    stuck = np.tile(np.eye(4, dtype="float32")[:1], (4, 1))[None]
    assert float(doubly_stochastic_penalty(stuck, np.ones((1, 4)), 1.0)[0]) == 12.0


@pytest.mark.parametrize("tau", [None, 1.0])
def test_a_row_without_a_real_step_has_no_penalty(tau):
    """A padding row (no caption: what fills a last batch on JAX) costs nothing; the rows
    beside it cost what they cost alone."""
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(2, 5, 7))
    alpha = (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], "float32")
    got = np.asarray(doubly_stochastic_penalty(alpha, mask, tau))
    assert got[1] == 0.0
    np.testing.assert_allclose(got[0], _numpy_penalty(alpha[:1], mask[:1], tau)[0], rtol=1e-5)


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_loss_terms_match_numpy(attention):
    model = _model(attention=attention, penalty_weight=0.5)
    batch = _batch()
    terms = {k: float(v) for k, v in model.loss_terms(batch, training=False).items()}
    out = model(batch, training=False)
    logits = np.asarray(out["logits"], np.float64)
    alpha = np.asarray(out["alpha"], np.float64)
    target = batch["caption_out"]
    mask = (target != 0).astype(np.float64)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    token = -np.take_along_axis(log_p, target[..., None], -1)[..., 0]
    penalty = 0.5 * _numpy_penalty(alpha, mask, None).sum()
    assert terms["count"] == mask.sum() == 10
    np.testing.assert_allclose(terms["xent"], (token * mask).sum(), rtol=1e-5)
    np.testing.assert_allclose(terms["penalty"], penalty, rtol=1e-4)
    np.testing.assert_allclose(terms["loss_sum"], (token * mask).sum() + penalty, rtol=1e-5)
    correct = ((logits.argmax(-1) == target) * mask).sum()
    assert terms["accuracy"] == correct


@pytest.mark.parametrize("reward", ["caption", "to-go"])
def test_reinforce_surrogate_matches_numpy(reward):
    rng = np.random.default_rng(3)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], "float32")
    token_xent = rng.uniform(0.1, 3.0, size=mask.shape).astype("float32") * mask
    log_prob = np.log(rng.uniform(0.05, 1.0, size=mask.shape)).astype("float32")
    sampled = np.array([1.0, 0.0, 1.0], "float32")
    baseline = -1.5
    surrogate, batch_reward = reinforce_surrogate(token_xent, mask, log_prob, sampled,
                                                  np.float32(baseline), reward)
    expected = 0.0
    for b in range(3):
        for t in range(4):
            if not mask[b, t]:
                continue
            if reward == "caption":
                advantage = -token_xent[b].sum() - baseline
            else:  # the words from t on, against b per word
                advantage = -token_xent[b, t:].sum() - baseline * mask[b, t:].sum()
            expected -= sampled[b] * advantage * log_prob[b, t]
    np.testing.assert_allclose(float(surrogate), expected, rtol=1e-5)
    want = (-token_xent.sum(1).mean() if reward == "caption"
            else -token_xent.sum() / mask.sum())
    np.testing.assert_allclose(float(batch_reward), want, rtol=1e-5)


def test_unknown_reward_is_refused():
    from common.errors import UserError

    with pytest.raises(UserError, match="reward"):
        DecoderConfig(reward="bleu")


def test_hard_attention_baseline_is_a_checkpointed_moving_average():
    model = _model(attention="hard", baseline_decay=0.9)
    assert any(v is model.baseline for v in model.non_trainable_variables)
    batch = _batch()
    model.loss_terms(batch, training=False)
    assert float(model.baseline) == 0.0  # evaluation leaves it alone
    terms = model.loss_terms(batch, training=True)
    # The reward is the caption log-likelihood; the first update sets the baseline to it.
    assert float(model.baseline) < 0
    assert np.isfinite(float(terms["reinforce"])) and float(terms["entropy"]) > 0


def test_beam_size_one_follows_greedy_or_ends_it_sooner():
    # One beam follows greedy's path (the best token that does not end); an <end> ranked second
    # at some step finishes a hypothesis there, which wins over an unfinished greedy caption
    # (finished first) or a finished one it beats. So the beam's caption is greedy's, or a prefix
    # of greedy's followed by <end>, with the same attention on the words they share.
    keras.utils.set_random_seed(1)  # this seed's three beams all end sooner than greedy
    model = _model()
    images = _batch(batch=3)["image"]
    greedy = model.caption(images, method="greedy", max_length=6)
    beam = model.caption(images, method="beam", beam_size=1, max_length=6, length_penalty=0.0)
    g_tokens, b_tokens = greedy.tokens.numpy()[:, 0], beam.tokens.numpy()[:, 0]
    for row in range(3):
        length = int(beam.lengths[row, 0])
        if not np.array_equal(b_tokens[row], g_tokens[row]):
            assert bool(beam.finished[row, 0])
            assert float(beam.scores[row, 0]) > float(greedy.scores[row, 0]) or not bool(
                greedy.finished[row, 0])
            length -= 1  # the words before the beam's <end>
        np.testing.assert_array_equal(b_tokens[row, :length], g_tokens[row, :length])
        np.testing.assert_allclose(beam.attention.numpy()[row, 0, :length],
                                   greedy.attention.numpy()[row, 0, :length], atol=1e-6)


def test_decoded_attention_is_one_map_per_generated_word():
    model = _model()
    decoded = model.caption(_batch()["image"], method="beam", beam_size=3, max_length=6)
    assert tuple(decoded.tokens.shape[:2]) == (3, 1)
    attention = np.asarray(decoded.attention)
    assert attention.shape[:2] == (3, 1) and attention.shape[-1] == 16
    lengths = np.asarray(decoded.lengths)[:, 0]
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(attention[b, 0, :n].sum(-1), 1.0, atol=1e-5)


def test_sampling_with_low_temperature_is_greedy():
    # Seeded: an untrained model's words can nearly tie, and at any temperature a near tie
    # samples either word; this seed's greedy words win by a clear margin.
    keras.utils.set_random_seed(11)
    model = _model()
    images = _batch()["image"]
    greedy = model.caption(images, method="greedy", max_length=6)
    sampled = model.caption(images, method="sample", temperature=1e-6, seed=3, max_length=6)
    np.testing.assert_array_equal(sampled.tokens, greedy.tokens)


def test_config_round_trip():
    model = _model(attention="hard", score="dot")
    clone = ShowAttendTell.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.grid_shape == model.grid_shape == (4, 4)


def test_training_checkpoint_restores_weights_and_baseline(tmp_path):
    import keras

    from common.training.checkpoints import TrainingState, make_checkpoint, restore_model

    model = _model(attention="hard")
    batch = _batch()
    model.loss_terms(batch, training=True)  # moves the baseline
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    path = make_checkpoint(model, optimizer, TrainingState()).save(str(tmp_path / "ckpt"))
    fresh = _model(attention="hard")
    restore_model(fresh, path)
    assert float(fresh.baseline) == float(model.baseline) != 0.0
    for a, b in zip(model.variables, fresh.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_baseline_starts_at_the_first_reward_then_moves_as_a_moving_average():
    average = MovingAverage(0.9)
    average.update(-4.0)  # no pull towards the initial 0: the first reward is the baseline
    assert float(average.value) == pytest.approx(-4.0)
    average.update(-2.0)
    assert float(average.value) == pytest.approx(0.9 * -4.0 + 0.1 * -2.0)
    average.update(-3.0)
    assert float(average.value) == pytest.approx(0.9 * (0.9 * -4.0 + 0.1 * -2.0) + 0.1 * -3.0)


def test_expected_context_warmup_falls_linearly_from_one_to_the_configured_share():
    model = _model(attention="hard", expected_context_prob=0.5, expected_context_warmup=4)
    batch = _batch()
    shares = []
    for _ in range(6):
        shares.append(float(model.expected_context_prob()))
        model.loss_terms(batch, training=True)  # one training step's baseline update
    np.testing.assert_allclose(shares, [1.0, 0.875, 0.75, 0.625, 0.5, 0.5])
    assert _model(attention="hard").expected_context_prob() == 0.5  # no warm-up: constant


def test_during_the_warmup_every_caption_uses_the_expected_context():
    """At the warm-up's start no caption samples a location, so REINFORCE adds nothing."""
    model = _model(attention="hard", expected_context_warmup=100)
    outputs = model.decoder(model.annotations(_batch(batch=3)), _batch(batch=3)["caption_in"],
                            training=True, expected_context_prob=model.expected_context_prob())
    np.testing.assert_array_equal(np.asarray(outputs["sampled"]), np.zeros(3))
    terms = model.loss_terms(_batch(batch=3), training=True)
    assert float(terms["reinforce"]) == 0.0
    after = _model(attention="hard", expected_context_prob=0.0)  # never the expected context
    outputs = after.decoder(after.annotations(_batch()), _batch()["caption_in"], training=True,
                            expected_context_prob=after.expected_context_prob())
    np.testing.assert_array_equal(np.asarray(outputs["sampled"]), np.ones(3))


def test_a_negative_warmup_is_a_user_error():
    from common.errors import UserError

    with pytest.raises(UserError, match="expected_context_warmup"):
        DecoderConfig(expected_context_warmup=-1)
