"""Batched beam search over a step function, with the GNMT length penalty.

Dimensions: `B` batch, `K` beams, `N = B * K` rows of a step, `T` steps (`max_length`),
`V` vocabulary, `A` attention positions.

Hypotheses are kept batch-major: hypothesis `k` of example `b` is row `b * K + k` of every
tensor the step function sees. The initial state is tiled from `B` to `B * K` rows, and after
each step every state leaf, the token history and the attention history are re-ordered by
parent with `tf.gather`, so the returned attention belongs to the returned tokens.

One set of `K` hypotheses per example holds both alive and finished ones. A finished
hypothesis is never extended: its only continuation is `pad_id` at no cost, so it keeps its
score and length and stays in the beam while it ranks among the `K` best. Candidates are ranked
by their length-normalized score `score / lp(length)`, where `lp(n) = ((5 + n) / 6) ** alpha`;
with one beam this is exactly greedy decoding.
"""

from __future__ import annotations

import numbers
from typing import Any

import tensorflow as tf

from common.decoding.decoded import Decoded
from common.decoding.greedy import StepFn
from common.decoding.utils import (
    NEG,
    as_attention,
    check_common_args,
    check_int,
    gnmt_length_penalty,
    log_probs,
    never_emitted,
    state_invariants,
    to_state,
    write_step,
)
from common.errors import UserError


def _check_beam_args(beam_size: Any, n_best: Any, alpha: Any) -> None:
    check_int("beam_size", beam_size, 1, allow_tensor=False)
    check_int("n_best", n_best, 1, allow_tensor=False)
    if n_best > beam_size:
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


