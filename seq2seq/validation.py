"""The translators' validation, the same on both backends: the first `validation_examples`
pairs of the validation split, decoded (`common.training.validation`) and scored by BLEU, chrF
and exact match against their raw references.

What is decoded comes from `ValidationPairs`: the pairs' sources as text and as the model's
tokens, and their references as the data wrote them. The TensorFlow trainer reads them from
the run's data (`pairs_from_data`: the split's first pairs, tokenized as training tokenizes);
`prepare` writes the same into the prepared folder (`valid.examples.json`, `write_pairs`), from
which the JAX trainer reads them (`pairs_from_prepared`) with no TensorFlow. Decoded ids become
text here, in NumPy (`translation_tokens`): the ids a pointer-generator extends the vocabulary
with name the source token they point to, an `<unk>` is replaced by the source token attended
to most (as `translate` does), the specials are dropped and the words joined (`detokenize`),
or a subword run's pieces decoded by SentencePiece.

Dimensions: `N` pairs, `S` source tokens (padded), `T` decoded steps.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.config import atomic_write_text, read_text
from common.decoding.decoded import Decoded
from common.errors import DataError, UserError
from common.text.detokenizer import detokenize
from common.text.specials import END_ID, PAD_ID, START_ID, UNK_ID
from common.training.validation import Validation

#: The prepared folder's file of validation pairs (`write_pairs`).
EXAMPLES_FILE = "valid.examples.json"
#: Sources are padded to a multiple of this (as `seq2seq.inference.pad_batch`).
PAD_MULTIPLE = 8


@dataclass(frozen=True)
class ValidationPairs:
    """Validation pairs as decoded and scored: `sources` (text), `source_tokens` (the model's
    tokens of each), `references` (the raw target text)."""

    sources: list[str]
    source_tokens: list[list[str]]
    references: list[str]

    def first(self, n: int) -> ValidationPairs:
        return ValidationPairs(self.sources[:n], self.source_tokens[:n], self.references[:n])


def pairs_from_data(config: Any, vocabularies: Any, examples: int | None) -> ValidationPairs:
    """The first `examples` pairs (None: all) of the run's validation split, tokenized as for
    training (TensorFlow's tokenizer; a subword run's `vocabularies` give its pieces, None
    means words)."""
    from seq2seq.train import load_split

    valid = load_split(config, "valid", size=examples)
    if not valid.sources:
        raise UserError(f"no validation pairs in {config.data.data or config.data.dataset}")
    tokens = (valid if vocabularies is None
              else vocabularies.tokenize_pairs(valid, None)).source_tokens
    return ValidationPairs(list(valid.sources), [list(t) for t in tokens], list(valid.targets))


def write_pairs(pairs: ValidationPairs, out_dir: Path) -> None:
    """`out_dir/valid.examples.json`: the pairs the JAX trainer validates on."""
    atomic_write_text(out_dir / EXAMPLES_FILE, json.dumps(
        {"sources": pairs.sources, "source_tokens": pairs.source_tokens,
         "references": pairs.references}, ensure_ascii=False))


def pairs_from_prepared(folder: Path, examples: int) -> ValidationPairs:
    """The first `examples` pairs of a prepared folder's `valid.examples.json`.

    Raises:
        UserError: the folder was prepared before the file was written (`prepare` again).
        DataError: the file cannot be read or is not a file of pairs.
    """
    path = Path(folder) / EXAMPLES_FILE
    if not path.is_file():
        raise UserError(f"{folder} has no {EXAMPLES_FILE} (prepared before validation pairs "
                        "were written): run `seq2seq prepare` again, or train with "
                        "--validation-examples 0")
    try:
        data = json.loads(read_text(path, "the validation pairs (JSON)", DataError, "utf-8"))
        pairs = ValidationPairs([str(s) for s in data["sources"]],
                                [[str(t) for t in row] for row in data["source_tokens"]],
                                [str(r) for r in data["references"]])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not a file of validation pairs ({exc!r})") from None
    if not len(pairs.sources) == len(pairs.source_tokens) == len(pairs.references):
        raise DataError(f"{path}: sources, source_tokens and references differ in length")
    return pairs.first(examples)


def translation_tokens(ids: np.ndarray, attention: np.ndarray, source_tokens: list[str],
                       target_tokens: list[str], copy_unknown: bool = True
                       ) -> tuple[list[str], list[int]]:
    """One hypothesis' output tokens and the ids they stand for, what the export's graph
    computes (`seq2seq.export.TranslatorModule.words`): ids `>= V` name the source token at
    `id - V`; an `<unk>` becomes the source token attended to most (unless `copy_unknown` is
    False or the model has no attention); `<pad>`, `<start>` and `<end>` are dropped.

    Args:
        ids: `(T,)` the hypothesis' ids up to its length (its `<end>` included or not).
        attention: `(T, S')` its attention over the padded source (`S'` may be 0).
        source_tokens: the source's tokens (`S` of them, `S <= S'`).
        target_tokens: the target vocabulary.

    Returns:
        `(tokens, kept ids)`: the words, and the ids they came from (the copied ones keep
        `<unk>`'s).
    """
    size = len(target_tokens)
    tokens, kept = [], []
    for t, token_id in enumerate(int(i) for i in ids):
        if token_id in (PAD_ID, START_ID, END_ID):
            continue
        if token_id >= size:  # a pointer-generator's extended id
            position = min(token_id - size, max(len(source_tokens) - 1, 0))
            word = source_tokens[position] if source_tokens else target_tokens[UNK_ID]
        elif token_id == UNK_ID and copy_unknown and attention.shape[-1] and source_tokens:
            word = source_tokens[min(int(np.argmax(attention[t])), len(source_tokens) - 1)]
        else:
            word = target_tokens[token_id]
        tokens.append(word)
        kept.append(token_id)
    return tokens, kept


def make_validation(config: Any, pairs: ValidationPairs, source_vocab: list[str],
                    target_vocab: list[str], target_subwords: Any = None) -> Validation:
    """The `Validation` of `pairs` for a run of `config` (`seq2seq.config.RunConfig`).

    Args:
        source_vocab, target_vocab: the vocabularies' tokens (of a subword run: its pieces).
        target_subwords: a subword run's target `SubwordVocabulary` (its text is the
            SentencePiece decoding of the ids); None for words.
    """
    from common.metrics.translation import translation_scores
    from seq2seq.copying import copy_ids

    ids = {token: i for i, token in enumerate(source_vocab)}
    longest = max(1, max(len(t) for t in pairs.source_tokens))
    width = int(math.ceil(longest / PAD_MULTIPLE) * PAD_MULTIPLE)
    source = np.zeros((len(pairs.sources), width), np.int32)
    for row, tokens in enumerate(pairs.source_tokens):
        source[row, : len(tokens)] = [ids.get(t, UNK_ID) for t in tokens]
    inputs = {"source": source}
    if config.model.copy:
        targets = _TokenIds(target_vocab)
        inputs["source_copy"] = np.zeros_like(source)
        for row, tokens in enumerate(pairs.source_tokens):
            inputs["source_copy"][row, : len(tokens)] = copy_ids(tokens, targets)
    max_length = config.model.max_decode_length
    if config.model.arch == "transformer":
        max_length = min(max_length, config.model.transformer.max_length)

    def initial_state(model: Any, batch: dict[str, Any], length: int) -> Any:
        return model.decoding_state(batch["source"], length, batch.get("source_copy"))

    def score(decoded: Decoded) -> dict[str, Any]:
        texts = []
        for row, tokens in enumerate(pairs.source_tokens):
            n = int(decoded.lengths[row, 0])
            words, kept = translation_tokens(decoded.tokens[row, 0, :n],
                                             decoded.attention[row, 0, :n], tokens, target_vocab)
            texts.append(target_subwords.decode(kept) if target_subwords is not None
                         else detokenize(words))
        scores = translation_scores(texts, pairs.references, lowercase=config.data.lowercase)
        samples = "\n\n".join(f"{source}  \n→ {text}  \n(reference: {reference})"
                              for source, text, reference in zip(
                                  pairs.sources[:3], texts[:3], pairs.references[:3]))
        return {"bleu": scores["bleu"], "chrf": scores["chrf"],
                "exact_match": scores["exact_match"], "samples": samples}

    return Validation(inputs, initial_state, START_ID, END_ID, max_length, score,
                      config.model.length_penalty)


class _TokenIds:
    """The part of `common.text.Vocabulary` that `copy_ids` reads, over a token list (no
    TensorFlow)."""

    unk_id = UNK_ID

    def __init__(self, tokens: list[str]):
        self._ids = {token: i for i, token in enumerate(tokens)}
        self._size = len(tokens)

    def __len__(self) -> int:
        return self._size

    def encode(self, tokens: list[str]) -> list[int]:
        return [self._ids.get(token, UNK_ID) for token in tokens]
