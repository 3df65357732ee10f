"""Translation metrics: sacreBLEU corpus BLEU and chrF, and the exact-match rate.

Scores are computed with sacreBLEU's own API and default settings (BLEU: 13a tokenization,
exponential smoothing, case-sensitive; chrF: character 6-grams, beta 2) on detokenized, cased
text as it stands in the data files, so the numbers are comparable with published sacreBLEU
scores. A model trained on lowercased text cannot produce the references' capitals, so its
output is scored with `lowercase=True` (sacreBLEU lowercases both sides; the BLEU
and chrF signatures then say `case:lc`): a case-insensitive score, not comparable with
cased ones. The signatures say exactly how they were computed.

Papers: Papineni et al., 2002, "BLEU: a Method for Automatic Evaluation of Machine
Translation"; Popović, 2015, "chrF: character n-gram F-score for automatic MT evaluation";
Post, 2018, "A Call for Clarity in Reporting BLEU Scores" (sacreBLEU).

Example:
>>> scores = translation_scores(["the cat is on the mat"], ["the cat is on the mat"])
>>> round(scores["bleu"], 6), round(scores["chrf"], 6), scores["exact_match"]
(100.0, 100.0, 100.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from common.errors import UserError


def _reference_streams(references: Sequence[str | Sequence[str]]) -> list[list[str | None]]:
    """Per-hypothesis references -> sacreBLEU's reference streams (None where one is short)."""
    per_item = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
    for i, refs in enumerate(per_item):
        if not refs or not all(isinstance(r, str) for r in refs):
            raise UserError(f"reference {i} must be a string or a non-empty list of strings, got {refs!r}")
    width = max(len(refs) for refs in per_item)
    return [[refs[k] if k < len(refs) else None for refs in per_item] for k in range(width)]


def translation_scores(
    hypotheses: Sequence[str], references: Sequence[str | Sequence[str]],
    lowercase: bool = False,
) -> dict[str, Any]:
    """Corpus BLEU, chrF and exact match of detokenized translations, on a 0-100 scale.

    Args:
        hypotheses: one translation per source sentence, detokenized and cased.
        references: for each hypothesis, its reference translation, or a list of several
            references (as many as each sentence has).
        lowercase: compare case-insensitively (sacreBLEU's `lowercase=True`, exact match
            too): for a model trained on lowercased text.

    Returns:
        A dict with `"bleu"` (corpus BLEU), `"chrf"` (corpus chrF), `"exact_match"` (the
        percentage of hypotheses equal to one of their references, ignoring leading and
        trailing whitespace), `"count"` (the number of hypotheses), `"lowercase"`,
        `"bleu_signature"` and `"chrf_signature"` (sacreBLEU's signatures), and BLEU's parts: `"bleu_precisions"`
        (the 1- to 4-gram precisions), `"brevity_penalty"`, `"hyp_length"`, `"ref_length"`.

    Raises:
        UserError: no hypotheses, a different number of references, or non-string input.

    Example:
    >>> translation_scores(["Hola, Tom."], [["Hola, Tom.", "¡Hola, Tom!"]])["exact_match"]
    100.0
    """
    hypotheses = list(hypotheses)
    references = list(references)
    if not hypotheses:
        raise UserError("no hypotheses to score; expected at least one translation")
    if len(hypotheses) != len(references):
        raise UserError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; "
            "expected one reference (or list of references) per hypothesis"
        )
    for i, hypothesis in enumerate(hypotheses):
        if not isinstance(hypothesis, str):
            raise UserError(f"hypothesis {i} must be a string, got {type(hypothesis).__name__}")
    streams = _reference_streams(references)

    bleu_metric, chrf_metric = BLEU(lowercase=lowercase), CHRF(lowercase=lowercase)
    bleu = bleu_metric.corpus_score(hypotheses, streams)
    chrf = chrf_metric.corpus_score(hypotheses, streams)

    def same(hyp: str, ref: str) -> bool:
        hyp, ref = hyp.strip(), ref.strip()
        return hyp.lower() == ref.lower() if lowercase else hyp == ref

    matches = sum(
        any(ref is not None and same(hyp, ref) for ref in refs)
        for hyp, refs in zip(hypotheses, zip(*streams))
    )
    return {
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "exact_match": 100.0 * matches / len(hypotheses),
        "count": len(hypotheses),
        "lowercase": bool(lowercase),
        "bleu_signature": str(bleu_metric.get_signature()),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_precisions": [float(p) for p in bleu.precisions],
        "brevity_penalty": float(bleu.bp),
        "hyp_length": int(bleu.sys_len),
        "ref_length": int(bleu.ref_len),
    }


def group_references(sources: Sequence[str],
                     references: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Pairs that share a source, as one source with all its references.

    A test set such as Tatoeba's gives one English sentence several Spanish translations on
    separate lines; scored line by line, a system (which translates a source one way) can match
    at most one of them, so even a perfect one scores below 100. Grouped, each source is
    translated once and scored against every reference it has (sacreBLEU's multi-reference
    BLEU and chrF; exact match against any).

    Returns:
        `(sources, references)`: each distinct source once, in the order of its first line, and
        its distinct references in line order.

    Example:
    >>> group_references(["Hi.", "Run!", "Hi."], ["Hola.", "¡Corre!", "Buenas."])
    (['Hi.', 'Run!'], [['Hola.', 'Buenas.'], ['¡Corre!']])
    """
    if len(sources) != len(references):
        raise UserError(f"got {len(sources)} sources but {len(references)} references")
    grouped: dict[str, list[str]] = {}
    for source, reference in zip(sources, references):
        kept = grouped.setdefault(source, [])
        if reference not in kept:
            kept.append(reference)
    return list(grouped), list(grouped.values())


def several_references(sources: Sequence[str], references: Sequence[str]) -> int:
    """How many lines have a source that other lines give a different reference: the lines
    that line-by-line scoring cannot all match (`group_references`)."""
    distinct, grouped = group_references(sources, references)
    several = {source for source, refs in zip(distinct, grouped) if len(refs) > 1}
    return sum(source in several for source in sources)


# The name `seq2seq.evaluate` imports.
corpus_scores = translation_scores
