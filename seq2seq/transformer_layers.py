"""The Transformer's encoder and decoder layers, and its learning-rate schedule.

Paper: Vaswani et al., "Attention Is All You Need", NeurIPS 2017
(https://arxiv.org/abs/1706.03762). Pre-layer-norm as in Xiong et al., "On Layer
Normalization in the Transformer Architecture", 2020.

Dimensions: `B` batch, `S` source steps, `T` target steps, `D` model width, `H` heads,
`T_max` the length of a decoding cache.

Both layers use `common.layers.MultiHeadAttention`, which returns the attention weights per
head `(B, H, T, S)`. The decoder layer's decoding step (`call_step`) keeps the keys and values
of each attention in a keras-hub style cache `(B, 2, S_max, H, K)`, `K` the head size (`D / H`
unless `head_dim` says otherwise).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from common.layers.dropout import Dropout
from common.layers.layer_norm import LayerNormalization, normalize
from common.layers.multi_head_attention import MultiHeadAttention
from common.layers.quantized_weights import float_kernel

# The `__init__` arguments of both layers (and the fields of `TransformerConfig` they take).
BLOCK_SIZES = ("hidden_dim", "num_heads", "intermediate_dim", "dropout", "norm_first", "head_dim",
               "attention_dropout", "activation_dropout", "fused_projections")


class _Block(keras.layers.Layer):
    """What the encoder and decoder layers share: sizes, the attention sub-layers and their
    norms (one of each per name in `attentions`), the feed-forward block."""

    # The attention sub-layers, each `NAME` with its `NAME_norm`, created in this order.
    attentions: tuple[str, ...] = ()

    def __init__(
        self,
        hidden_dim: int,
        num_heads: int,
        intermediate_dim: int,
        dropout: float = 0.1,
        norm_first: bool = True,
        head_dim: int | None = None,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
        fused_projections: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.norm_first = norm_first
        self.head_dim = head_dim
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.fused_projections = fused_projections
        self.key_dim = head_dim or hidden_dim // num_heads
        weights_rate = dropout if attention_dropout is None else attention_dropout
        # Sub-layers compute in this layer's dtype policy (mixed precision included).
        policy = {"dtype": self.dtype_policy}
        self.ffn_inner = keras.layers.Dense(intermediate_dim, activation="relu", name="ffn_inner",
                                            **policy)
        self.ffn_outer = keras.layers.Dense(hidden_dim, name="ffn_outer", **policy)
        self.ffn_norm = LayerNormalization(epsilon=1e-5, name="ffn_norm", **policy)
        self.drop = Dropout(dropout, **policy)
        # The attention weights' and the feed-forward activations' dropout: `drop` when their
        # rate is `dropout` (the default, so the layers and checkpoints of runs from before
        # these options), a layer of their own when it differs, none at 0.
        self.activation_rate = dropout if activation_dropout is None else activation_dropout
        self.weights_drop = self._own_dropout(weights_rate, "weights_drop")
        self.ffn_drop = self._own_dropout(self.activation_rate, "ffn_drop")
        for name in self.attentions:
            setattr(self, name, MultiHeadAttention(num_heads=num_heads, key_dim=self.key_dim,
                                                   dropout=weights_rate,
                                                   fused_projections=fused_projections,
                                                   name=name, **policy))
            setattr(self, f"{name}_norm", LayerNormalization(
                epsilon=1e-5, name=f"{name}_norm", **policy))

    def _own_dropout(self, rate: float, name: str) -> Dropout | None:
        """A dropout layer of `rate` where it is neither `dropout` (`drop` serves) nor 0."""
        if rate == self.dropout or rate == 0:
            return None
        return Dropout(rate, name=name, dtype=self.dtype_policy)

    def _residual(self, x, norm, fn, training):
        """`x + f(norm(x))` (pre-norm) or `norm(x + f(x))` (post-norm); returns (x, extras)."""
        h = norm(x) if self.norm_first else x
        out, *extras = fn(h)
        x = x + self.drop(out, training=training)
        if not self.norm_first:
            x = norm(x)
        return x, extras

    def _weights_dropout(self, weights):
        """The attention weights' dropout (`MultiHeadAttention`'s `weights_dropout`): this
        block's `drop` (or `weights_drop` where `attention_dropout` differs), so that the
        attention's fused projections (when turned on) run when training too."""
        return (self.weights_drop or self.drop)(weights, training=True)

    def _feed_forward(self, x, training):
        def inner(h):
            h = self.ffn_inner(h)
            if self.activation_rate > 0:
                h = (self.ffn_drop or self.drop)(h, training=training)
            return (self.ffn_outer(h),)

        x, _ = self._residual(x, self.ffn_norm, inner, training)
        return x

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in BLOCK_SIZES})
        return config


