"""Greedy decoding over a step function, and the one-path loop that sampling shares.

Dimensions: `B` batch, `T` steps (`max_length`), `V` vocabulary, `A` attention positions.

A step function is the model's side of the contract (see `docs/design.md`):

```python
def step(tokens, state, index):
    # tokens (B,) int32: the previous token; state: a nest of (B, ...) tensors;
    # index: scalar int32, the position being generated (0 for the token after <start>)
    return logits, new_state, attention  # logits (B, V); attention (B, A), A may be 0
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from common.decoding.decoded import Decoded
from common.decoding.strategy import Problem, StepFn, Strategy
from common.decoding.utils import (
    as_attention,
    check_no_repeat_ngram,
    log_probs,
    never_emitted,
    repeated_ngrams,
    state_invariants,
    without,
    write_step,
)

ChooseFn = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor]


class SinglePath(Strategy):
    """One hypothesis per example, each token chosen by `choose` (greedy decoding, sampling).

    Each example stops at its own `<end>` and then only emits `pad_id`; the loop stops when all
    examples have finished or after `max_length` steps. Returns a `Decoded` with `K = 1`;
    `normalized_scores` equals `scores`.

    Args:
        no_repeat_ngram: `n` >= 1: never emit a token that would complete an n-gram already in
            the example's output (1: no token twice; `<end>` is never banned); 0: off. A
            Python int or a scalar int tensor.
    """

    options = ("no_repeat_ngram",)

    def __init__(self, no_repeat_ngram: int | tf.Tensor = 0):
        check_no_repeat_ngram(no_repeat_ngram)
        self.no_repeat_ngram = no_repeat_ngram

    def chooser(self) -> ChooseFn:
        """The `choose(log_probs (B, V), logits (B, V), index) -> (B,) tokens` of one call;
        both inputs are float32 with the `<start>` and `<pad>` columns (and any token banned
        by `no_repeat_ngram`) at -1e9, so it never picks them."""
        raise NotImplementedError

    def search(self, problem: Problem) -> Decoded:
        step, state, batch_size, start_id, end_id, max_length, pad_id = problem
        choose = self.chooser()

        def advance(index, logits, attention, finished, scores, lengths, token_buf, att_buf):
            # <start>, <pad> and repeated n-grams are never chosen; the score stays the model's
            # own log-probability (log_softmax of the unmasked logits, not renormalized over the
            # other tokens).
            logits = tf.cast(logits, tf.float32)
            banned = repeated_ngrams(token_buf, index, self.no_repeat_ngram, tf.shape(logits)[1],
                                     end_id)
            step_log_probs = without(never_emitted(log_probs(logits), start_id, pad_id, end_id),
                                     banned)
            logits = without(never_emitted(logits, start_id, pad_id, end_id), banned)
            chosen = tf.cast(choose(step_log_probs, logits, index), tf.int32)
            chosen = tf.where(finished, pad_id, chosen)
            gained = tf.gather(step_log_probs, chosen, batch_dims=1)
            scores = scores + tf.where(finished, 0.0, gained)
            lengths = lengths + tf.cast(tf.logical_not(finished), tf.int32)
            attention = tf.where(finished[:, None], tf.zeros_like(attention), attention)
            token_buf = write_step(token_buf, index, chosen)
            att_buf = write_step(att_buf, index, attention)
            finished = tf.logical_or(finished, tf.equal(chosen, end_id))
            return chosen, finished, scores, lengths, token_buf, att_buf

        # The first step runs outside the loop: it tells the attention width A for the buffers.
        tokens = tf.fill([batch_size], start_id)
        index = tf.constant(0, tf.int32)
        logits, state, attention = step(tokens, state, index)
        attention = as_attention(attention)
        width = attention.shape[1] if attention.shape[1] is not None else tf.shape(attention)[1]
        carry = advance(
            index,
            logits,
            attention,
            tf.zeros([batch_size], tf.bool),
            tf.zeros([batch_size], tf.float32),
            tf.zeros([batch_size], tf.int32),
            tf.fill([batch_size, max_length], pad_id),
            tf.zeros([batch_size, max_length, width], tf.float32),
        )
        loop_vars = (index + 1, state, *carry)

        def cond(index, state, tokens, finished, *_):
            return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

        def body(index, state, tokens, finished, scores, lengths, token_buf, att_buf):
            logits, state, attention = step(tokens, state, index)
            carry = advance(index, logits, as_attention(attention), finished, scores, lengths,
                            token_buf, att_buf)
            return (index + 1, state, *carry)

        _, _, _, finished, scores, lengths, token_buf, att_buf = tf.while_loop(
            cond, body, loop_vars, shape_invariants=state_invariants(loop_vars)
        )
        return Decoded(
            tokens=token_buf[:, None],
            lengths=lengths[:, None],
            scores=scores[:, None],
            attention=att_buf[:, None],
            finished=finished[:, None],
            normalized_scores=scores[:, None],
        )


class GreedySearch(SinglePath):
    """Greedy decoding: the most probable token at every step (never `<start>` or `<pad>`)."""

    name = "greedy"

    def chooser(self) -> ChooseFn:
        return lambda step_log_probs, logits, index: tf.argmax(
            step_log_probs, axis=-1, output_type=tf.int32)

    def __repr__(self) -> str:
        return f"GreedySearch(no_repeat_ngram={self.no_repeat_ngram})"


def greedy_decode(step: StepFn, initial_state: Any, batch_size: int | tf.Tensor, start_id: int,
                  end_id: int, max_length: int | tf.Tensor, pad_id: int = 0,
                  no_repeat_ngram: int | tf.Tensor = 0) -> Decoded:
    """`GreedySearch(no_repeat_ngram)(...)`: the other arguments are those of
    `Strategy.__call__`.

    Returns:
        A `Decoded` with `K = 1`: tokens `(B, 1, T)`, lengths, scores, finished and
        normalized_scores (equal to scores) `(B, 1)`, attention `(B, 1, T, A)`.

    Example:
    >>> # Tokens: 0 <pad>, 1 <start>, 2 <end>, 3 a word; row i: next-token probabilities.
    >>> table = tf.math.log([[.25] * 4, [.01, .01, .4, .58], [.25] * 4, [.01, .01, .9, .08]])
    >>> def step(tokens, state, index):
    ...     return tf.gather(table, tokens), state, tf.zeros([tf.shape(tokens)[0], 0])
    >>> out = greedy_decode(step, {}, batch_size=1, start_id=1, end_id=2, max_length=5)
    >>> out.tokens.numpy().tolist()
    [[[3, 2, 0, 0, 0]]]
    """
    return GreedySearch(no_repeat_ngram)(step, initial_state, batch_size, start_id, end_id,
                                         max_length, pad_id)
