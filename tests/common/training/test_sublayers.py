"""`sublayers`: every layer under a layer through public Keras API, against the layers as built;
and no module of the packages reaches into Keras's or TensorFlow's private attributes."""

import ast
from pathlib import Path

import keras
import numpy as np
import pytest

from common.training.sublayers import sublayers

REPO = Path(__file__).resolve().parents[3]
# Private names the packages once used, which Keras and TensorFlow change between releases.
PRIVATE = {"_flatten_layers", "_seed_generators", "_handle_name"}


class Holder(keras.layers.Layer):
    """Sublayers in an attribute, a list and a dict, one of them held twice."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = keras.layers.Dense(2, name="first")
        self.blocks = [keras.layers.Dense(2, name=f"block{i}") for i in range(2)]
        self.named = {"norm": keras.layers.LayerNormalization(name="norm")}
        self.again = self.first

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return self.named["norm"](self.first(x))


class Outer(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.holder = Holder(name="holder")
        inputs = keras.Input((2,))
        self.inner = keras.Model(inputs, keras.layers.Dense(2, name="inner_dense")(inputs),
                                 name="inner")

    def call(self, x):
        return self.inner(self.holder(x))


def test_every_layer_under_a_model_once_parents_first():
    model = Outer()
    model(np.zeros((1, 2), "float32"))
    names = [layer.name for layer in sublayers(model)]
    inner_input = model.inner.layers[0].name  # a functional model lists its input layer
    assert names == ["holder", "first", "block0", "block1", "norm", "inner", inner_input,
                     "inner_dense"]
    assert [layer.name for layer in sublayers(model.holder)] == ["first", "block0", "block1",
                                                                 "norm"]
    assert sublayers(keras.layers.Dense(2)) == []


def test_the_captioners_synchronized_batch_norm_is_found_and_no_translators():
    """Three levels down (model -> encoder layer -> functional backbone -> batch norm): what
    makes the distributed step leave its forward pass uncompiled."""
    from captioner.config import DecoderConfig, EncoderConfig
    from captioner.model import ShowAttendTell
    from common.training.step import _all_reduces_in_forward
    from seq2seq.config import ModelConfig, TransformerConfig
    from seq2seq.models import build_model

    captioner = ShowAttendTell(13, EncoderConfig("small-cnn", (16, 16), "none", filters=(4,)),
                               DecoderConfig(embedding_dim=8, units=8, attention_units=8))
    assert [layer.name for layer in sublayers(captioner)
            if getattr(layer, "synchronized", False)] == ["bn1"]
    assert _all_reduces_in_forward(captioner)
    translator = build_model(ModelConfig(transformer=TransformerConfig(
        num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16, max_length=16)), 20, 30)
    assert not _all_reduces_in_forward(translator)


@pytest.mark.parametrize("package", ["common", "captioner", "seq2seq"])
def test_no_module_reaches_into_keras_or_tensorflow_internals(package):
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else (
                node.value if isinstance(node, ast.Constant) else None)
            if name in PRIVATE:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert found == []
