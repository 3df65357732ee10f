"""A search over a Keras model's step, compiled by the backend it runs on.

The strategies (`common.decoding`) are `keras.ops`; what differs between backends is only how
a whole search is compiled: `tf.function` on TensorFlow, `jax.jit` on JAX, where the model's
variables become arguments (`keras.StatelessScope`), so that new weights (each epoch's
validation) reuse the compiled program instead of baking the old ones in. Elsewhere the
search runs eagerly.

`CompiledSearch(model, search)` wraps `search(inputs) -> Decoded`, a function of a batch's
inputs (a dict of arrays) that calls the model; `__call__(inputs, state=None)` runs it, on
the model's own variables or on `state = (trainable values, non-trainable values)` (the JAX
trainer's). One program per input shape is compiled and kept.

Dimensions: `B` batch, `K` hypotheses, `T` steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from common.decoding.decoded import Decoded


class CompiledSearch:
    """`search(inputs) -> Decoded` compiled for the backend (see the module docstring).

    Args:
        model: the Keras model whose variables `search` reads.
        search: `(inputs: dict of (B, ...) tensors) -> Decoded`.
    """

    def __init__(self, model: Any, search: Callable[[dict[str, Any]], Decoded]):
        self.model = model
        self.search = search
        self.backend = keras.backend.backend()
        self._compiled: Callable[..., Any] | None = None

    def _compile(self) -> Callable[..., Any]:
        if self.backend == "jax":
            import jax

            model, search = self.model, self.search

            def run(trainable, non_trainable, inputs):
                mapping = [*zip(model.trainable_variables, trainable),
                           *zip(model.non_trainable_variables, non_trainable)]
                with keras.StatelessScope(state_mapping=mapping):
                    return tuple(search(inputs))

            return jax.jit(run)
        if self.backend == "tensorflow":
            import tensorflow as tf

            function = tf.function(lambda inputs: tuple(self.search(inputs)), autograph=False,
                                   reduce_retracing=True)
            return lambda trainable, non_trainable, inputs: function(inputs)
        return lambda trainable, non_trainable, inputs: tuple(self.search(inputs))

    def __call__(self, inputs: dict[str, Any],
                 state: tuple[Sequence[Any], Sequence[Any]] | None = None) -> Decoded:
        """The search of one batch, as NumPy arrays; on `state`'s values when given (JAX:
        `(trainable, non-trainable)` in the model's order), else the model's variables."""
        if self._compiled is None:
            self._compiled = self._compile()
        if state is None:
            state = ([v.value for v in self.model.trainable_variables],
                     [v.value for v in self.model.non_trainable_variables])
        inputs = {key: keras.ops.convert_to_tensor(value) for key, value in inputs.items()}
        out = self._compiled(list(state[0]), list(state[1]), inputs)
        return Decoded(*(np.asarray(keras.ops.convert_to_numpy(t)) for t in out))


def concatenate(parts: Sequence[Decoded], rows: int | None = None) -> Decoded:
    """The `Decoded` of several batches, one after the other (the first `rows` rows)."""
    joined = Decoded(*(np.concatenate(fields) for fields in zip(*parts)))
    return joined if rows is None else Decoded(*(t[:rows] for t in joined))
