"""`PairsSplit`: one split of a translation dataset, as sentences and as tokens.

Both datasets (`tsv`, `dates`) return a `PairsSplit`, so everything downstream (vocabularies,
the tf.data pipeline, evaluation, attention checks) is written once; both take a `PairsOptions`,
so the options of a load are declared once too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import UserError

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class PairsOptions:
    """What `load_pairs` asks a dataset's loader for; each loader says what it makes of each.

    Args:
        path: where the data is (a file or a folder); None for a generated dataset.
        split: "train", "valid" or "test".
        reverse: swap the direction (the target side becomes the source).
        max_length: drop pairs with more tokens than this on either side (counted).
        seed: fixes a generated or sampled split.
        size: how many pairs (the first `size`, or how many to generate).
        lowercase: lowercase the tokens.
    """

    path: str | os.PathLike | None = None
    split: str = "train"
    reverse: bool = False
    max_length: int | None = None
    seed: int = 0
    size: int | None = None
    lowercase: bool = False


@dataclass(frozen=True)
class PairsSplit:
    """Sentence pairs of one split.

    Args:
        sources: source sentences (NFKC-normalized).
        targets: target sentences, the references for metrics.
        source_tokens: each source sentence as tokens (`common.text.tokenize`).
        target_tokens: each target sentence as tokens.
        dropped: pairs left out because a side had more than `max_length` tokens.
        skipped: malformed input lines left out.
        alignments: for each pair and each target token, the index of the source token it
            aligns to, or -1 for none; None when the dataset does not know its alignments.
    """

    sources: list[str]
    targets: list[str]
    source_tokens: list[list[str]]
    target_tokens: list[list[str]]
    dropped: int = 0
    skipped: int = 0
    alignments: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.sources)

    def __post_init__(self):
        n = len(self.sources)
        lengths = [len(self.targets), len(self.source_tokens), len(self.target_tokens)]
        if self.alignments is not None:
            lengths.append(len(self.alignments))
        if any(length != n for length in lengths):
            raise ValueError(f"PairsSplit fields have different lengths: {[n] + lengths}")


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise UserError(f"Unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    return split


def check_max_length(max_length: int | None) -> int | None:
    if max_length is not None and (isinstance(max_length, bool) or max_length < 1):
        raise UserError(f"max_length must be a positive number of tokens or None, got {max_length!r}")
    return max_length


def filter_by_length(
    sources: Sequence[str],
    targets: Sequence[str],
    source_tokens: Sequence[list[str]],
    target_tokens: Sequence[list[str]],
    max_length: int | None,
    skipped: int = 0,
    alignments: Sequence[list[int]] | None = None,
) -> PairsSplit:
    """A `PairsSplit` without the pairs whose source or target has more than `max_length` tokens."""
    keep = [
        max_length is None or (len(s) <= max_length and len(t) <= max_length)
        for s, t in zip(source_tokens, target_tokens)
    ]

    def kept(items):
        return [item for item, k in zip(items, keep) if k]

    return PairsSplit(
        sources=kept(sources),
        targets=kept(targets),
        source_tokens=kept(source_tokens),
        target_tokens=kept(target_tokens),
        dropped=len(keep) - sum(keep),
        skipped=skipped,
        alignments=None if alignments is None else kept(alignments),
    )
