"""Training FLOPs counted from the model's sizes, and model-FLOPs utilization (MFU).

MFU = (the model's training FLOPs per step × steps per second) / the device's peak FLOP/s.
Only the model's own arithmetic counts: matrix products and convolutions, each
multiply-add as 2 FLOPs; softmax, normalization, activations, embedding look-ups and the
optimizer update are left out (a few percent), and recomputation or padding the
implementation adds is not counted (that is what "model" FLOPs means, as in PaLM's MFU).
Training is 3 × the forward pass: the backward pass costs twice the forward (the gradients
with respect to the inputs and to the weights), except for a frozen part, which runs forward
only.

Transformer (Vaswani et al. 2017; `N` encoder and decoder layers, width `D`, all heads
together `A = H·K` wide (`A = D` when each head is `D / H`), feed-forward `F`, target
vocabulary `V`, batch `B`, source and target lengths `S`, `T`):

    forward = 2 B [ S·N·(4DA + 2DF)                       encoder: Q, K, V, O; feed-forward
                  + T·N·(4DA + 2DA + 2DF) + S·N·2DA       decoder: self Q,K,V,O; cross Q,O;
                                                          feed-forward; cross K,V on the source
                  + T·D·V ]                               output projection
            + 4 B A [ N·S² + N·(T² + T·S) ]               attention scores QKᵀ and weights·V
    training = 3 × forward

This is `6 × (weights in matrix products) × tokens` with each weight counted against the
tokens it sees, plus the attention terms; the causal mask's zeros are counted, as the dense
kernels compute them.

Show, Attend and Tell (Xu et al. 2015; `L` regions of `D` features, LSTM `U`, embedding `E`,
attention `A`, vocabulary `V`, `T` steps): per caption

    forward = 2 [ 2DU + LDA                               initial state; keys, once
                + T·(UA + LA + LD + U + 4U(E + D + U)     query, scores, context, gate, LSTM
                     + UE + DE + EV) ]                    deep output
            + the encoder's convolutions (2·H·W·k²·C_in·C_out each, from the layer shapes)

The decoder's part is × 3; the encoder's × 3 when it trains, × 1 when frozen, 0 when its
features are cached.

The TensorFlow tutorial's Transformer captioner (the peer of
`scripts/benchmarks/benchmark_training.py --model captioner --vs-peer`;
`tutorial_captioner_training_flops`) is counted from its layers'
kernels: per caption of `T` tokens over `S` image regions, each `MultiHeadAttention` costs
`T·(|W_q| + |W_o|) + Tₖ·(|W_k| + |W_v|) + 2·T·Tₖ·H·K` multiply-adds (`Tₖ = T` for the causal
self-attention, `S` for the cross-attention, whose keys and values are the 576-wide image
features; the causal mask's zeros counted, as the dense kernels compute them), each dense layer
`T·|W|`, and the output layer `T·D·V`; × 2 FLOPs, × 3 for training, as above.

`peak_tflops()` gives a device's dense bf16 peak from its name (NVIDIA's data sheets, without
sparsity) for the GPUs in `PEAK_TFLOPS`; other devices need `--peak-tflops`.
"""

from __future__ import annotations

from typing import Any

# Dense (no 2:4 sparsity) bf16 tensor-core peaks in TFLOP/s, from NVIDIA's data sheets (half
# their "with sparsity" figures; SXM unless named). Matched against the device name, first
# match wins, so a longer name comes before its prefix ("H100 PCIe" before "H100", "L40"
# before "L4").
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("V100", 125.0),  # float16 (V100 has no bf16)
    ("T4", 65.0),  # float16
)


def peak_tflops(device_name: str | None) -> float | None:
    """The dense bf16 peak of the GPU called `device_name` (e.g. "NVIDIA H100 80GB HBM3"),
    or None when it is not in `PEAK_TFLOPS`.

    Example:
    >>> peak_tflops("NVIDIA H100 80GB HBM3")
    989.0
    >>> peak_tflops("cpu") is None
    True
    """
    if not device_name:
        return None
    for key, value in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return value
    return None


