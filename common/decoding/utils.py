"""Helpers shared by the decoding loops: argument checks, state nests, step buffers, the
tokens a step must not emit.

Dimensions: `N` rows of a step (`B`, or `B * K` in beam search), `T` steps (`max_length`),
`A` attention positions, `V` vocabulary.
"""

from __future__ import annotations

import numbers
from typing import Any

import tensorflow as tf

from common.errors import UserError

# A log-probability that no real hypothesis reaches, finite so that sums and divisions stay
# finite (-inf would turn `0 * -inf` or `-inf - -inf` into NaN).
NEG = -1e9


def is_python_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int, allow_tensor: bool = True) -> None:
    """Raises `UserError` unless `value` is an int >= `minimum` (or, if allowed, a tensor)."""
    if is_python_int(value):
        if value < minimum:
            raise UserError(f"{name} must be an integer >= {minimum}; got {value}")
        return
    if allow_tensor and tf.is_tensor(value):
        if value.shape.rank not in (None, 0):
            raise UserError(f"{name} must be a scalar; got a tensor of shape {value.shape}")
        return
    expected = "an integer or a scalar tensor" if allow_tensor else "a Python integer"
    raise UserError(f"{name} must be {expected}; got {value!r}")


def check_common_args(
    batch_size: Any, start_id: Any, end_id: Any, max_length: Any, pad_id: Any
) -> None:
    check_int("batch_size", batch_size, 1)
    check_int("start_id", start_id, 0)
    check_int("end_id", end_id, 0)
    check_int("max_length", max_length, 1)
    check_int("pad_id", pad_id, 0)


def to_state(initial_state: Any) -> Any:
    """Converts every leaf of a state nest to a tensor."""
    return tf.nest.map_structure(tf.convert_to_tensor, initial_state)


def state_invariants(state: Any) -> Any:
    """Shape invariants for a state nest: the leading dimension `N` may change, nothing else."""
    return tf.nest.map_structure(
        lambda x: tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else x.shape,
        state,
    )


def log_probs(logits: tf.Tensor) -> tf.Tensor:
    """`(N, V)` logits of any float dtype -> `(N, V)` float32 log-probabilities."""
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)


def never_emitted(
    values: tf.Tensor, start_id: tf.Tensor, pad_id: tf.Tensor, end_id: tf.Tensor
) -> tf.Tensor:
    """Sets the `<start>` and `<pad>` columns of `(N, V)` logits or log-probabilities to `NEG`.

    No search emits `<start>` (it is only ever fed) or `<pad>` (it only fills the steps after
    `<end>`): a hypothesis with either would have a word position without a word, and its
    attention rows would no longer line up with its words. `end_id` is never masked, even if it
    shares an id with one of them. Ids outside `[0, V)` mask nothing.
    """
    vocab = tf.shape(values)[-1]

    def column(token_id: tf.Tensor) -> tf.Tensor:
        return tf.one_hot(token_id, vocab, on_value=True, off_value=False, dtype=tf.bool)

    special = tf.logical_or(column(start_id), column(pad_id))
    special = tf.logical_and(special, tf.logical_not(column(end_id)))
    return tf.where(special[None], tf.cast(NEG, values.dtype), values)


def as_attention(attention: tf.Tensor) -> tf.Tensor:
    """The step's attention `(N, A)` as float32, checked to be rank 2."""
    attention = tf.cast(tf.convert_to_tensor(attention), tf.float32)
    if attention.shape.rank is not None and attention.shape.rank != 2:
        raise ValueError(f"step must return attention of shape (N, A); got shape {attention.shape}")
    return attention