@keras.saving.register_keras_serializable(package="seq2seq")
class TransformerEncoderLayer(_Block):
    """Self-attention over the source, then a feed-forward block, each with a residual.

    Args:
        hidden_dim: model width `D`.
        num_heads: heads `H`; `D` must be a multiple of it.
        intermediate_dim: feed-forward width.
        dropout: dropout rate.
        norm_first: pre-layer-norm (True) or post-layer-norm (False).
        head_dim: each head's query/key/value size `K` (None: `D / H`).
        attention_dropout: dropout rate of the attention weights (None: `dropout`).
        activation_dropout: dropout rate of the feed-forward activations (None: `dropout`).
        fused_projections: each attention's projections as `(B x T)`-row products, the
            self-attention's query, key and value in one (`MultiHeadAttention`).

    Call arguments:
        x: `(B, S, D)`.
        padding_mask: `(B, S)` bool, True for real tokens.
        training: whether dropout is on.

    Returns:
        `(B, S, D)`.

    Example:
    >>> layer = TransformerEncoderLayer(8, 2, 16)
    >>> tuple(layer(ops.zeros((2, 5, 8)), ops.ones((2, 5), "bool")).shape)
    (2, 5, 8)
    """

    attentions = ("self_attention",)

    def call(self, x, padding_mask=None, training=None):
        x, _ = self._residual(
            x, self.self_attention_norm,
            lambda h: self.self_attention(h, h, mask=padding_mask, training=training,
                                          weights_dropout=self._weights_dropout,
                                          return_weights=False),
            training,
        )
        return self._feed_forward(x, training)


