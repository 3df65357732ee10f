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

import tensorflow as tf

from common.decoding.decoded import Decoded
from common.decoding.defaults import LENGTH_PENALTY
from common.decoding.strategy import Problem, StepFn, Strategy
from common.decoding.utils import (
    NEG,
    as_attention,
    check_int,
    check_no_repeat_ngram,
    gnmt_length_penalty,
    is_python_int,
    log_probs,
    never_emitted,
    repeated_ngrams,
    state_invariants,
    without,
    write_step,
)
from common.errors import UserError

# Below this a score comes from a masked token or an empty beam slot (about `NEG`), not from a
# hypothesis the model can produce: it never enters the buffer.
_IMPOSSIBLE = NEG / 2
# The sort key of an empty buffer slot: below every real normalized score.
_EMPTY = tf.float32.min


class _Search(NamedTuple):
    """The `tf.while_loop` variables of `beam_search`."""

    index: tf.Tensor  # () the step to run next
    tokens: tf.Tensor  # (N,) the last token of each alive hypothesis
    state: Any  # the step function's state, (N, ...) leaves
    alive_scores: tf.Tensor  # (B, K) sums of log-probabilities, best first
    alive_tokens: tf.Tensor  # (N, T)
    alive_attention: tf.Tensor  # (N, T, A)
    kept_tokens: tf.Tensor  # (B * n, T) the finished-hypothesis buffer, best first
    kept_attention: tf.Tensor  # (B * n, T, A)
    kept_scores: tf.Tensor  # (B, n)
    kept_normalized: tf.Tensor  # (B, n), _EMPTY in empty slots
    kept_lengths: tf.Tensor  # (B, n)
    ended: tf.Tensor  # (B,) how many hypotheses have finished (the buffer keeps the n best)
    done: tf.Tensor  # (B,) no alive hypothesis can enter the example's answer any more


def _check_beam_args(beam_size: Any, n_best: Any, alpha: Any) -> None:
    check_int("beam_size", beam_size, 1)
    check_int("n_best", n_best, 1)
    if is_python_int(beam_size) and is_python_int(n_best) and n_best > beam_size:
        raise UserError(f"n_best must be <= beam_size ({beam_size}); got {n_best}")
    if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool) or alpha < 0:
        raise UserError(f"length_penalty must be a number >= 0; got {alpha!r}")


def _tile(state: Any, beam_size: int) -> Any:
    """Repeats each row of every leaf `beam_size` times: `(B, ...)` -> `(B * K, ...)`."""
    return tf.nest.map_structure(
        lambda x: tf.repeat(x, beam_size, axis=0) if x.shape.rank else x, state
    )


def _reorder(state: Any, rows: tf.Tensor) -> Any:
    """Gathers the rows `(N,)` of every leaf of a state nest."""
    return tf.nest.map_structure(lambda x: tf.gather(x, rows) if x.shape.rank else x, state)


def _dims(x: tf.Tensor) -> list:
    """The shape of `x`, each dimension a Python int where it is static."""
    dynamic = tf.shape(x)
    return [d if d is not None else dynamic[i] for i, d in enumerate(x.shape.as_list())]


def _split(x: tf.Tensor, k: int) -> tf.Tensor:
    """`(B * k, ...)` -> `(B, k, ...)`."""
    return tf.reshape(x, [-1, k, *_dims(x)[1:]])


def _first_beam_only(beams: int | tf.Tensor) -> tf.Tensor:
    """`(1, K)` starting scores: 0 for beam 0, `NEG` for its copies."""
    if is_python_int(beams):
        return tf.constant([[0.0] + [NEG] * (beams - 1)])
    return tf.where(tf.range(beams)[None] == 0, 0.0, NEG)


