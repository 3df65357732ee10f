"""The translators' validation on the JAX backend: full-pass greedy decoding of the prepared
folder's `valid` pairs, scored as `seq2seq.train._make_validate` scores them.

`full_pass_validation(config, prepared, examples)` (the family's `full_pass_validation` hook)
takes the first `examples` pairs of `valid.npz` (bucket by bucket, narrowest first; the folder
keeps no other order), their sources as ids and their references as the detokenized target
tokens (so a word outside the target vocabulary is `<unk>` there), and scores the decoded
texts with sacreBLEU's BLEU and chrF and exact match (`common.metrics.translation`), case-
insensitively for a lowercasing run: the numbers the TensorFlow trainer's validation reports,
on the prepared folder's pairs. It imports no TensorFlow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.config import from_dict
from common.decoding.full_pass import FullPassValidation
from common.text.detokenizer import detokenize
from common.text.specials import END, END_ID, PAD, START, START_ID


def _tokens(ids: np.ndarray | list[int], vocabulary: list[str], source: list[str]) -> list[str]:
    """The words of `ids` (copy ids past the vocabulary name a source position)."""
    words = []
    for i in ids:
        i = int(i)
        word = vocabulary[i] if i < len(vocabulary) else (
            source[i - len(vocabulary)] if i - len(vocabulary) < len(source) else "<unk>")
        if word not in (PAD, START, END):
            words.append(word)
    return words


def full_pass_validation(config: dict[str, Any], prepared: Any,
                         examples: int) -> FullPassValidation | None:
    """The first `examples` validation pairs of `prepared` (a `common.training.prepare.
    Prepared`) as a `FullPassValidation` (None: the folder has no `valid` split)."""
    from common.metrics.translation import translation_scores
    from seq2seq.config import RunConfig

    if not examples or "valid" not in prepared.splits:
        return None
    run = from_dict(RunConfig, config)
    arrays = prepared.splits["valid"]
    widths = sorted(int(k.split(".")[1]) for k in arrays if k.startswith("source."))
    chosen: dict[str, list[np.ndarray]] = {"source": [], "target_out": [], "source_copy": []}
    left = examples
    for width in widths:
        if left <= 0:
            break
        for field in chosen:
            if f"{field}.{width}" in arrays:
                chosen[field].append(arrays[f"{field}.{width}"][:left])
        left -= len(arrays[f"source.{width}"][:left])
    width = max(len(rows[0]) for rows in chosen["source"])

    def stacked(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts])

    inputs = {"source": stacked(chosen["source"])}
    if run.model.copy and chosen["source_copy"]:
        inputs["source_copy"] = stacked(chosen["source_copy"])
    source_words, target_words = prepared.vocabularies["source"], prepared.vocabularies["target"]
    sources = [_tokens(row, source_words, []) for row in inputs["source"]]
    references = [detokenize(_tokens(row, target_words, source))
                  for row, source in zip(stacked(chosen["target_out"]), sources)]
    max_length = run.model.max_decode_length
    if run.model.arch == "transformer":
        max_length = min(max_length, run.model.transformer.max_length)

    def model_inputs(batch: dict[str, Any], prefix: Any) -> dict[str, Any]:
        return {**batch, "target_in": prefix}

    def score(decoded: list[list[int]]) -> dict[str, float]:
        texts = [detokenize(_tokens(ids, target_words, source))
                 for ids, source in zip(decoded, sources)]
        scores = translation_scores(texts, references, lowercase=run.data.lowercase)
        return {"bleu": scores["bleu"], "chrf": scores["chrf"],
                "exact_match": scores["exact_match"]}

    return FullPassValidation(inputs, model_inputs, start_id=START_ID, end_id=END_ID,
                              max_length=max_length,
                              score=score)