@keras.saving.register_keras_serializable(package="seq2seq")
class TransformerDecoderLayer(_Block):
    """Causal self-attention, cross-attention over the encoder, then a feed-forward block.

    `call` runs the whole target at once (training, the reference for cached decoding);
    `call_step` runs one new step, over the weights of `step_weights`, with a self-attention
    key/value cache and a cross-attention cache made once per source by
    `cross_attention_cache`.

    Args:
        hidden_dim: model width `D`.
        num_heads: heads `H`.
        intermediate_dim: feed-forward width.
        dropout: dropout rate.
        norm_first: pre-layer-norm (True) or post-layer-norm (False).
        head_dim: each head's query/key/value size `K` (None: `D / H`).
        attention_dropout: dropout rate of the attention weights (None: `dropout`).
        activation_dropout: dropout rate of the feed-forward activations (None: `dropout`).
        fused_projections: each attention's projections as `(B x T)`-row products, the
            self-attention's query, key and value in one (`MultiHeadAttention`).

    Call arguments:
        x: `(B, T, D)` target states.
        memory: `(B, S, D)` encoder output.
        target_mask: `(B, T)` bool, True for real target tokens.
        source_mask: `(B, S)` bool, True for real source tokens.
        training: whether dropout is on.
        return_weights: False: the cross-attention weights are not needed (None), so that
            the attention may run fused (`MultiHeadAttention`).

    Returns:
        `(x (B, T, D), cross_weights (B, H, T, S) or None)`.

    Example:
    >>> layer = TransformerDecoderLayer(8, 2, 16)
    >>> y, w = layer(ops.zeros((2, 3, 8)), ops.zeros((2, 5, 8)))
    >>> tuple(w.shape)
    (2, 2, 3, 5)
    """

    attentions = ("self_attention", "cross_attention")

    def call(self, x, memory, target_mask=None, source_mask=None, training=None,
             return_weights=True):
        x, _ = self._residual(
            x, self.self_attention_norm,
            lambda h: self.self_attention(
                h, h, mask=target_mask, use_causal_mask=True, training=training,
                weights_dropout=self._weights_dropout, return_weights=False,
            ),
            training,
        )
        x, (weights,) = self._residual(
            x, self.cross_attention_norm,
            lambda h: self.cross_attention(h, memory, mask=source_mask, training=training,
                                           weights_dropout=self._weights_dropout,
                                           return_weights=return_weights),
            training,
        )
        return self._feed_forward(x, training), weights

    def cross_attention_cache(self, memory):
        """The cross-attention keys and values of `memory (B, S, D)`: two `(B, S, H, K)`."""
        keys, values = ops.unstack(self.cross_attention.compute_cache(memory), 2, axis=1)
        return keys, values

    def step_weights(self) -> dict:
        """This layer's weights as the tensors `call_step` reads, read and laid out once per
        decode, outside its loop: the self-attention's query, key and value kernels side by
        side `(D, 3 H K)` (and biases), the cross-attention's query kernel `(D, H K)`, the
        output kernels `(H K, D)`, the feed-forward kernels, all in the compute dtype (the
        products of a mixed-precision policy run in it, as in the layers' own calls), and the
        norms' scales and offsets as they are (the norms compute in float32). int8 kernels
        (`keras.Model.quantize`) are read as their float values
        (`common.layers.quantized_weights`; another quantization mode is refused there). The
        variables are unchanged (checkpoints too); only their values are read here."""
        self_attention, cross_attention = self.self_attention, self.cross_attention
        width = self.num_heads * self.key_dim
        dtype = self.compute_dtype

        # (Cast, not `convert_to_tensor`: on TensorFlow the latter hands back the variable,
        # which the loop would then read at every step.)
        def kernel(dense, rows):
            return ops.reshape(ops.cast(float_kernel(dense), dtype), (rows, -1))

        def bias(dense):
            return None if dense.bias is None else ops.reshape(ops.cast(dense.bias, dtype),
                                                               (-1,))

        qkv = (self_attention.query_dense, self_attention.key_dense, self_attention.value_dense)
        qkv_bias = [bias(d) for d in qkv]
        weights = {
            "qkv_kernel": ops.concatenate([kernel(d, self.hidden_dim) for d in qkv], axis=-1),
            "qkv_bias": (None if any(b is None for b in qkv_bias)
                         else ops.concatenate(qkv_bias, axis=0)),
            "self_out_kernel": kernel(self_attention.output_dense, width),
            "self_out_bias": bias(self_attention.output_dense),
            "cross_query_kernel": kernel(cross_attention.query_dense, self.hidden_dim),
            "cross_query_bias": bias(cross_attention.query_dense),
            "cross_out_kernel": kernel(cross_attention.output_dense, width),
            "cross_out_bias": bias(cross_attention.output_dense),
            "ffn_inner_kernel": kernel(self.ffn_inner, self.hidden_dim),
            "ffn_inner_bias": bias(self.ffn_inner),
            "ffn_outer_kernel": kernel(self.ffn_outer, self.intermediate_dim),
            "ffn_outer_bias": bias(self.ffn_outer),
        }
        for name in ("self_attention_norm", "cross_attention_norm", "ffn_norm"):
            norm = getattr(self, name)
            weights[f"{name}_gamma"] = ops.cast(norm.gamma, norm.gamma.dtype)
            weights[f"{name}_beta"] = ops.cast(norm.beta, norm.beta.dtype)
        return weights

    def call_step(self, x, self_cache, cross_cache, index, visible, source_visible, weights,
                  growing=False):
        """One decoding step (no dropout), for the decoding loop: the same computation as
        `call` at that position (tested against it), as few graph ops as it takes. One step
        as `(B, D)` rows, the new token's query, key and value as one product with
        `step_weights`, the key and value written into the cache with one update, the masks
        made once per step by the caller. The attention is taken over the cache in its
        `(B, S, H, K)` layout (products and sums over `K`, softmax over `S` written out),
        without the transposes of a batched matrix product or a softmax over a middle axis,
        which copy the cache at every step. The products run in the compute dtype; the
        softmax and the norms in float32 (for a half-precision policy: as Keras computes its
        layer norm, and the attention weights returned in float32).

        The self-attention cache is a buffer of `T_max` positions written in place, or, with
        `growing`, the keys and values of the positions so far, one longer after each step:
        a step then attends over `index + 1` positions, not `T_max`, and neither writes nor
        (in beam search) reorders the positions not yet decoded. A growing cache changes
        shape from step to step: TensorFlow's graphs take it (`common.decoding.loop`), XLA and
        JAX do not.

        Args:
            x: `(B, D)` the new target position.
            self_cache: `(keys, values)`, each `(B, T_max, H, K)` (`(B, index, H, K)` with
                `growing`), of the earlier positions.
            cross_cache: `(keys, values)`, each `(B, S, H, K)`, from `cross_attention_cache`.
            index: scalar int32, the position of `x`.
            visible: `(1, T_max, 1)` bool, the cache positions `<= index` (None with
                `growing`: every position is).
            source_visible: `(B, S, 1)` bool, the real source tokens.
            weights: this layer's `step_weights()`.
            growing: whether `self_cache` grows (above).

        Returns:
            `(x (B, D), new self_cache, cross_weights (B, H, S) float32)`.
        """
        heads, key_dim = self.num_heads, self.key_dim
        scale = 1.0 / math.sqrt(key_dim)

        def dense(h, name):
            y = ops.matmul(h, weights[f"{name}_kernel"])
            b = weights[f"{name}_bias"]
            return y if b is None else y + b

        def residual(x, name, fn):
            norm = (weights[f"{name}_gamma"], weights[f"{name}_beta"],
                    getattr(self, name).epsilon)
            h = normalize(x, *norm) if self.norm_first else x
            x = x + fn(h)
            return x if self.norm_first else normalize(x, *norm)

        def attend(query, keys, values, allowed, name):
            """`MultiHeadAttention._attend` for one query `(B, H, K)` over `(B, S, H, K)`
            keys and values: -> `(output (B, D), weights (B, S, H); (B, H, S) for cross)`."""
            logits = ops.cast(ops.sum(keys * (query * scale)[:, None], axis=-1), "float32")
            if allowed is not None:  # (B, S, H)
                logits = ops.where(allowed, logits, -1e9)
            exp = ops.exp(logits - ops.max(logits, axis=1, keepdims=True))
            probs = exp / ops.sum(exp, axis=1, keepdims=True)
            if name == "cross":  # a row of no real source token gets zero weights
                probs = ops.where(allowed, probs, 0.0)
            # (The causal row always sees its own position: its masked weights are exactly 0.)
            context = ops.sum(values * ops.cast(probs, values.dtype)[..., None], axis=1)
            probs = ops.transpose(probs, (0, 2, 1)) if name == "cross" else probs
            return dense(ops.reshape(context, (-1, heads * key_dim)), f"{name}_out"), probs

        new_cache = []

        def self_attend(h):
            qkv = ops.reshape(dense(h, "qkv"), (-1, 3, heads, key_dim))
            key, value = qkv[:, 1:2], qkv[:, 2:3]  # (B, 1, H, K)
            if growing:
                keys, values = (ops.concatenate([self_cache[0], key], axis=1),
                                ops.concatenate([self_cache[1], value], axis=1))
            else:
                keys, values = (ops.slice_update(self_cache[0], [0, index, 0, 0], key),
                                ops.slice_update(self_cache[1], [0, index, 0, 0], value))
            new_cache.append((keys, values))
            return attend(qkv[:, 0], keys, values, None if growing else visible, "self")[0]

        cross_weights = []

        def cross_attend(h):
            query = ops.reshape(dense(h, "cross_query"), (-1, heads, key_dim))
            keys, values = cross_cache
            out, probs = attend(query, keys, values, source_visible, "cross")
            cross_weights.append(probs)
            return out

        x = residual(x, "self_attention_norm", self_attend)
        x = residual(x, "cross_attention_norm", cross_attend)
        x = residual(x, "ffn_norm", lambda h: dense(
            ops.relu(dense(h, "ffn_inner")), "ffn_outer"))
        return x, new_cache[0], cross_weights[0]


@keras.saving.register_keras_serializable(package="seq2seq")
class InverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak_learning_rate`, then decay as the inverse square root of step.

    `lr(step) = peak * min(s / warmup, sqrt(warmup / s))` with `s = step + 1`: the schedule of
    Vaswani et al. (2017), parametrized by its peak instead of the model width.

    Args:
        peak_learning_rate: the learning rate reached at the end of warm-up.
        warmup_steps: warm-up length in optimizer steps.

    Example:
    >>> schedule = InverseSqrtSchedule(1e-3, warmup_steps=100)
    >>> round(float(schedule(99)), 6), round(float(schedule(399)), 6)
    (0.001, 0.0005)
    """

    def __init__(self, peak_learning_rate: float, warmup_steps: int = 4000):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        s = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        return self.peak_learning_rate * ops.minimum(s / warmup, ops.sqrt(warmup / s))

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps}
