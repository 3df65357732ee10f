"""Luong's local attention in the Bahdanau decoder: the window, local-p's positions, decoding."""

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.config import BahdanauConfig
from seq2seq.models import build_model
from seq2seq.train import make_run_config

SOURCE = np.array([[4, 5, 6, 7, 8, 9, 10, 2], [7, 8, 9, 2, 0, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 9, 10, 11, 12, 13], [1, 12, 13, 14, 15, 0]], np.int32)
INPUTS = {"source": SOURCE, "target_in": TARGET_IN}
REAL = (SOURCE != 0).sum(1)  # S' per example


def tiny(**kwargs):
    sizes = BahdanauConfig(embedding_dim=8, units=8, attention_units=8, dropout=0.0, **kwargs)
    return BahdanauTranslator(sizes, 20, 30)


def outside(centres, window):
    """`(B, T, S)` true where `|s - p_t| > D` or `s` is padding."""
    s = np.arange(SOURCE.shape[1])[None, None, :]
    return (np.abs(s - centres[:, :, None]) > window) | (SOURCE[:, None, :] == 0)


@pytest.mark.parametrize("window", [0, 1, 2])
def test_local_m_weights_outside_the_window_are_exactly_zero(window):
    model = tiny(local="monotonic", attention_window=window)
    _, alpha = model(INPUTS, return_attention=True)
    alpha = np.asarray(alpha)
    steps = np.arange(TARGET_IN.shape[1])[None, :]
    centres = np.minimum(steps, REAL[:, None] - 1).astype(np.float32)  # p_t = t, clipped
    np.testing.assert_allclose(np.asarray(model.window_positions(INPUTS)),
                               np.broadcast_to(centres, alpha.shape[:2]))
    assert np.all(alpha[outside(centres, window)] == 0.0)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)  # renormalised in the window


def test_local_p_positions_are_within_the_source_and_weights_within_the_window():
    model = tiny(local="predictive", attention_window=1)
    _, alpha = model(INPUTS, return_attention=True)
    alpha = np.asarray(alpha)
    centres = np.asarray(model.window_positions(INPUTS))
    assert centres.shape == TARGET_IN.shape
    assert np.all(centres >= 0.0) and np.all(centres <= (REAL[:, None] - 1))
    assert np.all(alpha[outside(centres, 1)] == 0.0)
    # the Gaussian term: weights sum to at most 1, not renormalised (Luong et al. 2015)
    assert np.all(alpha.sum(-1) <= 1.0 + 1e-6) and np.any(alpha.sum(-1) < 0.999)


def test_local_p_positions_train():
    model = tiny(local="predictive", attention_window=1)
    target_out = np.concatenate([TARGET_IN[:, 1:], np.full((2, 1), 2, np.int32)], 1)
    batch = dict(INPUTS, target_out=target_out)
    model.build()
    position_weights = model.attention.position_hidden.trainable_weights
    tracked = {id(w) for w in model.trainable_weights}  # so checkpoints and optimizers see them
    assert position_weights and all(id(w) in tracked for w in position_weights)
    with tf.GradientTape() as tape:
        loss = model.loss_terms(batch, training=True)["loss_sum"]
    grads = tape.gradient(loss, position_weights)
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)


@pytest.mark.parametrize("local,cell,feeding", [("monotonic", "gru", False),
                                                 ("predictive", "lstm", True)])
def test_step_by_step_matches_the_full_pass(local, cell, feeding):
    model = tiny(local=local, attention_window=1, cell=cell, input_feeding=feeding)
    logits, alpha = model(INPUTS, return_attention=True)
    state = model.initial_state(SOURCE)
    for t in range(TARGET_IN.shape[1]):
        step_logits, state, step_alpha = model.step(tf.constant(TARGET_IN[:, t]), state, t)
        np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-5)
        np.testing.assert_allclose(step_alpha, alpha[:, t], atol=1e-6)


def test_local_m_with_a_window_over_the_whole_source_is_global_attention():
    local, wide = tiny(local="monotonic", attention_window=SOURCE.shape[1]), tiny()
    local.build()
    wide.build()
    assert [w.shape for w in local.weights] == [w.shape for w in wide.weights]
    for a, b in zip(local.weights, wide.weights):
        a.assign(b)
    np.testing.assert_allclose(local(INPUTS), wide(INPUTS), atol=1e-5)


def test_options_reach_the_model_and_bad_ones_are_user_errors():
    config = make_run_config("bahdanau", "dates", preset="tiny",
                             overrides={"local": "predictive", "attention_window": 3})
    model = build_model(config.model, 10, 12)
    assert model.local == "predictive" and model.attention.window == 3
    assert model.get_config()["config"]["bahdanau"]["attention_window"] == 3
    with pytest.raises(UserError, match="monotonic, predictive"):
        make_run_config("bahdanau", "dates", overrides={"local": "sideways"})
    with pytest.raises(UserError, match="global attention"):
        tiny().window_positions(INPUTS)
