"""Additive (Bahdanau) attention score: `score(s, h) = vᵀ tanh(W_q s + W_k h + b)`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `Dq` query features, `Dk` key
features, `U` attention units.
"""

from __future__ import annotations

import numbers

import keras
from keras import ops

from common.errors import UserError
from common.layers.score import SCORES, Score


@SCORES.register("additive")
@keras.saving.register_keras_serializable(package="common")
class AdditiveScore(Score):
    """Additive score `vᵀ tanh(W_q s + W_k h + b)` (= `vᵀ tanh(W [s; h] + b)`).

    From "Neural Machine Translation by Jointly Learning to Align and Translate" (Bahdanau,
    Cho and Bengio, 2015), also the `f_att` of "Show, Attend and Tell" (Xu et al., 2015).
    `W_k h + b` depends only on the keys, so `project_keys` computes it once per source.

    Args:
        units: `U`, the size of the hidden layer inside the tanh.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments and returns: those of `common.layers.score.Score`.

    Example:
    >>> score = AdditiveScore(units=16)
    >>> score(np.ones((2, 3, 8)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(units, numbers.Integral) or isinstance(units, bool) or units < 1:
            raise UserError(f"additive score units must be a positive integer, got {units!r}")
        self.units = int(units)
        self.query_dense = keras.layers.Dense(
            self.units, use_bias=False, dtype=self.dtype_policy, name="query_dense"
        )
        self.key_dense = keras.layers.Dense(self.units, dtype=self.dtype_policy, name="key_dense")
        self.energy_dense = keras.layers.Dense(
            1, use_bias=False, dtype=self.dtype_policy, name="energy_dense"
        )

    def build(self, query_shape, keys_shape):
        if not self.query_dense.built:
            self.query_dense.build(query_shape)
        if not self.key_dense.built:
            self.key_dense.build(keys_shape)
        if not self.energy_dense.built:
            self.energy_dense.build((None, self.units))
        self.built = True

    def project_keys(self, keys):
        """`(B, S, Dk)` keys -> `(B, S, U)` = `W_k h + b`."""
        return self.key_dense(keys)

    def score(self, query, projected_keys):
        if not self.built:
            self.build(tuple(query.shape), tuple(projected_keys.shape))
        return self.score_projected(self.query_dense(query), projected_keys)

    @property
    def query_kernel(self):
        """`W_q`, `(Dq, U)`."""
        return self.query_dense.kernel

    def score_projected(self, projected_query, projected_keys):
        """Logits `(B, T, S)` from `W_q s` `(B, T, U)` and `W_k h + b` `(B, S, U)`."""
        hidden = ops.tanh(ops.expand_dims(projected_query, -2)
                          + ops.expand_dims(projected_keys, -3))
        return ops.squeeze(self.energy_dense(hidden), -1)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config
