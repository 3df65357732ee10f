"""General (bilinear) attention score (Luong et al., 2015): `score(s, h) = sᵀ W h`.

Dimensions: `B` batch, `T` target steps, `S` source steps, `Dq` query features, `Dk` key
features.
"""

from __future__ import annotations

import keras
from keras import ops

from common.layers.score import SCORES, Score


@SCORES.register("general")
@keras.saving.register_keras_serializable(package="common")
class GeneralScore(Score):
    """Bilinear score `sᵀ W h` with a learned `W` of shape `(Dq, Dk)`.

    From "Effective Approaches to Attention-based Neural Machine Translation" (Luong, Pham
    and Manning, 2015), the `general` score. The query is multiplied by `W` at each step
    (`Dq·Dk` work), so `project_keys` is the identity and works for any query size.

    Args:
        kernel_initializer: initializer of `W`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments and returns: those of `common.layers.score.Score`.

    Example:
    >>> GeneralScore()(np.ones((2, 3, 8)), np.ones((2, 5, 4))).shape
    (2, 3, 5)
    """

    def __init__(self, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, keys_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(query_shape[-1], keys_shape[-1]),
            initializer=self.kernel_initializer,
        )
        self.built = True

    def score(self, query, projected_keys):
        self._build_on_first_use(query, projected_keys)
        query = ops.matmul(query, ops.cast(self.kernel, query.dtype))  # (B, T, Dk)
        return ops.matmul(query, ops.swapaxes(projected_keys, -1, -2))

    def get_config(self):
        config = super().get_config()
        config.update({"kernel_initializer": keras.initializers.serialize(self.kernel_initializer)})
        return config