def gpu_name() -> str | None:
    """The first GPU's name as TensorFlow reports it, or None without a GPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    try:
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name")
    except (ValueError, RuntimeError):
        return None


def transformer_training_flops(num_layers: int, hidden_dim: int, intermediate_dim: int,
                               target_vocab: int, batch: int, source_length: int,
                               target_length: int, attention_dim: int | None = None) -> float:
    """Training FLOPs of one step of the encoder-decoder Transformer (module docstring);
    `attention_dim` is `A = H·K`, all heads together (None: `hidden_dim`).

    Example:
    >>> transformer_training_flops(1, 4, 8, 10, batch=1, source_length=1, target_length=1)
    2304.0
    """
    n, d, f, v = num_layers, hidden_dim, intermediate_dim, target_vocab
    a = attention_dim or hidden_dim
    s, t = source_length, target_length
    matmul = (s * n * (4 * d * a + 2 * d * f) + t * n * (6 * d * a + 2 * d * f)
              + s * n * 2 * d * a + t * d * v)
    attention = 4 * a * (n * s * s + n * (t * t + t * s))
    return 3.0 * batch * (2 * matmul + attention)


def conv_forward_flops(model: Any) -> float:
    """Forward FLOPs of the convolutions and dense layers of a built functional Keras model,
    from each layer's output shape: `2·H·W·kh·kw·C_in·C_out` per convolution (depthwise:
    `2·H·W·kh·kw·C`), `2·C_in·C_out` per position for dense layers."""
    import keras

    from common.training.sublayers import sublayers

    total = 0.0
    for layer in sublayers(model):
        if not layer.built or not hasattr(layer, "output"):
            continue
        try:
            shape = layer.output.shape
        except (AttributeError, ValueError):
            continue
        positions = 1
        for size in shape[1:-1]:
            positions *= int(size or 1)
        kernel = getattr(layer, "kernel", None)
        if kernel is None:
            continue
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            kh, kw, channels, multiplier = kernel.shape
            total += 2.0 * positions * kh * kw * channels * multiplier
        elif isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            fan = 1
            for size in kernel.shape[:-1]:
                fan *= int(size)
            total += 2.0 * positions * fan * int(kernel.shape[-1])
    return total


def captioner_training_flops(model: Any, batch: int, steps: int, features_cached: bool
                             ) -> float:
    """Training FLOPs of one step of a soft-attention `ShowAttendTell` on `batch` captions of
    `steps` tokens (module docstring)."""
    encoder, decoder = model.encoder, model.decoder
    regions, d = encoder.num_regions, encoder.feature_dim
    u, e = decoder.units, decoder.embedding_dim
    a, v = decoder.attention_units, decoder.vocab_size
    query = u + (e if decoder.query == "hidden+word" else 0)
    per_step = (query * a + regions * a + regions * d + u + 4 * u * (e + d + u)
                + u * e + d * e + e * v)
    decoder_forward = 2.0 * (2 * d * u + regions * d * a + steps * per_step)
    total = 3.0 * batch * decoder_forward
    if not features_cached:
        encoder_forward = conv_forward_flops(encoder.backbone)
        total += (1.0 if encoder.frozen else 3.0) * batch * encoder_forward
    return total


def _size(variable: Any) -> int:
    size = 1
    for dim in variable.shape:
        size *= int(dim)
    return size


def attention_forward_macs(layer: Any, query_length: int, key_length: int) -> float:
    """Multiply-adds of one `keras.layers.MultiHeadAttention` call on one example, from its
    kernels: projections of `query_length` queries and `key_length` keys and values, the
    output projection, and the scores and weighted sum (`2·Tq·Tk·H·K`)."""
    heads, key_dim = int(layer.num_heads), int(layer.key_dim)
    value_dim = int(layer.value_dim or key_dim)
    return (query_length * (_size(layer.query_dense.kernel) + _size(layer.output_dense.kernel))
            + key_length * (_size(layer.key_dense.kernel) + _size(layer.value_dense.kernel))
            + query_length * key_length * heads * (key_dim + value_dim))


def tutorial_captioner_training_flops(model: Any, batch: int, steps: int, regions: int
                                      ) -> float:
    """Training FLOPs of one step of the TensorFlow tutorial's captioner (`Captioner` of
    `../shared/peers/tf_captioning.py`) from cached features: its decoder layers'
    self-attention over `steps` tokens, cross-attention over `regions` image regions and
    feed-forward, and its output layer (module docstring)."""
    macs = 0.0
    for layer in model.decoder_layers:
        macs += attention_forward_macs(layer.self_attention.mha, steps, steps)
        macs += attention_forward_macs(layer.cross_attention.mha, steps, regions)
        for dense in layer.ff.seq.layers:
            if getattr(dense, "kernel", None) is not None:
                macs += steps * _size(dense.kernel)
    macs += steps * _size(model.output_layer.dense.kernel)
    return 3.0 * 2.0 * batch * macs


def mfu(flops_per_step: float | None, steps_per_second: float,
        peak_tflops_value: float | None) -> float | None:
    """Achieved FLOP/s over the peak: `flops_per_step × steps/s / (peak × 10¹²)`, or None
    when either the FLOPs or the peak is unknown."""
    if not flops_per_step or not peak_tflops_value:
        return None
    return flops_per_step * steps_per_second / (peak_tflops_value * 1e12)
