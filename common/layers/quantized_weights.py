"""The float32 values of weights that Keras quantized to int8 (`keras.Model.quantize`).

Code that reads a layer's weights instead of calling it (a decoding step that lays out its
weights once per decode, outside its loop: `seq2seq.transformer_layers`) reads them through
these, so that the same code serves a float model and an int8 one. Keras keeps an int8 weight
`q` with a float32 scale `s` per output (absmax: `q = round(w * s)`) and its layers compute
`(x @ q) / s`; the value of the weight is `q / s`:

- `Dense`: `kernel (in, out)`, `kernel_scale (out,)`;
- `EinsumDense` (the attention's projections): `kernel (in..., out...)`, `kernel_scale` in the
  layout of the layer's output, its size that of the kernel's trailing (output) axes: the
  equations here (`abc,cde->abde`, `abcd,cde->abe`) put the output axes last, in the output's
  order;
- `Embedding`: `embeddings (V, D)`, `embeddings_scale (V,)` per row; a `ReversibleEmbedding`'s
  untied `reverse_embeddings (D, V)` with `reverse_embeddings_scale (V,)`.

A float layer's weights are returned as they are.
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops


def _mode(layer: Any) -> str | None:
    mode = layer.quantization_mode
    if mode not in (None, "int8"):
        raise ValueError(f"layer {layer.path!r} is quantized as {mode!r}; only int8 weights "
                         "are read back as float32")
    return mode


def float_kernel(layer: Any) -> Any:
    """A `Dense` or `EinsumDense` kernel as a float tensor, `(in..., out...)`."""
    kernel = ops.convert_to_tensor(layer.kernel)
    if _mode(layer) is None:
        return kernel
    scale = ops.convert_to_tensor(layer.kernel_scale)
    size, shape = math.prod(scale.shape), tuple(kernel.shape)
    trailing = next(k for k in range(len(shape) + 1) if math.prod(shape[k:]) == size)
    scale = ops.reshape(scale, (1,) * trailing + shape[trailing:])
    return ops.divide(ops.cast(kernel, scale.dtype), scale)


def float_embeddings(layer: Any) -> Any:
    """An `Embedding`'s table `(V, D)` as a float tensor."""
    table = ops.convert_to_tensor(layer.embeddings)
    if _mode(layer) is None:
        return table
    scale = ops.convert_to_tensor(layer.embeddings_scale)
    return ops.divide(ops.cast(table, scale.dtype), scale[:, None])


def float_reverse_embeddings(layer: Any) -> Any:
    """An untied `ReversibleEmbedding`'s output kernel `(D, V)` as a float tensor."""
    kernel = ops.convert_to_tensor(layer.reverse_embeddings)
    if _mode(layer) is None:
        return kernel
    scale = ops.convert_to_tensor(layer.reverse_embeddings_scale)
    return ops.divide(ops.cast(kernel, scale.dtype), scale[None, :])
