"""`Decoded`: what every search over a step function returns.

Dimensions: `B` batch, `K` hypotheses per example (1 for greedy and sampling, `n_best` for
beam search), `T` generated steps (`max_length`), `A` attention positions per step (`S` for
translation, `L` for captions; may be 0).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Decoded(NamedTuple):
    """The hypotheses found by `greedy_decode`, `beam_search` or `sample_decode`.

    Hypotheses of one example are ordered best first: beam search returns its finished ones
    by `normalized_scores`, then, only if fewer than `n_best` finished, the best unfinished
    ones. `T` is always `max_length`, whether or not decoding stopped early.

    Attributes:
        tokens: `(B, K, T)` int32. The generated tokens without `<start>`; a finished
            hypothesis ends with `<end>` and holds `pad_id` after it.
        lengths: `(B, K)` int32. Tokens up to and including `<end>` (`T` when unfinished).
        scores: `(B, K)` float32. The sum of the model's log-probabilities of the tokens.
        attention: `(B, K, T, A)` float32. The attention the step function returned when
            it produced each token; zeros after `<end>`.
        finished: `(B, K)` bool. Whether the hypothesis emitted `<end>` within `max_length`.
        normalized_scores: `(B, K)` float32. `scores / lp(lengths)` with the GNMT length
            penalty `lp(n) = ((5 + n) / 6) ** alpha` (beam search); equal to `scores` for greedy
            decoding and sampling.
    """

    tokens: Any
    lengths: Any
    scores: Any
    attention: Any
    finished: Any
    normalized_scores: Any

    def numpy(self) -> Decoded:
        """The same fields as NumPy arrays (from any backend's tensors)."""
        from keras import ops

        return Decoded(*(ops.convert_to_numpy(t) for t in self))
