"""Helpers shared by the decoding loops: argument checks, state nests, step buffers, the
tokens a step must not emit. Written in `keras.ops`, so they run on every backend (and trace
into a SavedModel on TensorFlow).

Dimensions: `N` rows of a step (`B`, or `B * K` in beam search), `T` steps (`max_length`),
`A` attention positions, `V` vocabulary.
"""

from __future__ import annotations

import numbers
from typing import Any

import keras
from keras import ops

from common.errors import UserError

# A log-probability that no real hypothesis reaches, finite so that sums and divisions stay
# finite (-inf would turn `0 * -inf` or `-inf - -inf` into NaN).
NEG = -1e9


def is_python_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_tensor(value: Any) -> bool:
    """A tensor of any backend (or a NumPy array): what a traced argument is."""
    return keras.ops.is_tensor(value) or hasattr(value, "shape") and hasattr(value, "dtype")


def static_int(value: Any) -> int | None:
    """`value` as a Python int when it is one or a tensor whose value is known while tracing
    (a constant); None for a traced value."""
    if is_python_int(value):
        return int(value)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        known = tf.get_static_value(value)
        return None if known is None else int(known)
    try:
        return int(value)
    except Exception:  # a traced value (a JAX tracer)
        return None


def check_int(name: str, value: Any, minimum: int, allow_tensor: bool = True) -> None:
    """Raises `UserError` unless `value` is an int >= `minimum` (or, if allowed, a tensor)."""
    if is_python_int(value):
        if value < minimum:
            raise UserError(f"{name} must be an integer >= {minimum}; got {value}")
        return
    if allow_tensor and is_tensor(value):
        rank = getattr(value.shape, "rank", None) if hasattr(value.shape, "rank") else len(
            value.shape)
        if rank not in (None, 0):
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
    return keras.tree.map_structure(ops.convert_to_tensor, initial_state)


def dims(x: Any) -> list:
    """The shape of `x`, each dimension a Python int where it is static (a scalar tensor
    where it is not: only while tracing on TensorFlow)."""
    return list(ops.shape(x))


def log_probs(logits: Any) -> Any:
    """`(N, V)` logits of any float dtype -> `(N, V)` float32 log-probabilities."""
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)


def one_hot_bool(index: Any, depth: Any) -> Any:
    """`(depth,)` bool, True at `index` (nowhere when it is outside `[0, depth)`)."""
    return ops.equal(ops.arange(depth, dtype="int32"), ops.cast(index, "int32"))


def never_emitted(values: Any, start_id: Any, pad_id: Any, end_id: Any) -> Any:
    """Sets the `<start>` and `<pad>` columns of `(N, V)` logits or log-probabilities to `NEG`.

    No search emits `<start>` (it is only ever fed) or `<pad>` (it only fills the steps after
    `<end>`): a hypothesis with either would have a word position without a word, and its
    attention rows would no longer line up with its words. `end_id` is never masked, even if it
    shares an id with one of them. Ids outside `[0, V)` mask nothing.
    """
    vocab = ops.shape(values)[-1]
    special = ops.logical_or(one_hot_bool(start_id, vocab), one_hot_bool(pad_id, vocab))
    special = ops.logical_and(special, ops.logical_not(one_hot_bool(end_id, vocab)))
    return ops.where(special[None], ops.cast(NEG, values.dtype), values)


def as_attention(attention: Any) -> Any:
    """The step's attention `(N, A)` as float32, checked to be rank 2."""
    attention = ops.cast(ops.convert_to_tensor(attention), "float32")
    if len(attention.shape) != 2:
        raise ValueError(f"step must return attention of shape (N, A); got shape {attention.shape}")
    return attention


def write_step(buffer: Any, index: Any, values: Any) -> Any:
    """Writes `values` `(N, ...)` at step `index` of `buffer` `(N, T, ...)`.

    A `where` over a one-hot mask rather than a scatter: every shape stays static, so it
    compiles under XLA (and `jax.jit`).
    """
    mask = one_hot_bool(index, ops.shape(buffer)[1])
    mask = ops.reshape(mask, [1, -1] + [1] * (len(buffer.shape) - 2))
    return ops.where(mask, ops.expand_dims(ops.cast(values, buffer.dtype), 1), buffer)


def gnmt_length_penalty(lengths: Any, alpha: float) -> Any:
    """The GNMT length penalty `((5 + n) / 6) ** alpha` (Wu et al., 2016), float32."""
    lengths = ops.cast(lengths, "float32")
    if alpha == 0:
        return ops.ones_like(lengths)
    return ops.power((5.0 + lengths) / 6.0, alpha)


def check_no_repeat_ngram(value: Any) -> None:
    """Raises `UserError` unless `value` is an int >= 0 or a scalar int tensor."""
    check_int("no_repeat_ngram", value, 0)


def repeated_ngrams(history: Any, index: Any, size: int | Any, vocab: Any, end_id: Any
                    ) -> Any | None:
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
    known = static_int(size)
    if known is not None and known <= 0:
        return None
    rows, steps = ops.shape(history)[0], ops.shape(history)[1]

    def ban(size) -> Any:
        size = ops.cast(size, "int32")
        start = ops.arange(steps, dtype="int32")  # (T,) where an n-gram of the history starts
        latest = index - size + 1  # where the history's last n - 1 tokens start
        # The n-grams that lie in the history (start + n <= index), then those whose first n - 1
        # tokens are the history's last n - 1: their n-th token would repeat them.
        match = ops.broadcast_to((start + size <= index)[None], ops.shape(history))

        def compare(offset, match):
            # Token `offset` of each n-gram against token `offset` of the last n - 1 tokens.
            earlier = ops.take(history, ops.minimum(start + offset, steps - 1), axis=1)
            last = ops.take(history, ops.clip(latest + offset, 0, steps - 1), axis=1)
            return offset + 1, match & ops.equal(earlier, last[:, None])

        if known is not None:  # unrolled: a static count of comparisons
            for offset in range(known - 1):
                _, match = compare(offset, match)
        else:
            _, match = ops.while_loop(lambda offset, _: offset < size - 1, compare,
                                      (ops.convert_to_tensor(0, "int32"), match))
        completing = ops.take(history, ops.minimum(start + size - 1, steps - 1), axis=1)
        match = match & (completing >= 0) & (completing < vocab)
        row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], ops.shape(history))
        where = ops.stack([row_ids, ops.clip(completing, 0, vocab - 1)], axis=-1)
        counts = ops.scatter(ops.reshape(where, (-1, 2)),
                             ops.reshape(ops.cast(match, "int32"), (-1,)), (rows, vocab))
        return (counts > 0) & ops.logical_not(one_hot_bool(end_id, vocab))[None]

    if known is not None:
        return ban(known)
    # An export's input: a search that bans nothing stays bit-identical, and skips the work.
    return ops.cond(size > 0, lambda: ban(size),
                    lambda: ops.zeros((rows, vocab), "bool"))


def without(values: Any, banned: Any | None) -> Any:
    """`(N, V)` values with the `banned` `(N, V)` columns at `NEG` (unchanged for None)."""
    return values if banned is None else ops.where(banned, ops.cast(NEG, values.dtype), values)
