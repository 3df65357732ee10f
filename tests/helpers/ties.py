"""Comparing two decodes of one model computed two ways (in process and in an export, two
engines, two backends) on any CPU.

Two computations of the same model agree to about 1e-6 but not bit for bit: another kernel,
another summation order, another instruction set. Where two tokens' log-probabilities are
closer than that at some step, the argmax (or the beam's ranking) may pick either, and from
there the two decodes follow different paths. So a test states what the code promises with an
honest margin: the two token sequences are equal, or equal up to a step where the two tokens
they chose there are within `TIE_TOLERANCE` of each other under the model; the test then
checks everything else (scores, attention, words) on the rows that agree whole.

Dimensions: `B` rows, `T` steps, `V` vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Two log-probabilities closer than this are a tie that rounding may break either way: about a
#: hundred times float32's rounding of a log-softmax over a few hundred logits.
TIE_TOLERANCE = 1e-4


def _cut(tokens: Sequence[int], end_id: int | None) -> list[int]:
    """The tokens up to and including `end_id` (all of them when it is None or absent)."""
    tokens = [int(t) for t in tokens]
    if end_id is not None and end_id in tokens:
        return tokens[: tokens.index(end_id) + 1]
    return tokens


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first step where `a` and `b` differ (a missing token counts), None when equal."""
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b) or a[index] != b[index]:
            return index
    return None


def step_log_probs(step: Callable, state: Callable[[int], object], start_id: int
                   ) -> Callable[[int, list[int]], np.ndarray]:
    """`next_log_probs(row, prefix) -> (V,)`: the model's log-probabilities of the token after
    `prefix` (the generated tokens, without `<start>`) for example `row`, by running `step`
    (a `common.decoding` step function) over `<start>` and the prefix from `state(row)`, that
    row's initial decoding state (each leaf with a leading dimension of 1)."""
    import keras

    def next_log_probs(row: int, prefix: list[int]) -> np.ndarray:
        current = state(row)
        logits = None
        for index, token in enumerate([start_id, *prefix]):
            logits, current, _ = step(keras.ops.convert_to_tensor([token], "int32"), current,
                                      keras.ops.convert_to_tensor(index, "int32"))
        logits = keras.ops.convert_to_numpy(keras.ops.cast(logits, "float32"))[0]
        return logits - np.logaddexp.reduce(logits.astype(np.float64))

    return next_log_probs


def rows_that_agree(got: np.ndarray, expected: np.ndarray,
                    next_log_probs: Callable[[int, list[int]], np.ndarray],
                    end_id: int | None = None, tolerance: float = TIE_TOLERANCE,
                    ) -> np.ndarray:
    """Asserts that each row of `got` `(B, T)` is `expected`'s, or parts from it at a near tie;
    returns `(B,)` bool, True for the rows that agree whole (compare the rest on those).

    A row parts at a near tie when, at the first step where the two differ, both tokens'
    log-probabilities after their common prefix (`next_log_probs(row, prefix)`) are within
    `tolerance` of each other. Tokens after `end_id` are not compared.
    """
    same = np.ones(len(expected), bool)
    for row in range(len(expected)):
        a, b = _cut(got[row], end_id), _cut(expected[row], end_id)
        index = first_difference(a, b)
        if index is None:
            continue
        same[row] = False
        assert index < len(a) and index < len(b), (
            f"row {row}: one decode stops where the other goes on, not at a tie: {a} vs {b}")
        log_probs = next_log_probs(row, a[:index])
        gap = abs(float(log_probs[a[index]]) - float(log_probs[b[index]]))
        assert gap <= tolerance, (
            f"row {row} parts at step {index} ({a[index]} vs {b[index]}), where the model's "
            f"log-probabilities differ by {gap:.3g} > {tolerance}: not a tie rounding can "
            f"break; {a} vs {b}")
    return same
