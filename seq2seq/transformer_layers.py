"""The Transformer's encoder and decoder layers, and its learning-rate schedule.

Paper: Vaswani et al., "Attention Is All You Need", NeurIPS 2017
(https://arxiv.org/abs/1706.03762). Pre-layer-norm as in Xiong et al., "On Layer
Normalization in the Transformer Architecture", 2020.

Dimensions: `B` batch, `S` source steps, `T` target steps, `D` model width, `H` heads,
`T_max` the length of a decoding cache.

Both layers use `common.layers.MultiHeadAttention`, which returns the attention weights per
head `(B, H, T, S)` and takes a keras-hub style key/value cache `(B, 2, S_max, H, K)`, `K` the
head size (`D / H` unless `head_dim` says otherwise).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from common.layers.dropout import Dropout
from common.layers.layer_norm import LayerNormalization
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
    `call_cached` runs one new step with a self-attention key/value cache and a
    cross-attention cache made once per source by `cross_attention_cache`.

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
        """The cross-attention keys and values of `memory (B, S, D)`: `(B, 2, S, H, K)`."""
        return self.cross_attention.compute_cache(memory)

    def call_cached(self, x, self_cache, cross_cache, index, source_mask=None):
        """One decoding step (no dropout).

        Args:
            x: `(B, 1, D)` the new target position.
            self_cache: `(B, 2, T_max, H, K)` keys/values of the earlier positions.
            cross_cache: `(B, 2, S, H, K)` from `cross_attention_cache`.
            index: scalar int, the position of `x`.
            source_mask: `(B, S)` bool.

        Returns:
            `(x (B, 1, D), new self_cache, cross_weights (B, H, 1, S))`.
        """
        max_length = ops.shape(self_cache)[2]
        visible = ops.less_equal(ops.arange(max_length), index)  # (T_max,)
        visible = ops.broadcast_to(visible[None, None, :], (ops.shape(x)[0], 1, max_length))
        new_cache = []

        def self_attend(h):
            out, _, cache = self.self_attention(
                h, h, attention_mask=visible, cache=self_cache, cache_update_index=index
            )
            new_cache.append(cache)
            return (out,)

        x, _ = self._residual(x, self.self_attention_norm, self_attend, False)
        x, (weights, _) = self._residual(
            x, self.cross_attention_norm,
            lambda h: self.cross_attention(h, h, mask=source_mask, cache=cross_cache),
            False,
        )
        return self._feed_forward(x, False), new_cache[0], weights

    def step_weights(self) -> dict:
        """This layer's weights as the tensors `call_step` reads, read and laid out once per
        decode, outside its loop: the self-attention's query, key and value kernels side by
        side `(D, 3 H K)` (and biases), the cross-attention's query kernel `(D, H K)`, the
        output kernels `(H K, D)`, the feed-forward kernels and the norms' scales and offsets.
        The variables are unchanged (checkpoints too); only their values are read here."""
        import tensorflow as tf

        self_attention, cross_attention = self.self_attention, self.cross_attention
        width = self.num_heads * self.key_dim

        def kernel(dense, rows):  # an int8 kernel (`keras.Model.quantize`) as its float value
            return tf.reshape(float_kernel(dense), (rows, -1))

        def bias(dense):
            return None if dense.bias is None else tf.reshape(
                tf.convert_to_tensor(dense.bias), (-1,))

        qkv = (self_attention.query_dense, self_attention.key_dense, self_attention.value_dense)
        qkv_bias = [bias(d) for d in qkv]
        weights = {
            "qkv_kernel": tf.concat([kernel(d, self.hidden_dim) for d in qkv], axis=-1),
            "qkv_bias": None if None in qkv_bias else tf.concat(qkv_bias, axis=0),
            "self_out_kernel": kernel(self_attention.output_dense, width),
            "self_out_bias": bias(self_attention.output_dense),
            "cross_query_kernel": kernel(cross_attention.query_dense, self.hidden_dim),
            "cross_query_bias": bias(cross_attention.query_dense),
            "cross_out_kernel": kernel(cross_attention.output_dense, width),
            "cross_out_bias": bias(cross_attention.output_dense),
            "ffn_inner_kernel": float_kernel(self.ffn_inner),
            "ffn_inner_bias": bias(self.ffn_inner),
            "ffn_outer_kernel": float_kernel(self.ffn_outer),
            "ffn_outer_bias": bias(self.ffn_outer),
        }
        for name in ("self_attention_norm", "cross_attention_norm", "ffn_norm"):
            norm = getattr(self, name)
            weights[f"{name}_gamma"] = tf.convert_to_tensor(norm.gamma)
            weights[f"{name}_beta"] = tf.convert_to_tensor(norm.beta)
        return weights

    def step_supported(self) -> bool:
        """Whether `call_step` computes what `call_cached` does: float32, the sub-layers as
        this class builds them (no mixed-precision weights; int8 ones from `keras.Model.quantize`
        are read as their float values, `common.layers.quantized_weights`)."""
        layers = (self, self.self_attention, self.cross_attention, self.ffn_inner,
                  self.ffn_outer, self.self_attention_norm, self.cross_attention_norm,
                  self.ffn_norm,
                  # (an unbuilt attention has no projections yet, and nothing quantized)
                  *(getattr(attention, f"{name}_dense") for attention in (
                      self.self_attention, self.cross_attention) if attention.built
                    for name in ("query", "key", "value", "output")))
        return (all(layer.compute_dtype == "float32" and layer.variable_dtype == "float32"
                    and getattr(layer, "quantization_mode", None) in (None, "int8")
                    for layer in layers)
                and self.ffn_inner.activation is keras.activations.relu
                and all(not getattr(self, n).rms_scaling and getattr(self, n).center
                        and getattr(self, n).scale
                        for n in ("self_attention_norm", "cross_attention_norm", "ffn_norm")))

    def call_step(self, x, self_cache, cross_cache, index, visible, source_visible, weights):
        """`call_cached` in fewer graph ops, for the decoding loop (the same tokens; the
        logits equal to float rounding, tested): one step as `(B, D)` rows, the new token's
        query, key and value as one product with `step_weights`, the key and value written
        into the cache with one update, the masks made once per step by the caller. The
        attention is taken over the cache in its `(B, S, H, K)` layout (products and sums
        over `K`, softmax over `S` written out), without the transposes of a batched matrix
        product or a softmax over a middle axis, which copy the cache at every step.

        Args:
            x: `(B, D)` the new target position.
            self_cache: `(B, 2, T_max, H, K)` keys/values of the earlier positions.
            cross_cache: `(B, 2, S, H, K)` from `cross_attention_cache`.
            index: scalar int32, the position of `x`.
            visible: `(1, T_max, 1)` bool, the cache positions `<= index`.
            source_visible: `(B, S, 1)` bool, the real source tokens.
            weights: this layer's `step_weights()`.

        Returns:
            `(x (B, D), new self_cache, cross_weights (B, H, S))`.
        """
        import tensorflow as tf

        heads, key_dim = self.num_heads, self.key_dim
        scale = tf.constant(1.0 / math.sqrt(key_dim), x.dtype)
        epsilon = self.ffn_norm.epsilon

        def dense(h, name):
            y = tf.matmul(h, weights[f"{name}_kernel"])
            b = weights[f"{name}_bias"]
            return y if b is None else y + b

        def residual(x, name, fn):
            norm = (weights[f"{name}_gamma"], weights[f"{name}_beta"], epsilon)
            h = layer_norm(x, *norm) if self.norm_first else x
            x = x + fn(h)
            return x if self.norm_first else layer_norm(x, *norm)

        def attend(query, keys, values, allowed, name):
            """`MultiHeadAttention._attend` for one query `(B, H, K)` over `(B, S, H, K)`
            keys and values: -> `(output (B, D), weights (B, S, H); (B, H, S) for cross)`."""
            logits = tf.reduce_sum(keys * (query * scale)[:, None], axis=-1)  # (B, S, H)
            logits = tf.where(allowed, logits, tf.constant(-1e9, logits.dtype))
            exp = tf.exp(logits - tf.reduce_max(logits, axis=1, keepdims=True))
            probs = exp / tf.reduce_sum(exp, axis=1, keepdims=True)
            if name == "cross":  # a row of no real source token gets zero weights
                probs = tf.where(allowed, probs, tf.zeros_like(probs))
            # (The causal row always sees its own position: its masked weights are exactly 0.)
            context = tf.reduce_sum(values * probs[..., None], axis=1)
            probs = tf.transpose(probs, (0, 2, 1)) if name == "cross" else probs
            return dense(tf.reshape(context, (-1, heads * key_dim)), f"{name}_out"), probs

        new_cache = []

        def self_attend(h):
            qkv = tf.reshape(dense(h, "qkv"), (-1, 3, heads, key_dim))
            cache = ops.slice_update(self_cache, [0, 0, index, 0, 0], qkv[:, 1:, None])
            new_cache.append(cache)
            keys, values = tf.unstack(cache, axis=1)
            return attend(qkv[:, 0], keys, values, visible, "self")[0]

        cross_weights = []

        def cross_attend(h):
            query = tf.reshape(dense(h, "cross_query"), (-1, heads, key_dim))
            keys, values = tf.unstack(cross_cache, axis=1)
            out, probs = attend(query, keys, values, source_visible, "cross")
            cross_weights.append(probs)
            return out

        x = residual(x, "self_attention_norm", self_attend)
        x = residual(x, "cross_attention_norm", cross_attend)
        x = residual(x, "ffn_norm", lambda h: dense(
            tf.nn.relu(dense(h, "ffn_inner")), "ffn_outer"))
        return x, new_cache[0], cross_weights[0]


def layer_norm(x, gamma, beta, epsilon):
    """`keras.ops.layer_normalization` over the last axis of float32 `x`, the same operations
    in the same order (so the same values) without its reshapes of `gamma` and `beta` and its
    `stop_gradient`: for the decoding step, where every op costs."""
    import tensorflow as tf

    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * gamma
    return x * inv + (beta - mean * inv)


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
