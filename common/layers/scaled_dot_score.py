"""Scaled dot-product attention score (Vaswani et al., 2017): `score(s, h) = sᵀ h / √D`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `D` features.
"""

from __future__ import annotations

import keras
from keras import ops

from common.layers.dot_score import DotScore
from common.layers.score import SCORES


@SCORES.register("scaled_dot")
@keras.saving.register_keras_serializable(package="common")
class ScaledDotScore(DotScore):
    """Scaled dot-product score `sᵀ h / √D`, with no weights.

    From "Attention Is All You Need" (Vaswani et al., 2017): scaling by `1/√D` keeps the
    logits' variance near 1 whatever the key size.

    Arguments, call arguments and returns: those of `common.layers.dot_score.DotScore`.

    Example:
    >>> ScaledDotScore()(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def score(self, query, projected_keys):
        logits = super().score(query, projected_keys)
        key_dim = projected_keys.shape[-1]
        if key_dim is None:
            key_dim = ops.shape(projected_keys)[-1]
        return logits / ops.sqrt(ops.cast(key_dim, logits.dtype))
