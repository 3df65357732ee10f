"""Nadaraya–Watson attention pooling: a kernel-weighted average of values, and its kernels.

Dimensions: `B` batch, `T` target (query) steps, `S` source (key) steps, `Dk` key features,
`Dv` value features.

Attention pooling with a fixed similarity, no learned score: a query `q` looks at keys `k_i`
through a kernel of their distance `d_i = ||q - k_i||` and returns

    f(q) = sum_i K(d_i) v_i / sum_j K(d_j).

Kernels are chosen by name from `KERNELS`. Each is a function
`kernel(squared_distance (B, T, S), width) -> (log_weights (B, T, S), support)` where `support`
is a bool `(B, T, S)` tensor (None for kernels that are positive everywhere). Working with log
weights lets the Gaussian go through a softmax, which never underflows: a query far from every
key still averages its nearest keys.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from common.errors import UserError
from common.layers.masking import expand_key_mask, masked_softmax
from common.registry import Registry

KERNELS = Registry("kernel")


def _distance(squared_distance):
    """`sqrt` with a finite gradient at 0 (where `sqrt`'s own gradient is infinite)."""
    positive = squared_distance > 0
    return ops.where(positive, ops.sqrt(ops.where(positive, squared_distance, 1.0)), 0.0)


def _safe_log(weights, support):
    """`log(weights)` inside the support, 0 outside; no `log(0)` even in the gradient."""
    return ops.log(ops.where(support, weights, 1.0))


@KERNELS.register("gaussian")
def gaussian_kernel(squared_distance, width):
    """`K(d) = exp(-d² / (2 width²))`; positive everywhere."""
    return -squared_distance / (2.0 * ops.square(width)), None


@KERNELS.register("boxcar")
def boxcar_kernel(squared_distance, width):
    """`K(d) = 1` for `d <= width`, else 0."""
    support = squared_distance <= ops.square(width)
    return ops.zeros_like(squared_distance), support


@KERNELS.register("epanechnikov")
def epanechnikov_kernel(squared_distance, width):
    """`K(d) = max(0, 1 - (d / width)²)` (the constant 3/4 cancels in the average)."""
    weights = 1.0 - squared_distance / ops.square(width)
    support = weights > 0
    return _safe_log(weights, support), support


@KERNELS.register("triangular")
def triangular_kernel(squared_distance, width):
    """`K(d) = max(0, 1 - d / width)`: the kernel the lecture notes call "Epanechikov"."""
    weights = 1.0 - _distance(squared_distance) / width
    support = weights > 0
    return _safe_log(weights, support), support


@keras.saving.register_keras_serializable(package="common")
class KernelPooling(keras.layers.Layer):
    """Nadaraya–Watson attention pooling with a kernel of the query–key distance.

    From "On Estimating Regression" (Nadaraya, 1964) and "Smooth Regression Analysis" (Watson,
    1964), read as attention pooling in "Dive into Deep Learning" (Zhang et al., 2023, §11.2):
    `f(q) = sum_i K(||q - k_i||) v_i / sum_j K(||q - k_j||)`.

    Kernels (`KERNELS`): `gaussian` `exp(-d²/(2 width²))`, `boxcar` `1[d <= width]`,
    `epanechnikov` `max(0, 1 - (d/width)²)`, `triangular` `max(0, 1 - d/width)`. With a
    compact kernel (all but the Gaussian) a query with no key inside the support gets zero
    weights and a zero output, never NaN; so does a query whose keys are all masked.

    With `trainable_width=True` the width is a weight (kept as its logarithm, so it stays
    positive) learned by gradient descent, as in d2l's parametric attention pooling. The
    boxcar kernel is flat, so its width would get no gradient: it refuses a trainable width.

    Args:
        kernel: name of the kernel, one of `KERNELS.names()`.
        width: the kernel's width (the Gaussian's σ, the half-width of the others), > 0.
        trainable_width: learn the width, starting from `width`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, Dk)` queries; `(B, T)` scalar queries when `key` is `(B, S)`; or
            `(B, Dk)` for a single query per example.
        key: `(B, S, Dk)` keys, or `(B, S)` scalar keys.
        value: `(B, S, Dv)` values, or `(B, S)` scalar values.
        mask: `(B, S)` bool, true for real keys (or `(B, T, S)` per query, e.g. to leave each
            query's own point out); None means every key is real.

    Returns:
        pooled: `(B, T, Dv)` (`(B, T)` for `(B, S)` values; `(B, Dv)` for a `(B, Dk)` query).
        weights: `(B, T, S)` float32 weights, summing to 1 over the keys in the support
            (`(B, S)` for a `(B, Dk)` query).

    Example:
    >>> pool = KernelPooling("gaussian", width=0.5)
    >>> x = np.linspace(0, 4, 50)[None].astype("float32")
    >>> y_hat, weights = pool(np.array([[1.0, 2.0]]), x, np.sin(x))
    >>> y_hat.shape, weights.shape
    ((1, 2), (1, 2, 50))
    """

    def __init__(
        self,
        kernel: str = "gaussian",
        width: float = 1.0,
        trainable_width: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_fn = KERNELS.get(kernel)
        if not isinstance(width, (int, float)) or not math.isfinite(width) or width <= 0:
            raise UserError(f"the kernel width must be a finite number > 0; received {width!r}")
        if trainable_width and kernel == "boxcar":
            raise UserError(
                "the boxcar kernel is flat, so its width gets no gradient; use "
                "trainable_width=True with one of: "
                + ", ".join(n for n in KERNELS.names() if n != "boxcar")
            )
        self.kernel = kernel
        self.width = float(width)
        self.trainable_width = bool(trainable_width)

    def build(self, query_shape, key_shape, value_shape=None):
        if self.trainable_width:
            self.log_width = self.add_weight(
                shape=(),
                initializer=keras.initializers.Constant(math.log(self.width)),
                dtype="float32",
                name="log_width",
            )
        self.built = True

    def current_width(self):
        """The width in use: a float32 scalar tensor (the learned one when trainable)."""
        if self.trainable_width:
            return ops.exp(ops.cast(self.log_width, "float32"))
        return ops.convert_to_tensor(self.width, "float32")

    def call(self, query, key, value, mask=None):
        query, key, scalar_value, single_query = _standardize(query, key, value)
        value = ops.expand_dims(value, -1) if scalar_value else value
        query = ops.cast(query, "float32")
        key = ops.cast(key, "float32")
        difference = ops.expand_dims(query, 2) - ops.expand_dims(key, 1)  # (B, T, S, Dk)
        squared_distance = ops.sum(ops.square(difference), axis=-1)  # (B, T, S)
        log_weights, support = self.kernel_fn(squared_distance, self.current_width())
        if mask is not None:
            mask = expand_key_mask(mask, 3)
            support = mask if support is None else ops.logical_and(support, mask)
        weights = masked_softmax(log_weights, support)  # float32, 0 outside the support
        pooled = ops.matmul(ops.cast(weights, value.dtype), value)  # (B, T, Dv)
        if scalar_value:
            pooled = ops.squeeze(pooled, -1)
        if single_query:
            return ops.squeeze(pooled, 1), ops.squeeze(weights, 1)
        return pooled, weights

    def compute_output_shape(self, query_shape, key_shape, value_shape):
        batch, sources = key_shape[0], key_shape[1]
        single_query = len(key_shape) == 3 and len(query_shape) == 2
        steps = () if single_query else (query_shape[1],)
        features = () if len(value_shape) == 2 else (value_shape[-1],)
        return (batch, *steps, *features), (batch, *steps, sources)

    def compute_mask(self, inputs, previous_mask=None):
        # `mask` is a key padding mask over S, not a mask of the outputs; none is propagated.
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel": self.kernel,
                "width": self.width,
                "trainable_width": self.trainable_width,
            }
        )
        return config


