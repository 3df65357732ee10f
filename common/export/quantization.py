"""int8 weights in a SavedModel, through Keras's own quantization (`keras.Model.quantize`).

`export --quantization int8` (both families) calls `quantize_model(model, "int8")` once the
run's weights are restored and before the export traces its signatures, so the SavedModel holds
what Keras's int8 layers hold and computes what they compute. The weights only are quantized
(`Int8QuantizationConfig(activation_quantizer=None)`): TensorFlow's CPU kernel for an int8 by
int8 product is several times slower than its float32 one, so Keras's default (inputs quantized
too, int8 products) decoded 3-5 times slower; weights only, a layer multiplies its float32
input by its int8 kernel cast to float32 and divides by the scale.

- every `Dense` and `EinsumDense` kernel as int8 `(in..., out...)` with a float32 scale per
  output (`kernel_scale`); biases stay float32;
- every `Embedding` table as int8 with a float32 scale per row; a `ReversibleEmbedding` (the
  Transformer's target embedding and output projection) too. keras-hub's `ReversibleEmbedding`
  is Keras's with nothing overridden, which Keras's own type check does not know, so it is
  quantized by its public `quantize` without that check (`type_check=False`); any other
  subclass that Keras does not quantize stays float.

Everything else stays float32: layer norms, positions, and what Keras has no int8 layer for
(recurrent cells: the captioner's `LSTMCell`, Bahdanau's `GRU`; convolutions: the captioner's
encoder). A model none of whose layers Keras quantizes is refused in one line.

The quantized model is for decoding (what an export traces). Code that reads a kernel whole
instead of calling its layer reads its float value (`common.layers.quantized_weights`: the
Transformer's decoding step, once per call), calls the layer when it is quantized (the
attention's fused projections), or is not traced by an export (the captioner's teacher-forced
pass).

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import argparse
import gc
import warnings
from collections.abc import Sequence
from typing import Any

from common.errors import UserError

#: The weight types of a SavedModel export (`--quantization`): as trained, or Keras's int8.
SAVEDMODEL_QUANTIZATIONS = ("float32", "int8")
DEFAULT = "float32"


def add_quantization_argument(p: argparse.ArgumentParser,
                              choices: Sequence[str] = SAVEDMODEL_QUANTIZATIONS,
                              more_help: str = "") -> None:
    """`export --quantization TYPE`: the weights' type (None when not given: float32)."""
    p.add_argument("--quantization", choices=tuple(choices), default=None,
                   help="the weights' type: float32 (the default, as trained) or int8 (Keras's "
                        "`model.quantize`: the Dense, EinsumDense and Embedding kernels in one "
                        "byte with a float32 scale per output; docs/serving.md)" + more_help)


def check_quantization(mode: str | None, hint: str = "") -> str:
    """`mode` (None: float32) if a SavedModel takes it, else a one-line `UserError` (ending
    with `hint`)."""
    mode = mode or DEFAULT
    if mode not in SAVEDMODEL_QUANTIZATIONS:
        raise UserError(f"--quantization {mode}: a SavedModel takes "
                        f"{' or '.join(SAVEDMODEL_QUANTIZATIONS)}{hint}")
    return mode


def quantized_layers(model: Any) -> list[str]:
    """The paths of the layers of `model` that hold int8 weights, sorted (read from its
    weights, so what an export saves; none for no model, None)."""
    weights = [] if model is None else model.weights
    return sorted({weight.path.rsplit("/", 1)[0] for weight in weights
                   if weight.dtype == "int8"})


def summary(model: Any) -> dict[str, Any]:
    """What `export_info.json` records of the weights' type: `quantization` (float32, or
    int8 where any layer holds int8 weights) and `quantized_layers` (their paths)."""
    layers = quantized_layers(model)
    return {"quantization": "int8" if layers else DEFAULT, "quantized_layers": layers}


def quantize_model(model: Any, mode: str | None) -> list[str]:
    """Quantizes `model`'s weights to int8 in place with Keras (`keras.Model.quantize`,
    weights only), keras-hub's `ReversibleEmbedding` included (module doc); nothing for
    float32.

    Args:
        model: a built Keras model with its weights restored.
        mode: `"int8"`, or `"float32"`/None for nothing.

    Returns:
        The paths of the layers quantized (empty for float32).

    Raises:
        UserError: another mode, or no layer Keras quantizes (nothing would be int8).
    """
    import keras

    mode = check_quantization(mode)
    if mode == DEFAULT:
        return []
    visited: list[Any] = []  # every layer, as `quantize` walks them (its filter sees each)

    def every_layer(layer: Any) -> bool:
        visited.append(layer)
        return True

    config = keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)  # weights only
    # Keras runs `gc.collect()` each time a layer drops its float kernel: over the whole heap
    # of a process that imported TensorFlow, 0.4 s a layer. Frozen, the objects that were
    # there before are not walked again (the float kernels are freed when they are unfrozen).
    gc.freeze()
    try:
        with warnings.catch_warnings():  # one per layer Keras has no int8 version of: expected
            warnings.filterwarnings("ignore", message=r".*does not have a `quantize` method")
            model.quantize(config=config, filters=every_layer)
        reversible = keras.layers.ReversibleEmbedding
        for layer in visited:
            if (isinstance(layer, reversible) and layer.quantization_mode is None
                    and type(layer).call is reversible.call
                    and type(layer).quantize is reversible.quantize):
                layer.quantize(mode, type_check=False, config=config)
    finally:
        gc.unfreeze()
    done = quantized_layers(model)
    if not done:
        raise UserError(f"--quantization {mode}: Keras quantizes none of this model's layers "
                        "(it has int8 Dense, EinsumDense and Embedding layers); export it in "
                        "float32")
    return done
