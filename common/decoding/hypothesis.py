"""`Hypothesis`: one of the n best outputs of a beam, as both families report it.

`CaptionHypothesis` and `TranslationHypothesis` differ only in their JSON keys and in the
output they are read from, so the fields, the JSON and the reading from a `DecodingModule`'s
output dict (`n_best_from_outputs`) are written once here. Importing it imports neither
TensorFlow nor NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass
class Hypothesis:
    """A hypothesis: its text, tokens, the sum of log-probabilities (`score`), the
    length-normalized score the beam ranks by, and whether it ended with `<end>`.

    Class attributes:
        OUTPUT: the module's text output (`"captions"`); the hypotheses are read from
            `n_best_<OUTPUT>`, `n_best_tokens`, ...
        TEXT_KEY, TOKENS_KEY: their names in the JSON.
    """

    OUTPUT: ClassVar[str] = ""
    TEXT_KEY: ClassVar[str] = "text"
    TOKENS_KEY: ClassVar[str] = "tokens"

    text: str
    tokens: list[str]
    score: float
    normalized_score: float
    finished: bool

    def json(self) -> dict[str, Any]:
        return {self.TEXT_KEY: self.text, self.TOKENS_KEY: self.tokens, "score": self.score,
                "normalized_score": self.normalized_score, "finished": self.finished}

    @classmethod
    def n_best_from_outputs(cls, outputs: dict[str, Any], row: int,
                            n_best: int) -> list[Hypothesis]:
        """The first `n_best` hypotheses of `row` of a module's outputs, best first, without
        the slots beam search could not fill."""
        from common.export.beam_sizes import UNFILLED_SCORE

        hypotheses = []
        for k in range(n_best):
            score = float(outputs["n_best_scores"][row, k])
            if score <= UNFILLED_SCORE:
                continue
            length = int(outputs["n_best_lengths"][row, k])
            hypotheses.append(cls(
                outputs[f"n_best_{cls.OUTPUT}"][row, k].decode("utf-8"),
                [t.decode("utf-8") for t in outputs["n_best_tokens"][row, k, :length]],
                score, float(outputs["n_best_normalized_scores"][row, k]),
                bool(outputs["n_best_finished"][row, k])))
        return hypotheses