def beam_search(
    step: StepFn,
    initial_state: Any,
    batch_size: int | tf.Tensor,
    start_id: int | tf.Tensor,
    end_id: int | tf.Tensor,
    max_length: int | tf.Tensor,
    beam_size: int,
    length_penalty: float = 0.6,
    n_best: int = 1,
    pad_id: int = 0,
) -> Decoded:
    """Beam search: keeps the `K` best hypotheses of each example at every step.

    Reference:
    - [Wu et al., 2016](https://arxiv.org/abs/1609.08144) (the length penalty).

    The loop stops after `max_length` steps, or earlier once, for every example, the
    `n_best` best hypotheses have finished and no alive one can still beat them (its score
    can only fall, and its length penalty is largest at `max_length`). A hypothesis that never
    emits `<end>` is returned with `finished=False` and length `max_length`. Written with
    `tf.while_loop`: it runs eagerly, inside `tf.function` (also with `jit_compile=True` when
    `max_length` is a Python int) and inside exported SavedModels.

    Args:
        step: `step(tokens (N,), state, index) -> (logits (N, V), new_state, attention (N, A))`.
        initial_state: a nest of tensors, each with leading dimension `B`; tiled to `B * K`.
        batch_size: `B`, an int or a scalar int32 tensor.
        start_id: the token fed at index 0 (`<start>`).
        end_id: the token that finishes a hypothesis (`<end>`, compared by id).
        max_length: `T`, the most tokens generated, `<end>` included (an int or a scalar
            tensor).
        beam_size: `K`, a Python int; 1 gives exactly greedy decoding.
        length_penalty: `alpha` of the GNMT length penalty, >= 0; 0 ranks by the plain sum
            of log-probabilities.
        n_best: how many hypotheses to return per example, <= `beam_size`.
        pad_id: the token written after `<end>`.

    Returns:
        A `Decoded` with `K = n_best`, best first: tokens `(B, n_best, T)`, attention
        `(B, n_best, T, A)`, lengths, scores (sum of log-probabilities), normalized_scores
        (`scores / lp(lengths)`, the ranking) and finished `(B, n_best)`. If `K` exceeds the
        number of distinct hypotheses, the extra slots hold ones scored about -1e9.

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
    check_common_args(batch_size, start_id, end_id, max_length, pad_id)
    _check_beam_args(beam_size, n_best, length_penalty)
    alpha = float(length_penalty)
    beams = beam_size
    start_id = tf.cast(start_id, tf.int32)
    end_id = tf.cast(end_id, tf.int32)
    pad_id = tf.cast(pad_id, tf.int32)

    def advance(index, logits, attention, raw, finished, lengths, token_buf, att_buf, state):
        step_log_probs = never_emitted(log_probs(logits), start_id, pad_id, end_id)
        vocab = step_log_probs.shape[-1] or tf.shape(step_log_probs)[-1]
        step_log_probs = tf.reshape(step_log_probs, [-1, beams, vocab])
        # A finished hypothesis continues only with pad, at no cost.
        pad_only = tf.one_hot(pad_id, vocab, on_value=0.0, off_value=NEG)
        step_log_probs = tf.where(finished[..., None], pad_only, step_log_probs)
        cand_raw = tf.reshape(raw[..., None] + step_log_probs, [-1, beams * vocab])
        cand_len = lengths + tf.cast(tf.logical_not(finished), tf.int32)
        penalty = tf.repeat(gnmt_length_penalty(cand_len, alpha), vocab, axis=1)
        rank, chosen = tf.math.top_k(cand_raw / penalty, k=beams)
        parent = chosen // vocab
        tokens = chosen % vocab
        raw = tf.gather(cand_raw, chosen, batch_dims=1)
        parent_finished = tf.gather(finished, parent, batch_dims=1)
        tokens = tf.where(parent_finished, pad_id, tokens)
        lengths = tf.gather(cand_len, parent, batch_dims=1)
        finished = tf.logical_or(parent_finished, tf.equal(tokens, end_id))

        rows = tf.reshape(tf.range(tf.shape(parent)[0])[:, None] * beams + parent, [-1])
        tokens = tf.reshape(tokens, [-1])
        attention = tf.gather(attention, rows)
        attention = tf.where(
            tf.reshape(parent_finished, [-1, 1]), tf.zeros_like(attention), attention
        )
        token_buf = write_step(tf.gather(token_buf, rows), index, tokens)
        att_buf = write_step(tf.gather(att_buf, rows), index, attention)
        state = _reorder(state, rows)
        return tokens, state, raw, finished, lengths, rank, token_buf, att_buf

    # The first step runs outside the loop: it tells the attention width A for the buffers.
    rows = batch_size * beams
    state = _tile(to_state(initial_state), beams)
    index = tf.constant(0, tf.int32)
    logits, state, attention = step(tf.fill([rows], start_id), state, index)
    attention = as_attention(attention)
    width = attention.shape[1] if attention.shape[1] is not None else tf.shape(attention)[1]
    # Only beam 0 is live at first: the others are copies that must not be chosen twice.
    first_raw = tf.constant([[0.0] + [NEG] * (beams - 1)], tf.float32)
    carry = advance(
        index,
        logits,
        attention,
        tf.tile(first_raw, [batch_size, 1]),
        tf.zeros([batch_size, beams], tf.bool),
        tf.zeros([batch_size, beams], tf.int32),
        tf.fill([rows, max_length], pad_id),
        tf.zeros([rows, max_length, width], tf.float32),
        state,
    )
    loop_vars = (index + 1, *carry)
    max_penalty = gnmt_length_penalty(max_length, alpha)

    def cond(index, tokens, state, raw, finished, lengths, rank, token_buf, att_buf):
        best_done = tf.reduce_all(finished[:, :n_best], axis=1)
        alive_bound = tf.where(finished, tf.float32.min, raw / max_penalty)
        done = tf.logical_and(best_done, tf.reduce_max(alive_bound, axis=1) <= rank[:, n_best - 1])
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(done)))

    def body(index, tokens, state, raw, finished, lengths, rank, token_buf, att_buf):
        logits, new_state, attention = step(tokens, state, index)
        carry = advance(
            index,
            logits,
            as_attention(attention),
            raw,
            finished,
            lengths,
            token_buf,
            att_buf,
            new_state,
        )
        return (index + 1, *carry)

    _, _, _, raw, finished, lengths, rank, token_buf, att_buf = tf.while_loop(
        cond, body, loop_vars, shape_invariants=state_invariants(loop_vars)
    )
    return Decoded(
        tokens=tf.reshape(token_buf, [-1, beams, max_length])[:, :n_best],
        lengths=lengths[:, :n_best],
        scores=raw[:, :n_best],
        attention=tf.reshape(att_buf, [-1, beams, max_length, width])[:, :n_best],
        finished=finished[:, :n_best],
        normalized_scores=rank[:, :n_best],
    )
