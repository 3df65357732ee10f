"""Greedy decoding over a model's full forward pass, in `keras.ops` only (any backend).

The families' cached decoding steps and the rest of `common.decoding` are TensorFlow ops
(`tf.while_loop`); a run on Keras's JAX backend, where TensorFlow may be absent, validates with
this instead. At step `t` the prefix decoded so far, padded to a fixed `(B, T)`, goes through the
model's `call` (causal: position `t` sees positions `<= t` only), and position `t`'s logits give
the next token by argmax. One compiled shape serves every step (`jax.jit` over
`model.stateless_call` on JAX; eager elsewhere); a row stops at `<end>`, and the loop when every
row has. It costs `T` full passes where the cached step costs one position each: meant for the
50-200 examples of a validation, not for serving.

`FullPassValidation` is what a family's `Family.full_pass_validation` hook gives the JAX
trainer: the inputs to decode, how the model takes them with a prefix, the ids that start and
end a decode, and the scorer (the family's own metrics on the decoded texts).

Dimensions: `N` examples, `B` a batch of them, `T` the decoded length (`max_length`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FullPassValidation:
    """A family's validation by full-pass greedy decoding.

    Args:
        inputs: the fixed inputs of the `N` examples, each `(N, ...)` (a source `(N, S)`, an
            image `(N, H, W, C)`), padded to one shape.
        model_inputs: `(inputs of a batch, prefix (B, T) int32) -> the model's call inputs`.
        start_id: the id the prefix starts with (`<start>`).
        end_id: the id that ends a row (`<end>`).
        max_length: `T`, the most tokens decoded (`<end>` included).
        score: `(ids of each example: N lists, without <start> and <end>) -> {metric: number}`,
            its first metric `best_metric` "auto"'s, as the family's TensorFlow validation.
        logits: `(the model's call outputs) -> logits (B, T, V)` (the captioner's call
            returns a dict); default: the outputs are the logits.
    """

    inputs: dict[str, np.ndarray]
    model_inputs: Callable[[dict[str, Any], Any], dict[str, Any]]
    start_id: int
    end_id: int
    max_length: int
    score: Callable[[list[list[int]]], dict[str, float]]
    logits: Callable[[Any], Any] | None = None

    @property
    def size(self) -> int:
        """`N`."""
        return len(next(iter(self.inputs.values())))


def greedy_full_pass(model: Any, validation: FullPassValidation, batch_size: int = 64,
                     state: tuple[list, list] | None = None) -> list[list[int]]:
    """Greedy-decode `validation.inputs` with `model`'s full forward pass.

    Args:
        model: a built Keras model whose `call(model_inputs, training=False)` gives logits
            `(B, T, V)` (through `validation.logits`), causal along `T`.
        validation: what to decode (`FullPassValidation`).
        batch_size: `B`; the last batch is padded with copies of its first row, so that one
            shape is compiled.
        state: `(trainable values, non-trainable values)` to decode with (the JAX trainer's
            state); default the model's variables.

    Returns:
        For each of the `N` examples its token ids, without `<start>` and `<end>`.
    """
    import keras

    n = validation.size
    length = validation.max_length
    next_token = _next_token_fn(model, validation)
    if state is None:
        state = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables])
    out: list[list[int]] = []
    for begin in range(0, n, batch_size):
        rows = np.arange(begin, min(begin + batch_size, n))
        real = len(rows)
        rows = np.concatenate([rows, np.full(batch_size - real, rows[0])]) if n > batch_size \
            else rows
        inputs = {k: v[rows] for k, v in validation.inputs.items()}
        prefix = np.zeros((len(rows), length), np.int32)
        prefix[:, 0] = validation.start_id
        tokens = np.zeros((len(rows), length), np.int32)
        done = np.zeros(len(rows), bool)
        lengths = np.full(len(rows), length)
        for t in range(length):
            chosen = np.asarray(keras.ops.convert_to_numpy(
                next_token(state, inputs, prefix, np.int32(t)))).astype(np.int32)
            tokens[:, t] = np.where(done, 0, chosen)
            ended = ~done & (chosen == validation.end_id)
            lengths[ended] = t
            done |= ended
            if done[:real].all() or t + 1 == length:
                break
            prefix[:, t + 1] = tokens[:, t]
        out += [tokens[i, : lengths[i]].tolist() for i in range(real)]
    return out


def _next_token_fn(model: Any, validation: FullPassValidation) -> Callable[..., Any]:
    """`(state, inputs, prefix, t) -> (B,)` the argmax of position `t`'s logits: `jax.jit`
    over `model.stateless_call` on JAX (compiled once per input shape), eager elsewhere."""
    import keras
    from keras import ops

    def logits_at(outputs, t):
        logits = outputs if validation.logits is None else validation.logits(outputs)
        return ops.argmax(ops.take(logits, t, axis=1), axis=-1)

    if keras.backend.backend() != "jax":
        def eager(state, inputs, prefix, t):
            logits = model(validation.model_inputs(inputs, ops.convert_to_tensor(prefix)),
                           training=False)
            return logits_at(logits, int(t))

        return eager
    import jax

    def step(state, inputs, prefix, t):
        logits, _ = model.stateless_call(state[0], state[1],
                                         validation.model_inputs(inputs, prefix),
                                         training=False)
        return logits_at(logits, t)

    return jax.jit(step)
