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

import keras
from keras import ops

from common.layers.multi_head_attention import MultiHeadAttention

# The `__init__` arguments of both layers (and the fields of `TransformerConfig` they take).
BLOCK_SIZES = ("hidden_dim", "num_heads", "intermediate_dim", "dropout", "norm_first", "head_dim")


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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.norm_first = norm_first
        self.head_dim = head_dim
        self.key_dim = head_dim or hidden_dim // num_heads
        # Sub-layers compute in this layer's dtype policy (mixed precision included).
        policy = {"dtype": self.dtype_policy}
        self.ffn_inner = keras.layers.Dense(intermediate_dim, activation="relu", name="ffn_inner",
                                            **policy)
        self.ffn_outer = keras.layers.Dense(hidden_dim, name="ffn_outer", **policy)
        self.ffn_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="ffn_norm", **policy)
        self.drop = keras.layers.Dropout(dropout, **policy)
        for name in self.attentions:
            setattr(self, name, MultiHeadAttention(num_heads=num_heads, key_dim=self.key_dim,
                                                   dropout=dropout, name=name, **policy))
            setattr(self, f"{name}_norm", keras.layers.LayerNormalization(
                epsilon=1e-5, name=f"{name}_norm", **policy))

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
        block's `drop`, of the same rate, so that the attention's fused projections (when
        turned on) run when training too."""
        return self.drop(weights, training=True)

    def _feed_forward(self, x, training):
        x, _ = self._residual(
            x, self.ffn_norm,
            lambda h: (self.ffn_outer(self.drop(self.ffn_inner(h), training=training)),),
            training,
        )
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
                                          weights_dropout=self._weights_dropout),
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

    Call arguments:
        x: `(B, T, D)` target states.
        memory: `(B, S, D)` encoder output.
        target_mask: `(B, T)` bool, True for real target tokens.
        source_mask: `(B, S)` bool, True for real source tokens.
        training: whether dropout is on.

    Returns:
        `(x (B, T, D), cross_weights (B, H, T, S))`.

    Example:
    >>> layer = TransformerDecoderLayer(8, 2, 16)
    >>> y, w = layer(ops.zeros((2, 3, 8)), ops.zeros((2, 5, 8)))
    >>> tuple(w.shape)
    (2, 2, 3, 5)
    """

    attentions = ("self_attention", "cross_attention")

    def call(self, x, memory, target_mask=None, source_mask=None, training=None):
        x, _ = self._residual(
            x, self.self_attention_norm,
            lambda h: self.self_attention(
                h, h, mask=target_mask, use_causal_mask=True, training=training,
                weights_dropout=self._weights_dropout,
            ),
            training,
        )
        x, (weights,) = self._residual(
            x, self.cross_attention_norm,
            lambda h: self.cross_attention(h, memory, mask=source_mask, training=training,
                                           weights_dropout=self._weights_dropout),
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
