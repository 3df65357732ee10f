"""BahdanauTranslator: shapes, source masking, step-by-step == teacher forcing, every score."""

import numpy as np
import pytest
import tensorflow as tf

from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.config import BahdanauConfig, ModelConfig

SOURCE = np.array([[4, 5, 6, 2, 0, 0], [7, 8, 2, 0, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 9, 10, 11], [1, 12, 13, 0]], np.int32)


def tiny(label_smoothing=0.0, **kwargs):
    options = dict(embedding_dim=8, units=8, attention_units=8, dropout=0.0)
    options.update(kwargs)
    config = ModelConfig(bahdanau=BahdanauConfig(**options), label_smoothing=label_smoothing)
    return BahdanauTranslator(config, 20, 30)


def test_shapes_and_attention_rows_sum_to_one_over_real_tokens():
    model = tiny()
    logits, alpha = model({"source": SOURCE, "target_in": TARGET_IN}, return_attention=True)
    assert tuple(logits.shape) == (2, 4, 30)
    assert tuple(alpha.shape) == (2, 4, 6)
    alpha = np.asarray(alpha)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)
    assert np.all(alpha[SOURCE[:, None, :].repeat(4, 1) == 0] == 0)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_source_padding_changes_nothing(cell):
    model = tiny(cell=cell)
    logits = model({"source": SOURCE, "target_in": TARGET_IN})
    padded = np.concatenate([SOURCE, np.zeros((2, 5), np.int32)], axis=1)
    logits_padded = model({"source": padded, "target_in": TARGET_IN})
    np.testing.assert_allclose(logits, logits_padded, atol=1e-5)


@pytest.mark.parametrize(
    "score,cell,feeding",
    [("additive", "gru", False), ("dot", "lstm", True), ("scaled_dot", "gru", True),
     ("general", "gru", False), ("cosine", "lstm", False), ("location", "gru", True)],
)
def test_step_by_step_matches_teacher_forcing(score, cell, feeding):
    model = tiny(score=score, cell=cell, input_feeding=feeding)
    logits, alpha = model({"source": SOURCE, "target_in": TARGET_IN}, return_attention=True)
    state = model.initial_state(SOURCE)
    for t in range(TARGET_IN.shape[1]):
        step_logits, state, step_alpha = model.step(tf.constant(TARGET_IN[:, t]), state, t)
        np.testing.assert_allclose(step_logits, logits[:, t], atol=1e-5)
        np.testing.assert_allclose(step_alpha, alpha[:, t], atol=1e-6)


def test_input_feeding_changes_the_model():
    a = tiny(input_feeding=False)
    b = tiny(input_feeding=True)
    a({"source": SOURCE, "target_in": TARGET_IN})
    b({"source": SOURCE, "target_in": TARGET_IN})
    kernel = lambda m: m.decoder_cell.weights[0].shape[0]  # noqa: E731
    assert kernel(b) == kernel(a) + 8


def test_config_round_trip():
    model = tiny(cell="lstm", score="general", input_feeding=True, label_smoothing=0.1)
    clone = BahdanauTranslator.from_config(model.get_config())
    assert clone.get_config() == model.get_config()


def test_dropout_is_active_only_in_training():
    model = tiny(dropout=0.5)
    inputs = {"source": SOURCE, "target_in": TARGET_IN}
    np.testing.assert_allclose(model(inputs), model(inputs))
    assert not np.allclose(model(inputs, training=True), model(inputs, training=True))


def test_loss_terms_count_real_tokens():
    model = tiny()
    target_out = np.array([[9, 10, 11, 2], [12, 13, 2, 0]], np.int32)
    terms = model.loss_terms(
        {"source": SOURCE, "target_in": TARGET_IN, "target_out": target_out}, training=False
    )
    assert float(terms["count"]) == 7
    assert float(terms["loss_sum"]) > 0
    assert 0 <= float(terms["accuracy"]) <= 7
