"""`common.export.savedmodel.save` stores every weight once: the export's `variables/` holds one
value per weight of the model (float32 or int8), and nothing of Keras's variable wrappers."""

import numpy as np
import pytest
import tensorflow as tf

from captioner.cli import main as captioner_main
from captioner.export import CaptionerModule
from common.export import quantization, savedmodel
from seq2seq.cli import main as seq2seq_main
from seq2seq.export import TranslatorModule

# What a checkpoint holds besides the variables' values.
NOT_VALUES = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter")


def stored_values(export_dir) -> dict[str, np.ndarray]:
    """The values in the export's `variables/` (its checkpoint): key -> array."""
    reader = tf.train.load_checkpoint(str(export_dir / "variables" / "variables"))
    return {key: np.asarray(reader.get_tensor(key)) for key in reader.get_variable_to_shape_map()
            if not any(part in key for part in NOT_VALUES) and "OPTIMIZER_SLOT" not in key}


def assert_stored_once(export_dir, weights) -> None:
    stored = stored_values(export_dir)
    model = [np.asarray(w.numpy()) for w in weights]
    assert len(stored) == len(model), sorted(stored)
    assert sum(v.nbytes for v in stored.values()) == sum(w.nbytes for w in model)

    def kinds(arrays):  # (dtype, shape) of each, sorted: the same tensors, not only as many
        return sorted((a.dtype.str, a.shape) for a in arrays)

    assert kinds(stored.values()) == kinds(model)


class KerasInside(tf.Module):
    """A Keras model held by a tf.Module (as an export module holds its model)."""

    def __init__(self):
        import keras

        super().__init__()
        self.net = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(2)])
        self.net(np.zeros((1, 4), np.float32))
        self.offset = tf.Variable(0.5)  # a variable of the module's own, stored too

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": self.net(x) + self.offset}


def test_a_keras_model_in_a_module_is_stored_once(tmp_path):
    module = KerasInside()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = savedmodel.save(module, tmp_path / "k", {"serving_default": module.serve},
                          kind="test.keras")
    assert_stored_once(out, [*module.net.weights, module.offset])
    loaded = tf.saved_model.load(str(out))
    np.testing.assert_allclose(loaded.signatures["serving_default"](x=x)["y"].numpy(),
                               module.serve(x)["y"].numpy(), rtol=1e-6)
    assert not hasattr(module, "_export_variables")  # the caller's module is left as it was


def png(size: tuple[int, int]) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    return tf.io.encode_png(pixels).numpy()


@pytest.fixture(scope="module")
def translator_run(tmp_path_factory):
    """A dates Transformer of the `tiny` preset (3 steps): its weights, not its skill."""
    out = tmp_path_factory.mktemp("weights-once") / "translator"
    assert seq2seq_main(["train", "--dataset", "dates", "--arch", "transformer", "--preset",
                         "tiny", "--out", str(out), "--verbose", "0",
                         "--validation-examples", "0"]) == 0
    return out


@pytest.fixture(scope="module")
def captioner_run(tmp_path_factory):
    """A captioner of the `tiny` preset (3 steps): a model with seed generators (its dropout)
    and weights its decoding does not read."""
    out = tmp_path_factory.mktemp("weights-once") / "captioner"
    assert captioner_main(["train", "--preset", "tiny", "--out", str(out), "--verbose", "0",
                           "--validation-examples", "0"]) == 0
    return out


@pytest.mark.parametrize("family, mode", [("translator", "float32"), ("translator", "int8"),
                                          ("captioner", "float32")])
def test_an_export_stores_each_weight_once(family, mode, request, tmp_path):
    run_dir = request.getfixturevalue(f"{family}_run")
    module_class = TranslatorModule if family == "translator" else CaptionerModule
    # As `export_run` does, keeping the module to compare with.
    module = module_class.from_run_dir(run_dir, beam_sizes=(1, 2), default_beam_size=2)
    quantization.quantize_model(module.model, mode)
    out = module.save(tmp_path / "export")
    weights = module.model.weights
    assert any(w.dtype == "int8" for w in weights) == (mode == "int8")
    assert_stored_once(out, weights)
    if family == "translator":
        inputs = tf.constant(["March 3, 1999", "3/3/1999"])
    else:
        inputs = tf.constant([png(module.image_size)])
    loaded = tf.saved_model.load(str(out))
    got = loaded.signatures["serving_default"](**{module.INPUT: inputs})
    expected = module.serving_default(inputs)
    assert got[module.TEXT].numpy().tolist() == expected[module.TEXT].numpy().tolist()
    np.testing.assert_allclose(got["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5)
