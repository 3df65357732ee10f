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

from keras import ops

from common.decoding.decoded import Decoded
from common.decoding.loop import while_loop
from common.decoding.strategy import Problem, StepFn, Strategy
from common.decoding.utils import (
    as_attention,
    check_no_repeat_ngram,
    log_probs,
    never_emitted,
    repeated_ngrams,
    without,
    write_step,
)

ChooseFn = Callable[[Any, Any, Any], Any]


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

    def __init__(self, no_repeat_ngram: int | Any = 0):
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
            logits = ops.cast(logits, "float32")
            banned = repeated_ngrams(token_buf, index, self.no_repeat_ngram,
                                     ops.shape(logits)[1], end_id)
            step_log_probs = without(never_emitted(log_probs(logits), start_id, pad_id, end_id),
                                     banned)
            logits = without(never_emitted(logits, start_id, pad_id, end_id), banned)
            chosen = ops.cast(choose(step_log_probs, logits, index), "int32")
            chosen = ops.where(finished, pad_id, chosen)
            gained = ops.take_along_axis(step_log_probs, chosen[:, None], axis=1)[:, 0]
            scores = scores + ops.where(finished, 0.0, gained)
            lengths = lengths + ops.cast(ops.logical_not(finished), "int32")
            attention = ops.where(finished[:, None], ops.zeros_like(attention), attention)
            token_buf = write_step(token_buf, index, chosen)
            att_buf = write_step(att_buf, index, attention)
            finished = ops.logical_or(finished, ops.equal(chosen, end_id))
            return chosen, finished, scores, lengths, token_buf, att_buf

        # The first step runs outside the loop: it tells the attention width A for the buffers.
        tokens = ops.full((batch_size,), start_id, "int32")
        index = ops.convert_to_tensor(0, "int32")
        logits, state, attention = step(tokens, state, index)
        attention = as_attention(attention)
        width = ops.shape(attention)[1]
        carry = advance(
            index,
            logits,
            attention,
            ops.zeros((batch_size,), "bool"),
            ops.zeros((batch_size,), "float32"),
            ops.zeros((batch_size,), "int32"),
            ops.full((batch_size, max_length), pad_id, "int32"),
            ops.zeros((batch_size, max_length, width), "float32"),
        )
        loop_vars = (index + 1, state, *carry)

        def cond(index, state, tokens, finished, *_):
            return ops.logical_and(index < max_length,
                                   ops.logical_not(ops.all(finished)))

        def body(index, state, tokens, finished, scores, lengths, token_buf, att_buf):
            logits, state, attention = step(tokens, state, index)
            carry = advance(index, logits, as_attention(attention), finished, scores, lengths,
                            token_buf, att_buf)
            return (index + 1, state, *carry)

        _, _, _, finished, scores, lengths, token_buf, att_buf = while_loop(
            cond, body, loop_vars)
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
        return lambda step_log_probs, logits, index: ops.cast(
            ops.argmax(step_log_probs, axis=-1), "int32")

    def __repr__(self) -> str:
        return f"GreedySearch(no_repeat_ngram={self.no_repeat_ngram})"


def greedy_decode(step: StepFn, initial_state: Any, batch_size: int | Any, start_id: int,
                  end_id: int, max_length: int | Any, pad_id: int = 0,
                  no_repeat_ngram: int | Any = 0) -> Decoded:
    """`GreedySearch(no_repeat_ngram)(...)`: the other arguments are those of
    `Strategy.__call__`.

    Returns:
        A `Decoded` with `K = 1`: tokens `(B, 1, T)`, lengths, scores, finished and
        normalized_scores (equal to scores) `(B, 1)`, attention `(B, 1, T, A)`.

    Example:
    >>> # Tokens: 0 <pad>, 1 <start>, 2 <end>, 3 a word; row i: next-token probabilities.
    >>> from keras import ops
    >>> table = ops.log([[.25] * 4, [.01, .01, .4, .58], [.25] * 4, [.01, .01, .9, .08]])
    >>> def step(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), state, ops.zeros((ops.shape(tokens)[0], 0))
    >>> out = greedy_decode(step, {}, batch_size=1, start_id=1, end_id=2, max_length=5)
    >>> ops.convert_to_numpy(out.tokens).tolist()
    [[[3, 2, 0, 0, 0]]]
    """
    return GreedySearch(no_repeat_ngram)(step, initial_state, batch_size, start_id, end_id,
                                         max_length, pad_id)
