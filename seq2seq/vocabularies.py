"""The translators' vocabularies: words or SentencePiece subwords, made, saved and loaded.

`DataConfig.vocab` chooses:

- `"word"`: a `common.text.Vocabulary` per side, counted over the tokenized training split
  (`vocab.source.txt`, `vocab.target.txt`); text is split by `common.text.tokenize`.
- `"sentencepiece"`: a SentencePiece model per side (`common.text.subwords`), trained on the
  raw text of the training split (`vocab.source.model`, `vocab.target.model`), or one model
  for both sides trained on both (`shared_vocab`: `vocab.model`). A text's tokens are then
  the pieces of its ids (`<unk>` for a character the model never saw), and the model-side
  `Vocabulary` is the list of pieces, so the data pipeline, the models, decoding and the
  export's lookups are those of words; only text -> pieces (SentencePiece's `encode`) and
  ids -> text (its `decode`) differ. The length filter (`max_length`) counts pieces.

Keras-free to import: the command line reads `vocabulary_files`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from common.errors import UserError
from common.training.run_dir import RunDir
from seq2seq.config import DataConfig


def vocabulary_files(data: DataConfig) -> tuple[str, ...]:
    """The `RunDir` names of the vocabulary files of a run with `data`."""
    if data.vocab == "word":
        return (RunDir.source_vocab, RunDir.target_vocab)
    if data.shared_vocab:
        return (RunDir.shared_subwords,)
    return (RunDir.source_subwords, RunDir.target_subwords)


@dataclasses.dataclass(frozen=True)
class Vocabularies:
    """Both sides' vocabularies of a run.

    Args:
        source: the source `Vocabulary` (words, or the pieces of `source_subwords`).
        target: the target `Vocabulary`.
        source_subwords: the source `SubwordVocabulary`, or None for words.
        target_subwords: the target one (the same object as `source_subwords` when shared).
    """

    source: Any
    target: Any
    source_subwords: Any = None
    target_subwords: Any = None

    @classmethod
    def of_subwords(cls, source: Any, target: Any) -> Vocabularies:
        """The vocabularies of two `SubwordVocabulary`s (the same one when shared)."""
        from common.text import Vocabulary

        pieces = Vocabulary(source.tokens)
        return cls(pieces, pieces if target is source else Vocabulary(target.tokens),
                   source, target)

    @classmethod
    def build(cls, pairs: Any, data: DataConfig) -> Vocabularies:
        """Made from the training split `pairs` (`PairsSplit`) as `data` says."""
        if data.vocab == "word":
            from seq2seq.datasets import build_vocabularies

            return cls(*build_vocabularies(pairs, min_count=data.min_count,
                                           max_size=data.max_vocab))
        from common.text.subwords import SubwordVocabulary, train_sentencepiece

        def train(texts):
            return SubwordVocabulary(train_sentencepiece(texts, data.vocab_size,
                                                         data.sentencepiece_type))

        if data.shared_vocab:
            shared = train([*pairs.sources, *pairs.targets])
            return cls.of_subwords(shared, shared)
        return cls.of_subwords(train(pairs.sources), train(pairs.targets))

    @classmethod
    def load(cls, run_dir: str | os.PathLike, data: DataConfig) -> Vocabularies:
        """The vocabularies saved in `run_dir` (a `UserError` naming a missing file, or one
        changed since training: `RunDir.check_vocabularies`)."""
        paths = [Path(run_dir) / name for name in vocabulary_files(data)]
        for path in paths:
            if not path.is_file():
                raise UserError(f"{path}: missing; expected the run's vocabulary")
        RunDir(run_dir).check_vocabularies()
        if data.vocab == "word":
            from common.text import Vocabulary

            return cls(*(Vocabulary.load(path) for path in paths))
        from common.text.subwords import SubwordVocabulary

        loaded = [SubwordVocabulary.load(path) for path in paths]
        return cls.of_subwords(loaded[0], loaded[-1])

    @property
    def subwords(self) -> bool:
        return self.source_subwords is not None

    def files(self) -> dict[str, Any]:
        """`RunDir` file name -> the vocabulary saved there."""
        if not self.subwords:
            return {RunDir.source_vocab: self.source, RunDir.target_vocab: self.target}
        if self.target_subwords is self.source_subwords:
            return {RunDir.shared_subwords: self.source_subwords}
        return {RunDir.source_subwords: self.source_subwords,
                RunDir.target_subwords: self.target_subwords}

    def save(self, run_dir: str | os.PathLike) -> None:
        for name, vocab in self.files().items():
            vocab.save(Path(run_dir) / name)

    def check_warm_start(self, init_from: Any) -> None:
        """A one-line `UserError` unless `init_from` (a `common.runner.WarmStart`) has the
        same vocabularies."""
        for name, vocab in self.files().items():
            init_from.check_vocabulary(name, vocab.tokens)

    def tokenize(self, texts: list[str], lowercase: bool = False) -> list[list[str]]:
        """The source tokens of `texts`: words, or the pieces of their SentencePiece ids."""
        return self._tokenize(texts, self.source, self.source_subwords, lowercase)

    def tokenize_pairs(self, pairs: Any, max_length: int | None) -> Any:
        """`pairs` with pieces for tokens (subwords; without the pairs with more than
        `max_length` pieces on a side, and without alignments); words: `pairs` as it is."""
        if not self.subwords:
            return pairs
        from seq2seq.datasets.pairs import filter_by_length

        return filter_by_length(
            pairs.sources, pairs.targets,
            self._tokenize(pairs.sources, self.source, self.source_subwords),
            self._tokenize(pairs.targets, self.target, self.target_subwords),
            max_length, skipped=pairs.skipped)

    @staticmethod
    def _tokenize(texts, vocab, subwords, lowercase=False) -> list[list[str]]:
        if subwords is None:
            from common.text import tokenize_texts

            return tokenize_texts(list(texts), lowercase=lowercase)
        return [vocab.decode(subwords.encode(text), strip_special=False) for text in texts]
