"""Sampling over a step function: temperature and top-k, reproducible with a seed.

Dimensions: `B` batch, `T` steps (`max_length`), `V` vocabulary, `A` attention positions.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from keras import ops

from common.decoding.decoded import Decoded
from common.decoding.greedy import ChooseFn, SinglePath
from common.decoding.strategy import StepFn
from common.decoding.utils import NEG, check_int
from common.errors import UserError


def _check_sampling_args(temperature: Any, top_k: Any, seed: Any) -> None:
    if (
        not isinstance(temperature, numbers.Real)
        or isinstance(temperature, bool)
        or not temperature > 0
    ):
        raise UserError(f"temperature must be a number > 0; got {temperature!r}")
    check_int("top_k", top_k, 0, allow_tensor=False)
    if seed is not None:
        check_int("seed", seed, 0)


def _hash32(x: Any) -> Any:
    """A 32-bit integer hash (Wellons' "lowbias32"), uint32 -> uint32."""
    for shift, multiplier in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        x = ops.bitwise_xor(x, ops.right_shift(x, ops.convert_to_tensor(shift, "uint32")))
        x = ops.multiply(x, ops.convert_to_tensor(multiplier, "uint32"))
    return ops.bitwise_xor(x, ops.right_shift(x, ops.convert_to_tensor(16, "uint32")))


def _uniform(shape: Any, seed: Any, index: Any) -> Any:
    """`shape` `(rows, cols)` uniform numbers in (0, 1), never 0 nor 1, a pure function of `(seed,
    index, row, column)`.

    Integer hashing rather than a backend's random numbers: XLA's Philox does not draw the
    same numbers as TensorFlow's plain kernels, nor JAX's as TensorFlow's, and integer
    arithmetic is exact everywhere, so the samples are the same eagerly, in graphs, under
    `jit_compile` and `jax.jit`, on any device and either backend.
    """
    rows, cols = shape[0], shape[1]
    counter = (ops.arange(rows, dtype="int32")[:, None] * cols
               + ops.arange(cols, dtype="int32")[None, :])
    key = _hash32(ops.bitwise_xor(_hash32(ops.cast(seed, "uint32")), ops.cast(index, "uint32")))
    bits = _hash32(ops.bitwise_xor(_hash32(ops.cast(counter, "uint32")), key))
    # 23 bits: the largest, (2**23 - 0.5) * 2**-23 = 1 - 2**-24, is a float32 below 1 (with 24
    # bits the largest rounded to 1.0, whose Gumbel noise is +inf: that token was taken
    # whatever its logit, a masked <start> included, once in 2**24 draws).
    high = ops.right_shift(bits, ops.convert_to_tensor(9, "uint32"))
    return (ops.cast(high, "float32") + 0.5) * (2.0**-23)


def random_seed() -> int:
    """A seed drawn at random, for a call that gives none (drawn when the call is made, in
    Python: a traced search takes it as an input, so each call samples anew)."""
    return int(np.random.default_rng().integers(0, 2**31 - 1))


class Sampling(SinglePath):
    """Samples each token from `softmax(logits / temperature)`, optionally among the top k.

    `<start>` and `<pad>` are never sampled: their logits are masked before the softmax, so
    the distribution is renormalized over the other tokens (`scores` are not renormalized:
    they are the sum of the model's own log-probabilities, `log_softmax(logits)` before
    temperature and top-k, comparable with greedy decoding and beam search).

    The random numbers are a hash of `(seed, index, row, token)`: the same seed gives the same
    samples eagerly, inside `tf.function` (with or without XLA), under `jax.jit`, on either
    backend and in an exported SavedModel (up to float rounding of near-ties). Without a seed,
    one is drawn at random in Python each time a search starts (`random_seed`): a function
    that traces the search once and runs it many times takes the seed as an input instead.
    Each example stops at its own `<end>`.

    Args:
        temperature: > 0; below 1 sharpens the distribution, above 1 flattens it.
        top_k: sample among the `top_k` most probable tokens only; 0 means all of them, and
            1 is greedy decoding.
        seed: a non-negative int (or scalar int tensor) for reproducible samples, or None.
        no_repeat_ngram: `n` >= 1: never sample a token that would complete an n-gram already
            in the example's output (banned before temperature and top-k; `<end>` never is);
            0: off.
    """

    name = "sample"
    options = ("temperature", "top_k", "seed", "no_repeat_ngram")

    def __init__(self, temperature: float = 1.0, top_k: int = 0,
                 seed: int | Any | None = None, no_repeat_ngram: int | Any = 0):
        _check_sampling_args(temperature, top_k, seed)
        super().__init__(no_repeat_ngram)
        self.temperature, self.top_k, self.seed = temperature, top_k, seed

    def __repr__(self) -> str:
        return (f"Sampling(temperature={self.temperature}, top_k={self.top_k}, seed={self.seed}, "
                f"no_repeat_ngram={self.no_repeat_ngram})")

    def chooser(self) -> ChooseFn:
        seed = ops.cast(random_seed() if self.seed is None else self.seed, "int32")
        temperature, top_k = self.temperature, self.top_k

        def choose(step_log_probs: Any, logits: Any, index: Any) -> Any:
            logits = logits / temperature
            vocab = logits.shape[-1]
            if top_k and (vocab is None or top_k < vocab):
                kth_best = ops.top_k(logits, k=top_k)[0][:, -1:]
                logits = ops.where(logits < kth_best, NEG, logits)
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of softmax(logits).
            gumbel = -ops.log(-ops.log(_uniform(ops.shape(logits), seed, index)))
            return ops.cast(ops.argmax(logits + gumbel, axis=-1), "int32")

        return choose


def sample_decode(step: StepFn, initial_state: Any, batch_size: int | Any, start_id: int,
                  end_id: int, max_length: int | Any, temperature: float = 1.0,
                  top_k: int = 0, seed: int | Any | None = None, pad_id: int = 0,
                  no_repeat_ngram: int | Any = 0) -> Decoded:
    """`Sampling(temperature, top_k, seed, no_repeat_ngram)(...)`; the other arguments are
    those of `Strategy.__call__`.

    Returns:
        A `Decoded` with `K = 1`: tokens `(B, 1, T)`, attention `(B, 1, T, A)`, lengths,
        finished, scores and normalized_scores `(B, 1)`.

    Example:
    >>> # Tokens: 0 <pad>, 1 <start>, 2 <end>, 3 a word; row i: next-token probabilities.
    >>> from keras import ops
    >>> table = ops.log([[.25] * 4, [.01, .01, .4, .58], [.25] * 4, [.01, .01, .9, .08]])
    >>> def step(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), state, ops.zeros((ops.shape(tokens)[0], 0))
    >>> a = sample_decode(step, {}, 4, start_id=1, end_id=2, max_length=6, seed=7)
    >>> b = sample_decode(step, {}, 4, start_id=1, end_id=2, max_length=6, seed=7)
    >>> bool(ops.all(a.tokens == b.tokens))
    True
    """
    return Sampling(temperature, top_k, seed, no_repeat_ngram)(
        step, initial_state, batch_size, start_id, end_id, max_length, pad_id)