def _merge(x: tf.Tensor) -> tf.Tensor:
    """`(B, k, ...)` -> `(B * k, ...)`."""
    return tf.reshape(x, [-1, *_dims(x)[2:]])


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
    >>> table = tf.math.log([[.25] * 4, [.01, .01, .4, .58], [.25] * 4, [.01, .01, .9, .08]])
    >>> def step(tokens, state, index):
    ...     return tf.gather(table, tokens), state, tf.zeros([tf.shape(tokens)[0], 0])
    >>> out = beam_search(step, {}, 1, start_id=1, end_id=2, max_length=3, beam_size=2,
    ...                   n_best=2)
    >>> out.tokens.numpy().tolist()
    [[[3, 2, 0], [2, 0, 0]]]
    """

    name = "beam"
    options = ("beam_size", "length_penalty", "n_best", "no_repeat_ngram")

    def __init__(self, beam_size: int, length_penalty: float = LENGTH_PENALTY, n_best: int = 1,
                 no_repeat_ngram: int | tf.Tensor = 0):
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
            vocab = step_log_probs.shape[-1] or tf.shape(step_log_probs)[-1]
            # Each beam's own history bans its repeated n-grams, before the ranking.
            step_log_probs = without(step_log_probs, repeated_ngrams(
                s.alive_tokens, index, self.no_repeat_ngram, vocab, end_id))
            candidates = s.alive_scores[..., None] + tf.reshape(step_log_probs, [-1, beams, vocab])
            scores, chosen = tf.math.top_k(tf.reshape(candidates, [-1, beams * vocab]), 2 * beams)
            parent, token = chosen // vocab, chosen % vocab
            ends = tf.equal(token, end_id)
            first_row = tf.range(tf.shape(scores)[0])[:, None] * beams  # (B, 1)

            # The K best candidates that do not end stay alive. Each parent has one <end>, so at
            # most K of the 2K end and K others are always there; top_k keeps them best first.
            _, pick = tf.math.top_k(tf.where(ends, _EMPTY, scores), beams)
            alive_scores = tf.gather(scores, pick, batch_dims=1)
            rows = tf.reshape(first_row + tf.gather(parent, pick, batch_dims=1), [-1])
            tokens = tf.reshape(tf.gather(token, pick, batch_dims=1), [-1])
            alive_tokens = write_step(tf.gather(s.alive_tokens, rows), index, tokens)
            alive_attention = write_step(
                tf.gather(s.alive_attention, rows), index, tf.gather(attention, rows)
            )

            # Every candidate among the 2K that ends joins the buffer, unless the example is done
            # (then its answer is fixed, as if it had been decoded alone). At most K of them end,
            # so the K best of the ending ones (_EMPTY in the slots left over) hold them all.
            end_scores, end_pick = tf.math.top_k(tf.where(ends, scores, _EMPTY), beams)
            new = tf.logical_and(end_scores > _IMPOSSIBLE, tf.logical_not(s.done)[:, None])
            end_rows = tf.reshape(first_row + tf.gather(parent, end_pick, batch_dims=1), [-1])
            end_tokens = write_step(
                tf.gather(s.alive_tokens, end_rows), index, tf.fill(tf.shape(end_rows), end_id)
            )
            end_attention = write_step(
                tf.gather(s.alive_attention, end_rows), index, tf.gather(attention, end_rows)
            )
            length = index + 1
            end_normalized = end_scores / gnmt_length_penalty(length, alpha)
            kept_normalized, pick = tf.math.top_k(
                tf.concat([s.kept_normalized, tf.where(new, end_normalized, _EMPTY)], axis=1), keep
            )

            def kept(old: tf.Tensor, candidates: tf.Tensor) -> tf.Tensor:
                return tf.gather(tf.concat([old, candidates], axis=1), pick, batch_dims=1)

            ended = s.ended + tf.reduce_sum(tf.cast(new, tf.int32), axis=1)
            # An alive hypothesis reaches at most score / lp(T): its score can only fall, and its
            # length penalty is largest at T (alpha >= 0). Done once the best alive one cannot beat
            # the n-th kept: every later hypothesis, whatever rank it ends at, extends an alive one.
            bound = alive_scores[:, 0] / max_penalty
            beaten = tf.logical_and(ended >= keep, bound <= kept_normalized[:, keep - 1])
            return _Search(
                index=index + 1,
                tokens=tokens,
                state=_reorder(new_state, rows),
                alive_scores=alive_scores,
                alive_tokens=alive_tokens,
                alive_attention=alive_attention,
                kept_tokens=_merge(kept(_split(s.kept_tokens, keep), _split(end_tokens, beams))),
                kept_attention=_merge(
                    kept(_split(s.kept_attention, keep), _split(end_attention, beams))
                ),
                kept_scores=kept(s.kept_scores, end_scores),
                kept_normalized=kept_normalized,
                kept_lengths=kept(s.kept_lengths, tf.fill(tf.shape(new), length)),
                ended=ended,
                done=tf.logical_or(s.done, beaten),
            )

        # The first step runs outside the loop: it tells the attention width A for the buffers.
        rows = batch_size * beams
        state = _tile(state, beams)
        index = tf.constant(0, tf.int32)
        logits, state, attention = step(tf.fill([rows], start_id), state, index)
        attention = as_attention(attention)
        width = attention.shape[1] if attention.shape[1] is not None else tf.shape(attention)[1]
        kept_rows = batch_size * keep
        empty = _Search(
            index=index,
            tokens=tf.fill([rows], start_id),
            state=state,
            # Only beam 0 is live at first: the others are copies that must not be chosen twice.
            alive_scores=tf.tile(_first_beam_only(beams), [batch_size, 1]),
            alive_tokens=tf.fill([rows, max_length], pad_id),
            alive_attention=tf.zeros([rows, max_length, width]),
            kept_tokens=tf.fill([kept_rows, max_length], pad_id),
            kept_attention=tf.zeros([kept_rows, max_length, width]),
            kept_scores=tf.zeros([batch_size, keep]),
            kept_normalized=tf.fill([batch_size, keep], _EMPTY),
            kept_lengths=tf.zeros([batch_size, keep], tf.int32),
            ended=tf.zeros([batch_size], tf.int32),
            done=tf.zeros([batch_size], tf.bool),
        )
        search = advance(empty, logits, attention, state)

        def cond(s: _Search) -> tf.Tensor:
            return tf.logical_and(s.index < max_length, tf.logical_not(tf.reduce_all(s.done)))

        def body(s: _Search) -> tuple[_Search]:
            logits, new_state, attention = step(s.tokens, s.state, s.index)
            return (advance(s, logits, as_attention(attention), new_state),)

        (search,) = tf.while_loop(cond, body, (search,), shape_invariants=(state_invariants(search),))
        return _answer(search, alpha, keep, beams)


def beam_search(step: StepFn, initial_state: Any, batch_size: int | tf.Tensor, start_id: int,
                end_id: int, max_length: int | tf.Tensor, beam_size: int,
                length_penalty: float = LENGTH_PENALTY, n_best: int = 1, pad_id: int = 0,
                no_repeat_ngram: int | tf.Tensor = 0) -> Decoded:
    """`BeamSearch(beam_size, length_penalty, n_best, no_repeat_ngram)(...)`; the other
    arguments are those of `Strategy.__call__`.
    """
    return BeamSearch(beam_size, length_penalty, n_best, no_repeat_ngram)(
        step, initial_state, batch_size, start_id, end_id, max_length, pad_id)


def _answer(s: _Search, alpha: float, keep: int, beams: int) -> Decoded:
    """The buffer's hypotheses, then the best alive ones in the slots it leaves empty."""
    # Slot j holds kept hypothesis j while j < found, else alive hypothesis j - found.
    found = tf.minimum(s.ended, keep)[:, None]  # (B, 1)
    slot = tf.range(keep)[None]  # (1, n)
    finished = slot < found
    source = tf.where(finished, slot, keep + slot - found)  # into concat([kept, alive[:n]])

    def answer(kept: tf.Tensor, alive: tf.Tensor) -> tf.Tensor:
        both = tf.concat([kept, alive[:, :keep]], axis=1)
        return tf.gather(both, source, batch_dims=1)

    # Alive hypotheses have run every step: when any is returned, that is T steps.
    alive_lengths = tf.fill(tf.shape(s.alive_scores), s.index)
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
