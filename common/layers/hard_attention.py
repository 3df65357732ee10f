"""Stochastic ("hard") attention: pick one key by sampling, trained with REINFORCE.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `Dq` query features,
`Dk` key features, `Dv` value features.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from common.layers.attention import BaseAttention, _as_sequence
from common.layers.masking import masked_log_softmax


@keras.saving.register_keras_serializable(package="common")
class HardAttention(BaseAttention):
    """Hard attention: the context is the value at one key, sampled from the attention weights.

    From the "hard" stochastic attention of "Show, Attend and Tell: Neural Image Caption
    Generation with Visual Attention" (Xu et al., 2015). The location is sampled from the
    softmax of the scores when `sample` is true (by default, when training) and is the argmax
    otherwise. `log_prob`, the log-probability of the chosen location, is differentiable with
    respect to the score's weights, for a REINFORCE loss `-reward * log_prob`. Padded keys are
    never chosen; a row whose keys are all padding gets index 0, a zero context, zero weights
    and `log_prob` 0.

    Args:
        score: name of the attention score in `common.layers.SCORES`.
        seed: seed of the layer's `keras.random.SeedGenerator`.
        **kwargs: the score's arguments (`units=`, `max_positions=`, ...) and base layer
            arguments (`name`, `dtype`, ...).

    Call arguments:
        query, value, key, mask: as `common.layers.attention.BaseAttention`.
        training: Keras training flag; the default for `sample`.
        sample: sample the location (true) or take the argmax (false); a bool or a scalar
            bool tensor. Defaults to `training`.

    Returns:
        context: `(B, T, Dv)`, the value at the chosen index.
        index: `(B, T)` int32, the chosen key.
        log_prob: `(B, T)` float32, log-probability of the chosen key.
        weights: `(B, T, S)`, the attention distribution sampled from.
        (With a `(B, Dq)` query the `T` axis is dropped from every output.)

    Example:
    >>> attention = HardAttention("additive", units=16, seed=1)
    >>> context, index, log_prob, weights = attention(
    ...     np.ones((2, 3, 8)), np.ones((2, 5, 4)), training=True)
    >>> context.shape, index.shape, log_prob.shape, weights.shape
    ((2, 3, 4), (2, 3), (2, 3), (2, 3, 5))
    """

    def __init__(self, score: str = "additive", seed: int | None = None, **kwargs):
        super().__init__(score=score, **kwargs)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed, name="seed_generator")

    def call(self, query, value, key=None, mask=None, training=None, sample=None):
        projected_keys = self.project_keys(value if key is None else key)
        return self.attend(query, projected_keys, value, mask, training=training, sample=sample)

    def attend(self, query, projected_keys, value, mask=None, training=None, sample=None,
               query_projected=False):
        """Attends with keys from `project_keys`; returns `(context, index, log_prob, weights)`.
        `query_projected`: the query is already multiplied by the score's `query_kernel`."""
        query, single_step = _as_sequence(query)
        logits, mask, weights = self._weights(query, projected_keys, mask, query_projected)
        log_weights = masked_log_softmax(logits, mask)  # (B, T, S), masked keys ~ -1e9
        num_keys = ops.shape(log_weights)[-1]
        greedy = ops.cast(ops.argmax(log_weights, axis=-1), "int32")
        if sample is None:
            sample = False if training is None else training
        if isinstance(sample, (bool, np.bool_)):
            sample = bool(sample)
        if sample is False:
            index = greedy
        else:
            draws = keras.random.categorical(
                ops.reshape(log_weights, (-1, num_keys)),
                1,
                dtype="int32",
                seed=self.seed_generator,
            )
            sampled = ops.reshape(draws, ops.shape(greedy))
            index = sampled if sample is True else ops.where(sample, sampled, greedy)
        one_hot = ops.one_hot(index, num_keys, dtype="float32")  # (B, T, S)
        if mask is not None:
            # Rows with no real key: index 0, and everything else zero.
            has_key = ops.any(ops.broadcast_to(mask, ops.shape(log_weights)), axis=-1)
            index = ops.where(has_key, index, ops.zeros_like(index))
            one_hot = one_hot * ops.cast(ops.expand_dims(has_key, -1), "float32")
        log_prob = ops.sum(one_hot * log_weights, axis=-1)  # (B, T)
        context = ops.matmul(ops.cast(one_hot, value.dtype), value)  # (B, T, Dv)
        weights = ops.cast(weights, value.dtype)
        if single_step:
            return tuple(ops.squeeze(x, 1) for x in (context, index, log_prob, weights))
        return context, index, log_prob, weights

    def get_config(self):
        config = super().get_config()
        config.update({"seed": self.seed})
        return config
