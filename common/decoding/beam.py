"""Batched beam search over a step function, with a buffer of finished hypotheses.

Dimensions: `B` batch, `K` beams, `N = B * K` rows of a step, `n = n_best`, `T` steps
(`max_length`), `V` vocabulary, `A` attention positions.

Alive hypotheses are kept batch-major: hypothesis `k` of example `b` is row `b * K + k` of every
tensor the step function sees. The initial state is tiled from `B` to `B * K` rows, and after
each step every state leaf, the token history and the attention history are re-ordered by
parent with `tf.gather`, so the returned attention belongs to the returned tokens.

Finished hypotheses live apart, in a buffer of the `n` best per example (as in GNMT and
tensor2tensor), so an alive hypothesis, whose score can only fall, never pushes out a finished
one. Each step takes the `2K` best candidates of the `K * V` extensions: the `K` best that do
not end stay alive, and every one that ends goes to the buffer (as in tensor2tensor; fairseq's
rule, only those among the `K` best, drops finished hypotheses that beat the answer). The answer
comes from the buffer, topped up with the best alive hypotheses only when it holds fewer than
`n`. See `docs/decoding.md`.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import keras
import numpy as np
from keras import ops

from common.decoding.decoded import Decoded
from common.decoding.defaults import LENGTH_PENALTY
from common.decoding.loop import while_loop
from common.decoding.strategy import Problem, StepFn, Strategy
from common.decoding.utils import (
    NEG,
    as_attention,
    check_int,
    check_no_repeat_ngram,
    dims,
    gnmt_length_penalty,
    is_python_int,
    log_probs,
    never_emitted,
    repeated_ngrams,
    without,
    write_step,
)
from common.errors import UserError

# Below this a score comes from a masked token or an empty beam slot (about `NEG`), not from a
# hypothesis the model can produce: it never enters the buffer.
_IMPOSSIBLE = NEG / 2
# The sort key of an empty buffer slot: below every real normalized score.
_EMPTY = float(np.finfo(np.float32).min)


class _Search(NamedTuple):
    """The loop variables of `beam_search`."""

    index: Any  # () the step to run next
    tokens: Any  # (N,) the last token of each alive hypothesis
    state: Any  # the step function's state, (N, ...) leaves
    alive_scores: Any  # (B, K) sums of log-probabilities, best first
    alive_tokens: Any  # (N, T)
    alive_attention: Any  # (N, T, A)
    kept_tokens: Any  # (B * n, T) the finished-hypothesis buffer, best first
    kept_attention: Any  # (B * n, T, A)
    kept_scores: Any  # (B, n)
    kept_normalized: Any  # (B, n), _EMPTY in empty slots
    kept_lengths: Any  # (B, n)
    ended: Any  # (B,) how many hypotheses have finished (the buffer keeps the n best)
    done: Any  # (B,) no alive hypothesis can enter the example's answer any more


def _check_beam_args(beam_size: Any, n_best: Any, alpha: Any) -> None:
    check_int("beam_size", beam_size, 1)
    check_int("n_best", n_best, 1)
    if is_python_int(beam_size) and is_python_int(n_best) and n_best > beam_size:
        raise UserError(f"n_best must be <= beam_size ({beam_size}); got {n_best}")
    if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool) or alpha < 0:
        raise UserError(f"length_penalty must be a number >= 0; got {alpha!r}")


def _tile(state: Any, beam_size: int | Any) -> Any:
    """Repeats each row of every leaf `beam_size` times: `(B, ...)` -> `(B * K, ...)`."""
    return keras.tree.map_structure(
        lambda x: ops.repeat(x, beam_size, axis=0) if len(x.shape) else x, state
    )


def _reorder(state: Any, rows: Any, before: Any) -> Any:
    """Gathers the rows `(N,)` of every leaf of a state nest that the step changed.

    A leaf the step hands back as it got it (`before`'s, the same object: the Transformer's
    cross-attention cache, the source mask, the captioner's annotations) holds `K` equal
    copies of each example's row since `_tile`, and rows only move among an example's own
    beams: gathering it would copy it unchanged at every step.
    """
    kept = {id(leaf) for leaf in keras.tree.flatten(before)}
    return keras.tree.map_structure(
        lambda x: x if id(x) in kept or not len(x.shape) else ops.take(x, rows, axis=0),
        state)


def _split(x: Any, k: int | Any) -> Any:
    """`(B * k, ...)` -> `(B, k, ...)` (no `-1`: an attention of width 0 has no size to
    infer it from)."""
    shape = dims(x)
    return ops.reshape(x, [shape[0] // k, k, *shape[1:]])


def _first_beam_only(beams: int | Any) -> Any:
    """`(1, K)` starting scores: 0 for beam 0, `NEG` for its copies."""
    return ops.where(ops.arange(beams, dtype="int32")[None] == 0, 0.0, NEG)


def _merge(x: Any) -> Any:
    """`(B, k, ...)` -> `(B * k, ...)`."""
    shape = dims(x)
    return ops.reshape(x, [shape[0] * shape[1], *shape[2:]])


def _gather(x: Any, indices: Any) -> Any:
    """`x[b, indices[b, j]]`: `(B, M)` values at `(B, J)` indices -> `(B, J)`."""
    return ops.take_along_axis(x, indices, axis=1)


def _gather_rows(x: Any, indices: Any) -> Any:
    """`x[b, indices[b, j], ...]` for `(B, M, ...)` -> `(B, J, ...)`."""
    if len(x.shape) == 2:
        return _gather(x, indices)
    shape, picked = dims(x), dims(indices)
    offsets = ops.arange(shape[0], dtype="int32")[:, None] * shape[1]
    rows = ops.take(_merge(x), ops.reshape(indices + offsets, [-1]), axis=0)
    return ops.reshape(rows, [shape[0], picked[1], *shape[2:]])


class BeamSearch(Strategy):
    """Beam search: extends the `K` best alive hypotheses, keeps the `n_best` finished ones.

    Reference:
    - [Wu et al., 2016](https://arxiv.org/abs/1609.08144) (the length penalty, the stopping
      rule).
    - tensor2tensor, `tensor2tensor/utils/beam_search.py` (the `2K` candidates of a step, every
      one that ends finished).

    Hypotheses are ranked by their length-normalized score `score / lp(length)` with
    `lp(n) = ((5 + n) / 6) ** alpha`. An example is done once its buffer holds `n_best`
    finished hypotheses and no alive one can still beat the `n_best`-th: a score can only
    fall, so an alive hypothesis can reach at most `score / lp(max_length)` (`score` when
    `alpha` is 0). The loop stops when every example is done, or after `max_length` steps. One
    beam follows greedy's path and also finishes a runner-up `<end>`: it returns greedy's
    hypothesis, a finished one that beats it, or, when greedy's does not finish, a finished one.

    `<start>` and `<pad>` are never emitted (their log-probabilities are masked; `scores` stay
    the model's own, not renormalized). Written with `tf.while_loop`: it runs eagerly, inside
    `tf.function` (also with `jit_compile=True` when `max_length` is a Python int) and inside
    exported SavedModels.

    Called as every `Strategy` (the initial state is tiled to `B * K` rows).

    Args:
        beam_size: `K`, the number of alive hypotheses extended at each step: a Python int,
            or a scalar int32 tensor (one graph for every size, as an export compiles it; the
            same answers).
        length_penalty: `alpha` of the GNMT length penalty, >= 0; 0 ranks by the plain sum
            of log-probabilities, larger values favour longer hypotheses.
        n_best: how many hypotheses to return per example, <= `beam_size` (a Python int or a
            scalar int32 tensor).
        no_repeat_ngram: `n` >= 1: no hypothesis emits a token that would complete an n-gram
            already in its own output (1: no token twice). The ban acts on each beam's history
            before the candidates are ranked; `<end>` is never banned, so every hypothesis can
            finish. 0: off. A Python int or a scalar int tensor.

    Returns:
        A `Decoded` with `K = n_best`: tokens `(B, n_best, T)`, attention `(B, n_best, T, A)`,
        lengths, scores (sum of log-probabilities), normalized_scores (`scores / lp(lengths)`)
        and finished `(B, n_best)`. Finished hypotheses come first, best first; unfinished
        ones (length `T`, `finished=False`) fill the remaining slots, best first. Slots beyond
        the hypotheses the model can produce hold fillers scored about -1e9.

    Example:
    >>> # Tokens: 0 <pad>, 1 <start>, 2 <end>, 3 a word; row i: next-token probabilities.
    >>> from keras import ops
    >>> table = ops.log([[.25] * 4, [.01, .01, .4, .58], [.25] * 4, [.01, .01, .9, .08]])
    >>> def step(tokens, state, index):
    ...     return ops.take(table, tokens, axis=0), state, ops.zeros((ops.shape(tokens)[0], 0))
    >>> out = beam_search(step, {}, 1, start_id=1, end_id=2, max_length=3, beam_size=2,
    ...                   n_best=2)
    >>> ops.convert_to_numpy(out.tokens).tolist()
    [[[3, 2, 0], [2, 0, 0]]]
    """

    name = "beam"
    options = ("beam_size", "length_penalty", "n_best", "no_repeat_ngram")

    def __init__(self, beam_size: int, length_penalty: float = LENGTH_PENALTY, n_best: int = 1,
                 no_repeat_ngram: int | Any = 0):
        _check_beam_args(beam_size, n_best, length_penalty)
        check_no_repeat_ngram(no_repeat_ngram)
        self.beam_size, self.length_penalty, self.n_best = beam_size, float(length_penalty), n_best
        self.no_repeat_ngram = no_repeat_ngram

    def __repr__(self) -> str:
        return (f"BeamSearch(beam_size={self.beam_size}, length_penalty={self.length_penalty}, "
                f"n_best={self.n_best}, no_repeat_ngram={self.no_repeat_ngram})")

    def search(self, problem: Problem) -> Decoded:
        step, state, batch_size, start_id, end_id, max_length, pad_id = problem
        alpha, beams, keep = self.length_penalty, self.beam_size, self.n_best
        max_penalty = gnmt_length_penalty(max_length, alpha)

        def advance(s: _Search, logits, attention, new_state) -> _Search:
            """Runs the bookkeeping of step `s.index` given its logits, attention and state."""
            index = s.index
            step_log_probs = never_emitted(log_probs(logits), start_id, pad_id, end_id)
            vocab = dims(step_log_probs)[-1]
            # Each beam's own history bans its repeated n-grams, before the ranking.
            step_log_probs = without(step_log_probs, repeated_ngrams(
                s.alive_tokens, index, self.no_repeat_ngram, vocab, end_id))
            candidates = s.alive_scores[..., None] + ops.reshape(step_log_probs,
                                                                 [-1, beams, vocab])
            scores, chosen = ops.top_k(ops.reshape(candidates, [-1, beams * vocab]), 2 * beams)
            chosen = ops.cast(chosen, "int32")
            parent, token = chosen // vocab, chosen % vocab
            ends = ops.equal(token, end_id)
            first_row = ops.arange(ops.shape(scores)[0], dtype="int32")[:, None] * beams

            # The K best candidates that do not end stay alive. Each parent has one <end>, so at
            # most K of the 2K end and K others are always there; top_k keeps them best first.
            _, pick = ops.top_k(ops.where(ends, _EMPTY, scores), beams)
            pick = ops.cast(pick, "int32")
            alive_scores = _gather(scores, pick)
            rows = ops.reshape(first_row + _gather(parent, pick), [-1])
            tokens = ops.reshape(_gather(token, pick), [-1])
            alive_tokens = write_step(ops.take(s.alive_tokens, rows, axis=0), index, tokens)
            alive_attention = write_step(ops.take(s.alive_attention, rows, axis=0), index,
                                         ops.take(attention, rows, axis=0))

            # Every candidate among the 2K that ends joins the buffer, unless the example is done
            # (then its answer is fixed, as if it had been decoded alone). At most K of them end,
            # so the K best of the ending ones (_EMPTY in the slots left over) hold them all.
            end_scores, end_pick = ops.top_k(ops.where(ends, scores, _EMPTY), beams)
            end_pick = ops.cast(end_pick, "int32")
            new = ops.logical_and(end_scores > _IMPOSSIBLE, ops.logical_not(s.done)[:, None])
            end_rows = ops.reshape(first_row + _gather(parent, end_pick), [-1])
            end_tokens = write_step(ops.take(s.alive_tokens, end_rows, axis=0), index,
                                    ops.full(ops.shape(end_rows), end_id, "int32"))
            end_attention = write_step(ops.take(s.alive_attention, end_rows, axis=0), index,
                                       ops.take(attention, end_rows, axis=0))
            length = index + 1
            end_normalized = end_scores / gnmt_length_penalty(length, alpha)
            kept_normalized, pick = ops.top_k(ops.concatenate(
                [s.kept_normalized, ops.where(new, end_normalized, _EMPTY)], axis=1), keep)
            pick = ops.cast(pick, "int32")

            def kept(old, candidates):
                return _gather_rows(ops.concatenate([old, candidates], axis=1), pick)

            ended = s.ended + ops.sum(ops.cast(new, "int32"), axis=1)
            # An alive hypothesis reaches at most score / lp(T): its score can only fall, and its
            # length penalty is largest at T (alpha >= 0). Done once the best alive one cannot beat
            # the n-th kept: every later hypothesis, whatever rank it ends at, extends an alive one.
            bound = alive_scores[:, 0] / max_penalty
            beaten = ops.logical_and(ended >= keep, bound <= kept_normalized[:, keep - 1])
            return _Search(
                index=index + 1,
                tokens=tokens,
                state=_reorder(new_state, rows, s.state),
                alive_scores=alive_scores,
                alive_tokens=alive_tokens,
                alive_attention=alive_attention,
                kept_tokens=_merge(kept(_split(s.kept_tokens, keep), _split(end_tokens, beams))),
                kept_attention=_merge(
                    kept(_split(s.kept_attention, keep), _split(end_attention, beams))
                ),
                kept_scores=kept(s.kept_scores, end_scores),
                kept_normalized=kept_normalized,
                kept_lengths=kept(s.kept_lengths, ops.full(ops.shape(new), length, "int32")),
                ended=ended,
                done=ops.logical_or(s.done, beaten),
            )

        # The first step runs outside the loop: it tells the attention width A for the buffers.
        rows = batch_size * beams
        tiled = _tile(state, beams)
        index = ops.convert_to_tensor(0, "int32")
        logits, state, attention = step(ops.full((rows,), start_id, "int32"), tiled, index)
        attention = as_attention(attention)
        width = dims(attention)[1]
        empty = _empty(index, tiled, batch_size, beams, keep, start_id, pad_id, max_length,
                       width)
        search = advance(empty, logits, attention, state)

        def cond(s: _Search) -> Any:
            return ops.logical_and(s.index < max_length, ops.logical_not(ops.all(s.done)))

        def body(s: _Search) -> tuple[_Search]:
            logits, new_state, attention = step(s.tokens, s.state, s.index)
            return (advance(s, logits, as_attention(attention), new_state),)

        (search,) = while_loop(cond, body, (search,))
        return _answer(search, alpha, keep, beams)


def _empty(index: Any, tiled: Any, batch_size: int | Any, beams: int | Any, keep: int | Any,
           start_id: int, pad_id: int, max_length: int | Any, width: int | Any) -> _Search:
    """The search before its first step: `tiled` the step state of `B * K` rows, every
    hypothesis `<start>`, nothing kept, `A = width` attention positions."""
    rows, kept_rows = batch_size * beams, batch_size * keep
    return _Search(
        index=index,
        tokens=ops.full((rows,), start_id, "int32"),
        state=tiled,
        # Only beam 0 is live at first: the others are copies that must not be chosen twice.
        alive_scores=ops.tile(_first_beam_only(beams), [batch_size, 1]),
        alive_tokens=ops.full((rows, max_length), pad_id, "int32"),
        alive_attention=ops.zeros((rows, max_length, width), "float32"),
        kept_tokens=ops.full((kept_rows, max_length), pad_id, "int32"),
        kept_attention=ops.zeros((kept_rows, max_length, width), "float32"),
        kept_scores=ops.zeros((batch_size, keep), "float32"),
        kept_normalized=ops.full((batch_size, keep), _EMPTY, "float32"),
        kept_lengths=ops.zeros((batch_size, keep), "int32"),
        ended=ops.zeros((batch_size,), "int32"),
        done=ops.zeros((batch_size,), "bool"),
    )


def beam_search(step: StepFn, initial_state: Any, batch_size: int | Any, start_id: int,
                end_id: int, max_length: int | Any, beam_size: int,
                length_penalty: float = LENGTH_PENALTY, n_best: int = 1, pad_id: int = 0,
                no_repeat_ngram: int | Any = 0) -> Decoded:
    """`BeamSearch(beam_size, length_penalty, n_best, no_repeat_ngram)(...)`; the other
    arguments are those of `Strategy.__call__`.
    """
    return BeamSearch(beam_size, length_penalty, n_best, no_repeat_ngram)(
        step, initial_state, batch_size, start_id, end_id, max_length, pad_id)


def _answer(s: _Search, alpha: float, keep: int | Any, beams: int | Any) -> Decoded:
    """The buffer's hypotheses, then the best alive ones in the slots it leaves empty."""
    # Slot j holds kept hypothesis j while j < found, else alive hypothesis j - found.
    found = ops.minimum(s.ended, keep)[:, None]  # (B, 1)
    slot = ops.arange(keep, dtype="int32")[None]  # (1, n)
    finished = slot < found
    source = ops.where(finished, slot, keep + slot - found)  # into concat([kept, alive[:n]])

    def answer(kept, alive):
        both = ops.concatenate([kept, alive[:, :keep]], axis=1)
        return _gather_rows(both, source)

    # Alive hypotheses have run every step: when any is returned, that is T steps.
    alive_lengths = ops.full(ops.shape(s.alive_scores), s.index, "int32")
    return Decoded(
        tokens=answer(_split(s.kept_tokens, keep), _split(s.alive_tokens, beams)),
        lengths=answer(s.kept_lengths, alive_lengths),
        scores=answer(s.kept_scores, s.alive_scores),
        attention=answer(_split(s.kept_attention, keep), _split(s.alive_attention, beams)),
        finished=finished,
        normalized_scores=answer(
            s.kept_normalized, s.alive_scores / gnmt_length_penalty(alive_lengths, alpha)
        ),
    )
