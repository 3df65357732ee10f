"""Location-based attention score (Luong et al., 2015): `score(s, ·) = (W s)[:S]`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `Dq` query features, `P` the
largest number of source positions.
"""

from __future__ import annotations

import numbers

import keras
from keras import ops

from common.errors import UserError
from common.layers.score import SCORES, Score


@SCORES.register("location")
@keras.saving.register_keras_serializable(package="common")
class LocationScore(Score):
    """Location score: logits computed from the query alone, `(W s + b)[:S]`.

    From "Effective Approaches to Attention-based Neural Machine Translation" (Luong, Pham
    and Manning, 2015), `a_t = softmax(W_a h_t)`. `W` has `max_positions` outputs; a source of
    `S` steps uses the first `S`. The keys' contents are ignored, only their number `S` is used.

    Args:
        max_positions: `P`, the longest source this score can attend over.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, Dq)` queries.
        keys: `(B, S, Dk)` keys, `S <= max_positions`.

    Returns:
        logits: `(B, T, S)`.

    Example:
    >>> LocationScore(max_positions=10)(np.ones((2, 3, 8)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def __init__(self, max_positions: int, **kwargs):
        super().__init__(**kwargs)
        if (
            not isinstance(max_positions, numbers.Integral)
            or isinstance(max_positions, bool)
            or max_positions < 1
        ):
            raise UserError(
                f"location score max_positions must be a positive integer, got {max_positions!r}"
            )
        self.max_positions = int(max_positions)
        self.position_dense = keras.layers.Dense(
            self.max_positions, dtype=self.dtype_policy, name="position_dense"
        )

    def build(self, query_shape, keys_shape):
        self._check_length(keys_shape[-2])
        if not self.position_dense.built:
            self.position_dense.build(query_shape)
        self.built = True

    def _check_length(self, source_length):
        if source_length is not None and source_length > self.max_positions:
            raise UserError(
                f"location score got a source of {source_length} steps, but was built for "
                f"at most max_positions={self.max_positions}"
            )

    def score(self, query, projected_keys):
        self._check_length(projected_keys.shape[-2])
        logits = self.position_dense(query)  # (B, T, P)
        if not self.built:
            self.built = True
        return logits[..., : ops.shape(projected_keys)[-2]]

    def get_config(self):
        config = super().get_config()
        config.update({"max_positions": self.max_positions})
        return config
