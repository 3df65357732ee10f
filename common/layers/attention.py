"""Soft attention over a set of keys with a chosen score.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `Dq` query features,
`Dk` key features, `Dv` value features.
"""

from __future__ import annotations

import inspect

import keras
from keras import ops

from common.errors import UserError
from common.layers.masking import expand_key_mask, masked_softmax
from common.layers.score import SCORES, Score

# Arguments of every layer (`name`, `dtype`, `trainable`, ...): never the score's own.
_LAYER_ARGUMENTS = set(inspect.signature(keras.layers.Layer.__init__).parameters) | {
    "input_shape",
    "input_dim",
    "batch_input_shape",
    "batch_shape",
    "batch_size",
}


def split_score_kwargs(score: str, kwargs: dict) -> tuple[type[Score], dict, dict]:
    """Splits `kwargs` into the score's own arguments and the remaining layer arguments.

    Returns:
        `(score_class, score_kwargs, layer_kwargs)`.

    Raises:
        UnknownNameError: `score` is not registered (the message lists the valid names).
        UserError: an argument the score does not take, or a required one missing.
    """
    score_class = SCORES.get(score)
    parameters = {
        name: p
        for name, p in inspect.signature(score_class.__init__).parameters.items()
        if name != "self"
        and name not in _LAYER_ARGUMENTS
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    unknown = sorted(set(kwargs) - set(parameters) - _LAYER_ARGUMENTS)
    if unknown:
        raise UserError(
            f"unknown argument(s) {', '.join(unknown)} for the {score!r} attention score; "
            f"it takes: {', '.join(parameters) or 'no arguments'}"
        )
    missing = [n for n, p in parameters.items() if p.default is p.empty and n not in kwargs]
    if missing:
        raise UserError(f"the {score!r} attention score needs {', '.join(missing)}")
    score_kwargs = {k: v for k, v in kwargs.items() if k in parameters}
    layer_kwargs = {k: v for k, v in kwargs.items() if k not in parameters}
    return score_class, score_kwargs, layer_kwargs


class BaseAttention(keras.layers.Layer):
    """What soft and hard attention share: the score sub-layer, key projection, masking.

    Call arguments (of every subclass, which may add its own):
        query: `(B, T, Dq)` queries, or `(B, Dq)` for a single step.
        value: `(B, S, Dv)` values.
        key: `(B, S, Dk)` keys; defaults to `value`.
        mask: `(B, S)` bool, true for real keys, false for padding; None means no padding.
            Implicit Keras masks (`_keras_mask`) are not read: pass `mask` explicitly.
    """

    def __init__(self, score: str = "additive", **kwargs):
        score_class, score_kwargs, layer_kwargs = split_score_kwargs(score, kwargs)
        super().__init__(**layer_kwargs)
        self.score_name = score
        self.score_kwargs = score_kwargs
        self.scorer = score_class(**score_kwargs, dtype=self.dtype_policy, name="score")

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        if not self.scorer.built:
            query_shape = tuple(query_shape)
            if len(query_shape) == 2:  # a single step (B, Dq)
                query_shape = (query_shape[0], 1, query_shape[1])
            self.scorer.build(query_shape, tuple(key_shape))
        self.built = True

    def project_keys(self, key):
        """`(B, S, Dk)` keys -> the score's projected keys; run once per source."""
        return self.scorer.project_keys(key)

    def _weights(self, query, projected_keys, mask, query_projected=False):
        """Logits `(B, T, S)`, the mask as a bool `(B, 1, S)` (or None), float32 weights."""
        if query_projected:
            logits = self.scorer.score_projected(query, projected_keys)
        else:
            logits = self.scorer.score(query, projected_keys)
        if mask is not None:
            mask = expand_key_mask(mask, len(logits.shape))
        return logits, mask, masked_softmax(logits, mask)

    def compute_mask(self, inputs, previous_mask=None):
        # `mask` is a key padding mask over S, not a mask of the outputs; none is propagated.
        return None

    def get_config(self):
        config = super().get_config()
        config.update({"score": self.score_name, **self.score_kwargs})
        return config


def soft_output_shape(query_shape, value_shape) -> tuple:
    """The shapes of soft attention's `(context, weights)`, for a `(B, T, Dq)` or a
    single-step `(B, Dq)` query."""
    steps = tuple(query_shape[1:-1])  # (T,) or ()
    return (query_shape[0], *steps, value_shape[-1]), (query_shape[0], *steps, value_shape[1])


def _as_sequence(query):
    """A `(B, Dq)` single-step query becomes `(B, 1, Dq)`; returns it and whether it was."""
    single_step = len(query.shape) == 2
    return (ops.expand_dims(query, 1) if single_step else query), single_step


@keras.saving.register_keras_serializable(package="common")
class Attention(BaseAttention):
    """Soft attention: a weighted average of the values, weighted by a softmax of scores.

    From "Neural Machine Translation by Jointly Learning to Align and Translate" (Bahdanau et
    al., 2015) and the "soft" attention of "Show, Attend and Tell" (Xu et al., 2015). The score
    is chosen by name from `common.layers.SCORES` (`additive`, `dot`, `scaled_dot`, `general`,
    `cosine`, `location`). Padded keys get exactly zero weight; a row whose keys are all
    padding gets zero weights and a zero context.

    A step-by-step decoder calls `project_keys(key)` once per source and then
    `attend(query, projected_keys, value, mask)` at each step; the outputs equal `call`'s.
    A query of shape `(B, Dq)` (one step) gives `context (B, Dv)` and `weights (B, S)`.

    Args:
        score: name of the attention score.
        **kwargs: the score's arguments (`units=` for `additive`, `max_positions=` for
            `location`, ...) and base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query, value, key, mask: as `BaseAttention`.

    Returns:
        context: `(B, T, Dv)` (`(B, Dv)` for a single-step query).
        weights: `(B, T, S)` attention weights (`(B, S)` for a single-step query).

    Example:
    >>> attention = Attention("additive", units=16)
    >>> context, weights = attention(np.ones((2, 3, 8)), np.ones((2, 5, 4)))
    >>> context.shape, weights.shape
    ((2, 3, 4), (2, 3, 5))
    """

    def call(self, query, value, key=None, mask=None):
        projected_keys = self.project_keys(value if key is None else key)
        return self.attend(query, projected_keys, value, mask)

    def attend(self, query, projected_keys, value, mask=None, query_projected=False):
        """Attends with keys already projected by `project_keys`; returns `(context, weights)`.
        `query_projected`: the query is already multiplied by the score's `query_kernel`."""
        query, single_step = _as_sequence(query)
        _, _, weights = self._weights(query, projected_keys, mask, query_projected)
        weights = ops.cast(weights, value.dtype)
        context = ops.matmul(weights, value)  # (B, T, Dv)
        if single_step:
            return ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return context, weights

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return soft_output_shape(query_shape, value_shape)
