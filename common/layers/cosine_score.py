"""Cosine-similarity attention score (Graves et al., 2014): `score(s, h) = β cos(s, h)`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `D` features.
"""

from __future__ import annotations

import keras
from keras import ops

from common.layers.score import SCORES, Score


def _l2_normalize(x, epsilon: float):
    """`x / max(‖x‖, epsilon)` in float32; a zero vector maps to zero with a finite gradient."""
    x = ops.cast(x, "float32")
    squared = ops.sum(ops.square(x), axis=-1, keepdims=True)
    return x * ops.rsqrt(ops.maximum(squared, epsilon * epsilon))


@SCORES.register("cosine")
@keras.saving.register_keras_serializable(package="common")
class CosineScore(Score):
    """Cosine score `β · cos(s, h)`, with a learned scalar key strength `β` starting at 1.

    From "Neural Turing Machines" (Graves, Wayne and Danihelka, 2014), content-based
    addressing: the key strength `β` sharpens or flattens the distribution. Norms below
    `epsilon` are clamped to `epsilon`, so a zero query or key gives a zero logit, not NaN.
    The keys are normalised once per source in `project_keys`.

    Args:
        epsilon: smallest norm used when normalising.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, D)` queries.
        keys: `(B, S, D)` keys, the same size `D` as the queries.

    Returns:
        logits: `(B, T, S)`, in `[-β, β]`.

    Example:
    >>> CosineScore()(np.ones((2, 3, 4)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, query_shape, keys_shape):
        self._check_same_size(query_shape, keys_shape)
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")
        self.built = True

    def project_keys(self, keys):
        """`(B, S, D)` keys -> `(B, S, D)` unit-norm keys (float32)."""
        return _l2_normalize(keys, self.epsilon)

    def score(self, query, projected_keys):
        self._build_on_first_use(query, projected_keys)
        query = _l2_normalize(query, self.epsilon)
        cosine = ops.matmul(query, ops.swapaxes(ops.cast(projected_keys, "float32"), -1, -2))
        logits = ops.cast(self.scale, "float32") * cosine
        return ops.cast(logits, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
