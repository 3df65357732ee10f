"""Dropout whose random bits can come from a cheaper generator on JAX.

`keras.layers.Dropout` on JAX draws its mask from threefry-2x32, keyed by the layer's
`SeedGenerator`. On an H100, Transformer-base's dropout took 4.0 of its 28.8 ms per bf16 step
(`docs/benchmarks.md`, "Transformer-base on an H100"), most of it generating and comparing those
bits. Inside `with dropout_rng("rbg"):` this layer takes the mask from XLA's `RngBitGenerator`
instead (`jax.random` with `impl="rbg"`: Philox on GPUs), keyed by the same seed state, which it
advances as Keras does; inside `dropout_rng("rbg16")`, from 16-bit words of the same generator
compared with `round(rate * 65536)` (the scale is of that rounded rate; a rate under 1 / 131072,
which would round to 0, takes "rbg"'s draws instead). The rate and the `1 / (1 - rate)` scaling are Keras's; only the stream of
random bits differs, so a run is reproducible under either generator but not across them.

Outside the context, with `training=False`, a rate of 0 or on another backend, the layer is
exactly `keras.layers.Dropout`. It holds the same state (the seed generator) under the same
name, so checkpoints are unchanged.

Example:
>>> layer = Dropout(0.5, seed=1)
>>> x = keras.ops.ones((2, 4))
>>> bool(keras.ops.all(layer(x, training=False) == x))
True
"""

from __future__ import annotations

import contextlib
import contextvars

import keras

# The generators `dropout_rng` accepts: Keras's own (threefry on JAX), XLA's RngBitGenerator
# with a float32 uniform per element (`jax.random.bernoulli`), and the same generator's words
# taken as 16 bits and compared with a threshold (no float conversion; XLA still generates
# 32-bit Philox words and narrows them, so no fewer words: an H200 ran it no faster).
DROPOUT_RNGS = ("keras", "rbg", "rbg16")

_RNG = contextvars.ContextVar("dropout_rng", default="keras")


@contextlib.contextmanager
def dropout_rng(name: str):
    """Within this context, `common.layers.Dropout` layers called on the JAX backend draw their
    masks from `name`'s generator (one of `DROPOUT_RNGS`). It acts when the layer is called,
    that is when a jitted step is traced."""
    if name not in DROPOUT_RNGS:
        raise ValueError(f"unknown dropout generator {name!r}; expected one of {DROPOUT_RNGS}")
    token = _RNG.set(name)
    try:
        yield
    finally:
        _RNG.reset(token)


@keras.saving.register_keras_serializable(package="common")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, with its mask from XLA's RngBitGenerator on JAX inside
    `dropout_rng("rbg")` (see the module docstring). Arguments as Keras's."""

    def call(self, inputs, training=False):
        if not (training and self.rate > 0 and _RNG.get() != "keras"
                and keras.backend.backend() == "jax"):
            return super().call(inputs, training=training)
        import jax
        import jax.numpy as jnp

        seed = self.seed_generator.next()  # uint32 (2,): the state Keras's dropout would use
        # An rbg key is 4 words: the seed and the seed mixed with a constant.
        key = jax.random.wrap_key_data(
            jnp.concatenate([seed, seed ^ jnp.uint32(0x9E3779B9)]), impl="rbg")
        shape = inputs.shape
        if self.noise_shape is not None:
            shape = tuple(d if n is None else n for d, n in zip(inputs.shape, self.noise_shape))
        threshold = min(round(self.rate * 65536), 65535)
        if _RNG.get() == "rbg16" and threshold > 0:
            # A 16-bit word is dropped below round(rate * 2**16): the rate to 1 part in 65,536,
            # and the scale is that rate's, so the expectation is still the input's.
            keep = jax.random.bits(key, shape, jnp.uint16) >= jnp.uint16(threshold)
            scale = jnp.asarray(65536 / (65536 - threshold), inputs.dtype)
        else:
            keep = jax.random.bernoulli(key, 1.0 - self.rate, shape)
            scale = jnp.asarray(1.0 / (1.0 - self.rate), inputs.dtype)
        return jnp.where(keep, inputs * scale, jnp.zeros((), inputs.dtype))
