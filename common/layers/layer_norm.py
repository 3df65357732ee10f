"""Layer normalization whose gradient can be taken in closed form.

`LayerNormalization` is `keras.layers.LayerNormalization`: the same arguments, variables and
names (checkpoints are unchanged) and, by default, the same `call`. With the class attribute
`CLOSED_FORM_GRADIENT` set (`scripts/benchmarks/benchmark_transformer_jax.py --layer-norm
closed`), a layer that normalizes over the last axis with a scale and an offset computes `layer_norm` instead:
the same function, in float32 (or wider) as Keras does, with the gradient written out rather than
differentiated automatically, so that the backward pass keeps only the input (in its own
dtype) and two float32 numbers per row. On an H200, Transformer-base's 32 layer norms took
10.3 of its 85.7 ms per step, about twice what their reads and writes need
(`docs/benchmarks.md`, run 5); whether this form does better under XLA is for a GPU run to
say, so it is off by default.

Example:
>>> import numpy as np
>>> x = np.arange(8, dtype="float32").reshape(2, 4)
>>> y = layer_norm(x, np.ones(4, "float32"), np.zeros(4, "float32"), 1e-5)
>>> [round(float(v), 3) for v in y[0]]
[-1.342, -0.447, 0.447, 1.342]
"""

from __future__ import annotations

import keras
from keras import ops


def normalize(x, gamma, beta, epsilon: float):
    """`(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last axis of `x (..., D)`,
    computed in float32 (or `x`'s dtype where wider, as Keras does) and returned in `x`'s
    dtype; `gamma` and `beta` are `(D,)` tensors. Forward only (autodiff differentiates it
    as written): the Transformer's decoding step (`seq2seq.transformer_layers`) calls it, and
    `layer_norm` adds the closed-form gradient."""
    return _normalized(x, gamma, beta, epsilon)[0]


def _normalized(x, gamma, beta, epsilon: float):
    """`normalize`'s output, with the row statistics its gradient reuses: `mean` and
    `rstd = 1 / sqrt(var + epsilon)`, `(..., 1)` in the compute dtype."""
    compute = keras.backend.result_type(x.dtype, "float32")
    xf = ops.cast(x, compute)
    mean = ops.mean(xf, axis=-1, keepdims=True)
    centered = xf - mean
    rstd = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) + epsilon)
    y = centered * rstd * ops.cast(gamma, compute) + ops.cast(beta, compute)
    return ops.cast(y, x.dtype), mean, rstd


def layer_norm(x, gamma, beta, epsilon: float):
    """`normalize` with its gradient in closed form; `gamma` and `beta` are `(D,)` tensors
    (not variables: read them first).

    Gradient (`x̂` the normalized input, `r = 1 / sqrt(var + epsilon)`, `g` the upstream
    gradient, means over the last axis): `d gamma = sum_rows g x̂`, `d beta = sum_rows g`,
    `dx = r (g gamma - mean(g gamma) - x̂ mean(g gamma x̂))`, cast to `x`'s dtype.
    """

    compute = keras.backend.result_type(x.dtype, "float32")

    @ops.custom_gradient
    def norm(x, gamma, beta):
        y, mean, rstd = _normalized(x, gamma, beta, epsilon)

        def grad(*args, upstream=None):  # Keras's signature on every backend
            if upstream is None:
                (upstream,) = args
            g = ops.cast(upstream, compute)
            normed = (ops.cast(x, compute) - mean) * rstd
            rows = tuple(range(len(x.shape) - 1))
            scaled = g * ops.cast(gamma, compute)
            dx = rstd * (scaled - ops.mean(scaled, axis=-1, keepdims=True)
                         - normed * ops.mean(scaled * normed, axis=-1, keepdims=True))
            return (ops.cast(dx, x.dtype), ops.cast(ops.sum(g * normed, axis=rows), gamma.dtype),
                    ops.cast(ops.sum(g, axis=rows), beta.dtype))

        return y, grad

    return norm(x, gamma, beta)


@keras.saving.register_keras_serializable(package="common")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`; `layer_norm`'s closed-form gradient where
    `CLOSED_FORM_GRADIENT` is set and the layer normalizes the last axis with a scale and an
    offset (see the module docstring). Arguments as Keras's."""

    # Off: Keras's own call. A class-wide switch, read when the layer is called (traced).
    CLOSED_FORM_GRADIENT = False

    def call(self, inputs):
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        last = len(axis) == 1 and axis[0] in (-1, len(inputs.shape) - 1)
        if not (self.CLOSED_FORM_GRADIENT and last and self.center and self.scale
                and not self.rms_scaling):
            return super().call(inputs)
        # Read as tensors: TensorFlow's custom gradient refuses variables read inside it
        # (eagerly), and `convert_to_tensor` hands a Keras variable back as a variable there.
        outputs = layer_norm(inputs, ops.cast(self.gamma, self.gamma.dtype),
                             ops.cast(self.beta, self.beta.dtype), self.epsilon)
        return ops.cast(outputs, self.compute_dtype)
