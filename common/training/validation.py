"""Validation by decoding, written once for both backends: the family's examples, decoded with
`common.decoding`'s search (greedy for one beam, beam search for more) and scored by the
family.

A family builds a `Validation` from its validation split (`Family.validation`): the inputs of
the first `validation_examples` examples (source ids, images), padded to one shape, how its
model starts decoding them, and how decoded ids are scored (BLEU, CIDEr, ...: the ids become
text in Python, the same on every backend). `Validator` decodes them in batches of one fixed
size (the last padded with copies of its first row), each batch one compiled search
(`common.decoding.compiled.CompiledSearch`: `tf.function` on TensorFlow, `jax.jit` over the
variables' values on JAX), and hands the scorer the `N` examples' `Decoded`. The TensorFlow
trainer and the JAX trainer call the same `Validator`, so one checkpoint validates to the same
record on either backend (`tests/jax/test_jax_validation.py`).

Dimensions: `N` examples, `B` a batch of them, `T` decoded steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.decoding.decoded import Decoded
from common.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY

#: The examples one compiled search decodes at a time.
BATCH_SIZE = 64


@dataclass(frozen=True)
class Validation:
    """A family's validation examples and how they are decoded and scored.

    Args:
        inputs: the `N` examples' inputs, each `(N, ...)` and padded to one shape (a source
            `(N, S)`, images `(N, H, W, 3)`).
        initial_state: `(model, inputs of a batch, max_length) -> state`, the model's decoding
            state for those inputs; the step is `model.make_step()`.
        start_id: the id decoding starts from (`<start>`).
        end_id: the id that ends a hypothesis (`<end>`).
        max_length: `T`, the most tokens decoded, `<end>` included.
        score: `(Decoded of the N examples, NumPy, K = 1) -> {name: value}`: the metrics (the
            first is `best_metric` "auto"'s) and, optionally, TensorBoard's `samples` (text)
            and `attention` (an image).
        length_penalty: beam search's GNMT length penalty (the run's).
    """

    inputs: dict[str, np.ndarray]
    initial_state: Callable[[Any, dict[str, Any], int], Any]
    start_id: int
    end_id: int
    max_length: int
    score: Callable[[Decoded], dict[str, Any]]
    length_penalty: float = LENGTH_PENALTY

    @property
    def size(self) -> int:
        """`N`."""
        return len(next(iter(self.inputs.values())))


class Validator:
    """Decodes a `Validation`'s examples with `model` and scores them.

    Args:
        model: the family's model (built).
        validation: what to decode and how to score it.
        beam_size: 1: greedy decoding; more: beam search (`validation_beam_size`), with the
            validation's length penalty.
        batch_size: `B`, the examples of one compiled search (at most `N`).
    """

    def __init__(self, model: Any, validation: Validation, beam_size: int = BEAM_SIZE,
                 batch_size: int = BATCH_SIZE):
        from common.decoding import default_method, make_strategy
        from common.decoding.compiled import CompiledSearch

        self.validation = validation
        self.batch_size = min(batch_size, validation.size)
        strategy = make_strategy(default_method(beam_size), beam_size=beam_size,
                                 length_penalty=validation.length_penalty)
        rows = self.batch_size

        def search(inputs: dict[str, Any]) -> Decoded:
            return strategy(model.make_step(),
                            validation.initial_state(model, inputs, validation.max_length),
                            rows, validation.start_id, validation.end_id,
                            validation.max_length)

        self.search = CompiledSearch(model, search)

    def batches(self) -> list[dict[str, np.ndarray]]:
        """The inputs in batches of `batch_size` rows, the last padded with copies of its first
        row (one shape, one compiled search)."""
        n, size = self.validation.size, self.batch_size
        out = []
        for start in range(0, n, size):
            rows = np.arange(start, min(start + size, n))
            rows = np.concatenate([rows, np.full(size - len(rows), rows[0])])
            out.append({key: value[rows] for key, value in self.validation.inputs.items()})
        return out

    def decode(self, state: tuple[list, list] | None = None) -> Decoded:
        """The `N` examples' `Decoded` (NumPy), on `state`'s variable values when given (the
        JAX trainer's `(trainable, non-trainable)`), else the model's."""
        from common.decoding.compiled import concatenate

        parts = [self.search(batch, state) for batch in self.batches()]
        return concatenate(parts, self.validation.size)

    def __call__(self, state: tuple[list, list] | None = None) -> dict[str, Any]:
        return self.validation.score(self.decode(state))
