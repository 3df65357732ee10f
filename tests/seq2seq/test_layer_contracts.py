"""Every layer and model of `seq2seq` passes `run_layer_test`: config and serialization round
trips, symbolic and eager shapes, a training step, a `.keras` save and reload, mixed precision.

`test_every_layer_class_is_checked` walks the package's modules, so a new layer that is not
added to `CASES` fails it.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import seq2seq
from seq2seq.bahdanau import BahdanauTranslator
from seq2seq.config import BahdanauConfig, ModelConfig, TransformerConfig
from seq2seq.encoder_decoder import EncoderDecoderTranslator
from seq2seq.transformer import TransformerTranslator
from seq2seq.transformer_layers import TransformerDecoderLayer, TransformerEncoderLayer
from tests.helpers.layers import layer_classes, run_layer_test

B, S, T, D, V = 2, 5, 4, 8, 9
SOURCE = np.array([[4, 5, 6, 7, 2], [8, 3, 2, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 4, 5, 6], [1, 7, 0, 0]], np.int32)
SOURCE_COPY = np.array([[4, 5, 9, 6, 2], [7, 10, 2, 0, 0]], np.int32)  # 9, 10: copy slots
SOURCE_MASK = SOURCE != 0
TARGET_MASK = TARGET_IN != 0
RECURRENT = BahdanauConfig(embedding_dim=6, units=D, attention_units=6, dropout=0.0)
TRANSFORMER = TransformerConfig(num_layers=1, hidden_dim=D, num_heads=2, intermediate_dim=12,
                                dropout=0.0, max_length=8)


def _translator(cls, config: ModelConfig, copy: bool = False):
    """A translator case: its inputs go as the call's one dict argument."""
    inputs = {"source": SOURCE, "target_in": TARGET_IN}
    if copy:
        inputs["source_copy"] = SOURCE_COPY
    width = V + S if copy else V
    return (cls, {"config": config, "source_vocab_size": 11, "target_vocab_size": V},
            (inputs,), (B, T, width))


def _block(cls, inputs, shape, **sizes):
    init = {"hidden_dim": D, "num_heads": 2, "intermediate_dim": 12, "dropout": 0.0, **sizes}
    return cls, init, inputs, shape


def _features(batch_len):
    return np.random.default_rng(0).normal(size=(B, batch_len, D)).astype("float32")


CASES = {
    "bahdanau": _translator(BahdanauTranslator, ModelConfig(bahdanau=RECURRENT)),
    "bahdanau-lstm-general-feeding": _translator(
        BahdanauTranslator,
        ModelConfig(bahdanau=BahdanauConfig(embedding_dim=6, units=D, cell="lstm",
                                            score="general", input_feeding=True, dropout=0.0),
                    label_smoothing=0.1)),
    "bahdanau-local-copy": _translator(
        BahdanauTranslator,
        ModelConfig(bahdanau=BahdanauConfig(embedding_dim=6, units=D, attention_units=6,
                                            local="predictive", attention_window=1,
                                            dropout=0.0), copy=True),
        copy=True),
    "seq2seq-noattn": _translator(EncoderDecoderTranslator, ModelConfig(bahdanau=RECURRENT)),
    "transformer": _translator(TransformerTranslator, ModelConfig(transformer=TRANSFORMER)),
    "transformer-learned-postnorm-tied-copy": _translator(
        TransformerTranslator,
        ModelConfig(transformer=TransformerConfig(
            num_layers=2, hidden_dim=D, num_heads=2, intermediate_dim=12, dropout=0.0,
            positions="learned", max_length=8, norm_first=False, tie_embeddings=True,
            head_dim=3), copy=True),
        copy=True),
    "encoder-layer": _block(TransformerEncoderLayer, (_features(S), SOURCE_MASK), (B, S, D)),
    "encoder-layer-postnorm-wide-heads": _block(
        TransformerEncoderLayer, (_features(S), SOURCE_MASK), (B, S, D), norm_first=False,
        head_dim=5),
    "decoder-layer": _block(
        TransformerDecoderLayer, (_features(T), _features(S), TARGET_MASK, SOURCE_MASK),
        ((B, T, D), (B, 2, T, S))),
}


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_contract(case):
    cls, init_kwargs, inputs, shape = CASES[case]
    run_layer_test(cls, init_kwargs, inputs, expected_output_shape=shape, atol=1e-5,
                   rtol=1e-5)


def test_translator_config_round_trips_through_its_dataclass():
    """`get_config` stores the `ModelConfig`'s dict and `from_config` rebuilds the dataclass;
    a sizes dataclass alone, a dict and a `ModelConfig` build the same model."""
    config = ModelConfig(arch="bahdanau", bahdanau=RECURRENT, label_smoothing=0.2)
    model = BahdanauTranslator(config, 11, V)
    assert model.get_config()["config"]["bahdanau"]["units"] == D
    revived = BahdanauTranslator.from_config(model.get_config())
    assert revived.model_config == config
    assert BahdanauTranslator(RECURRENT, 11, V).model_config == ModelConfig(
        arch="bahdanau", bahdanau=RECURRENT)
    as_dict = {"bahdanau": {"units": D}, "label_smoothing": 0.2}
    assert BahdanauTranslator(as_dict, 11, V).model_config.bahdanau.units == D
    assert (model.units, model.label_smoothing, model.copy) == (D, 0.2, False)


# Abstract bases, checked through their subclasses above.
ABSTRACT = {"Translator", "RecurrentTranslator"}


def test_every_layer_class_is_checked():
    checked = {cls for cls, *_ in CASES.values()}
    missing = {cls.__name__ for cls in layer_classes(seq2seq) - checked} - ABSTRACT
    assert not missing, f"layers without a run_layer_test case: {sorted(missing)}"
