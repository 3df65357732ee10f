"""Dot-product attention score (Luong et al., 2015): `score(s, h) = sᵀ h`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `D` features.
"""

from __future__ import annotations

import keras
from keras import ops

from common.layers.score import SCORES, Score


@SCORES.register("dot")
@keras.saving.register_keras_serializable(package="common")
class DotScore(Score):
    """Dot-product score `sᵀ h`, with no weights.

    From "Effective Approaches to Attention-based Neural Machine Translation"
    (Luong, Pham and Manning, 2015), the `dot` score.

    Args:
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, D)` queries.
        keys: `(B, S, D)` keys, the same size `D` as the queries.

    Returns:
        logits: `(B, T, S)`.

    Example:
    >>> DotScore()(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def build(self, query_shape, keys_shape):
        self._check_same_size(query_shape, keys_shape)
        self.built = True

    def score(self, query, projected_keys):
        self._build_on_first_use(query, projected_keys)
        return ops.matmul(query, ops.swapaxes(projected_keys, -1, -2))
