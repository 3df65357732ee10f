"""`Strategy`: the one call signature every search over a step function answers to.

A strategy is built with its own options (`BeamSearch(beam_size=4, n_best=2)`,
`Sampling(temperature=0.7)`) and called with the decoding problem, the same for all:
`strategy(step, initial_state, batch_size, start_id, end_id, max_length)`. `make_strategy`
(`common.decoding.methods`) builds one by name, so callers choose a method by name instead of
branching on it.

Dimensions: `B` batch, `T` steps (`max_length`), `V` vocabulary, `A` attention positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from keras import ops

from common.decoding.decoded import Decoded
from common.decoding.utils import check_common_args, to_state

StepFn = Callable[[Any, Any, Any], tuple[Any, Any, Any]]


class Problem(NamedTuple):
    """What is decoded, checked and converted: ids are int32 tensors, `state` a tensor nest."""

    step: StepFn
    state: Any
    batch_size: Any
    start_id: Any
    end_id: Any
    max_length: Any
    pad_id: Any


class Strategy:
    """A search over a step function; subclasses implement `search(problem)`.

    Class attributes:
        name: the name it is registered under in `common.decoding.methods`.
        options: the keyword options its constructor takes (`make_strategy` passes these).
    """

    name: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_options(cls, **options: Any) -> Strategy:
        """The strategy built with those of `options` it takes (None meaning its default);
        the others are for other strategies, so a caller can pass one set for any method."""
        return cls(**{k: v for k, v in options.items() if k in cls.options and v is not None})

    def __call__(
        self,
        step: StepFn,
        initial_state: Any,
        batch_size: Any,
        start_id: Any,
        end_id: Any,
        max_length: Any,
        pad_id: int = 0,
    ) -> Decoded:
        """Decodes a batch. Written with `keras.ops` (`ops.while_loop`): on TensorFlow it runs
        eagerly, inside `tf.function` (also with `jit_compile=True` when `max_length` is a
        Python int) and inside exported SavedModels; on JAX eagerly and under `jax.jit`
        (where `batch_size`, `max_length` and the strategy's sizes are Python ints).

        Args:
            step: `step(tokens (N,), state, index) -> (logits (N, V), new_state,
                attention (N, A))`; `index` is the position generated (0 after `<start>`).
            initial_state: a nest of tensors, each with leading dimension `B`.
            batch_size: `B`, an int or a scalar int32 tensor.
            start_id: the token fed at index 0 (`<start>`).
            end_id: the token that finishes a hypothesis (`<end>`, compared by id).
            max_length: `T`, the most tokens generated, `<end>` included (an int or a scalar
                tensor).
            pad_id: the token written after `<end>`.

        Returns:
            A `Decoded`: tokens `(B, K, T)`, attention `(B, K, T, A)`, lengths, scores,
            normalized_scores and finished `(B, K)`, hypotheses best first.
        """
        check_common_args(batch_size, start_id, end_id, max_length, pad_id)
        return self.search(Problem(
            step, to_state(initial_state), batch_size, ops.cast(start_id, "int32"),
            ops.cast(end_id, "int32"), max_length, ops.cast(pad_id, "int32")))

    def search(self, problem: Problem) -> Decoded:
        raise NotImplementedError