def write_step(buffer: tf.Tensor, index: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Writes `values` `(N, ...)` at step `index` of `buffer` `(N, T, ...)`.

    A `tf.where` over a one-hot mask rather than a scatter: it keeps every shape static, so it
    compiles under XLA.
    """
    mask = tf.one_hot(index, tf.shape(buffer)[1], on_value=True, off_value=False, dtype=tf.bool)
    extra = buffer.shape.rank - 2
    mask = tf.reshape(mask, [1, -1] + [1] * extra)
    return tf.where(mask, tf.expand_dims(values, 1), buffer)


def gnmt_length_penalty(lengths: tf.Tensor, alpha: float) -> tf.Tensor:
    """The GNMT length penalty `((5 + n) / 6) ** alpha` (Wu et al., 2016), float32."""
    lengths = tf.cast(lengths, tf.float32)
    if alpha == 0:
        return tf.ones_like(lengths)
    return tf.pow((5.0 + lengths) / 6.0, alpha)


def check_no_repeat_ngram(value: Any) -> None:
    """Raises `UserError` unless `value` is an int >= 0 or a scalar int tensor."""
    check_int("no_repeat_ngram", value, 0)


def repeated_ngrams(
    history: tf.Tensor, index: tf.Tensor, size: int | tf.Tensor, vocab: Any, end_id: tf.Tensor
) -> tf.Tensor | None:
    """The `(N, V)` tokens each row must not emit at step `index`: those that would complete an
    n-gram of `size` tokens already in its own history (fairseq's and Hugging Face's
    `no_repeat_ngram_size`; `size` 1: no token twice).

    The history is the row's generated tokens, `history[:, :index]` (the tokens after
    `<start>`). `<end>` is never banned, so a hypothesis can always finish (an alive one holds
    no `<end>` anyway). Ids outside `[0, V)` ban nothing.

    Args:
        history: `(N, T)` int32; positions `>= index` are ignored.
        index: the scalar position about to be generated (0 after `<start>`).
        size: `n`, a Python int or a scalar int tensor (an export's input); 0 bans nothing.
        vocab: `V`, an int or a scalar tensor.
        end_id: the `<end>` id.

    Returns:
        `(N, V)` bool, True where banned; None when `size` is known to be 0 (nothing to
        compute: the caller's graph stays as it was).
    """
    known = size if is_python_int(size) else tf.get_static_value(size)
    if known is not None and known <= 0:
        return None
    size = tf.cast(size, tf.int32)
    shape = tf.stack([tf.shape(history)[0], vocab])

    def ban() -> tf.Tensor:
        steps = tf.shape(history)[1]
        start = tf.range(steps)  # (T,) where an n-gram of the history starts
        latest = index - size + 1  # where the history's last n - 1 tokens start

        def compare(offset, match):
            # Token `offset` of each n-gram against token `offset` of the last n - 1 tokens.
            earlier = tf.gather(history, tf.minimum(start + offset, steps - 1), axis=1)
            last = tf.gather(history, tf.clip_by_value(latest + offset, 0, steps - 1), axis=1)
            return offset + 1, match & tf.equal(earlier, last[:, None])

        # The n-grams that lie in the history (start + n <= index), then those whose first n - 1
        # tokens are the history's last n - 1: their n-th token would repeat them.
        within = tf.broadcast_to(start[None] + size <= index, tf.shape(history))
        _, match = tf.while_loop(lambda offset, _: offset < size - 1, compare,
                                 (tf.constant(0), within))
        completing = tf.gather(history, tf.minimum(start + size - 1, steps - 1), axis=1)
        match &= (completing >= 0) & (completing < vocab)
        rows = tf.broadcast_to(tf.range(tf.shape(history)[0])[:, None], tf.shape(history))
        where = tf.stack([rows, tf.clip_by_value(completing, 0, vocab - 1)], axis=-1)
        counts = tf.scatter_nd(tf.reshape(where, [-1, 2]),
                               tf.reshape(tf.cast(match, tf.int32), [-1]), shape)
        end = tf.one_hot(end_id, vocab, on_value=True, off_value=False, dtype=tf.bool)
        return (counts > 0) & tf.logical_not(end)[None]

    if known is not None:
        return ban()
    # An export's input: a search that bans nothing stays bit-identical, and skips the work.
    return tf.cond(size > 0, ban, lambda: tf.zeros(shape, tf.bool))


def without(values: tf.Tensor, banned: tf.Tensor | None) -> tf.Tensor:
    """`(N, V)` values with the `banned` `(N, V)` columns at `NEG` (unchanged for None)."""
    return values if banned is None else tf.where(banned, tf.cast(NEG, values.dtype), values)
