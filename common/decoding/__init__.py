"""Search over a step function: greedy decoding, beam search and sampling.

Decoding knows nothing about models. A model supplies
`step(tokens (N,), state, index) -> (logits (N, V), new_state, attention (N, A))` and calls one
of the strategies below, built by name with `make_strategy("beam", beam_size=4)` or directly;
each returns a `Decoded`. All are written in `keras.ops` (`ops.while_loop`, `ops.top_k`,
`ops.take`), so they run on every backend: eagerly and under `jax.jit` on JAX; eagerly, inside
`tf.function` (with XLA too) and inside exported SavedModels on TensorFlow.

Importing this package imports neither TensorFlow nor Keras (the command lines read
`DECODING_METHODS.names()`); the other names load on first use.
"""

from __future__ import annotations

from common.decoding.methods import DECODING_METHODS, default_method, make_strategy
from common.lazy import lazy_getattr

_LAZY = {
    "BeamSearch": "common.decoding.beam",
    "Decoded": "common.decoding.decoded",
    "GreedySearch": "common.decoding.greedy",
    "Sampling": "common.decoding.sampling",
    "Strategy": "common.decoding.strategy",
    "beam_search": "common.decoding.beam",
    "greedy_decode": "common.decoding.greedy",
    "sample_decode": "common.decoding.sampling",
}

__all__ = [  # noqa: RUF022 (the Keras-free names, then the lazy ones)
    "DECODING_METHODS", "default_method", "make_strategy",
    "BeamSearch", "Decoded", "GreedySearch", "Sampling", "Strategy", "beam_search",
    "greedy_decode", "sample_decode",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