def _standardize(query, key, value):
    """Checks the ranks; returns `(query (B,T,Dk), key (B,S,Dk), scalar_value, single_query)`."""
    ranks = (len(query.shape), len(key.shape), len(value.shape))
    if ranks[1] == 2:  # scalar keys (B, S): scalar queries (B, T)
        if ranks[0] != 2:
            raise UserError(
                f"with scalar keys (B, S) the queries must be (B, T); received a query of "
                f"shape {tuple(query.shape)}"
            )
        query, key, single_query = ops.expand_dims(query, -1), ops.expand_dims(key, -1), False
    elif ranks[1] == 3 and ranks[0] in (2, 3):
        single_query = ranks[0] == 2
        query = ops.expand_dims(query, 1) if single_query else query
    else:
        raise UserError(
            f"expected keys (B, S, Dk) or (B, S) and queries (B, T, Dk), (B, Dk) or (B, T); "
            f"received query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if ranks[2] not in (2, 3):
        raise UserError(f"expected values (B, S, Dv) or (B, S); received {tuple(value.shape)}")
    query_dim, key_dim = query.shape[-1], key.shape[-1]
    if query_dim is not None and key_dim is not None and query_dim != key_dim:
        raise UserError(
            f"queries and keys must have the same size; received {query_dim} and {key_dim}"
        )
    return query, key, ranks[2] == 2, single_query
