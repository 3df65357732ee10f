"""Translation datasets: sentence pairs, their vocabularies, and batched tf.data pipelines.

Two datasets, chosen by name from `DATASETS`:
- `tsv`: `source<TAB>target` lines, UTF-8 (the spa-eng corpus in `../shared/data/spa-eng`:
  English<TAB>Spanish). `path` is a file, or a folder holding `train.tsv`, `valid.tsv` and
  `test.tsv`. `reverse=True` swaps the direction (Spanish -> English).
- `dates`: a synthetic task generated in code: human-written dates ("25th of November 2026",
  "Nov 25, 2026", "25/11/2026", "tuesday, 25 november 2026", "25 de noviembre de 2026", ...)
  -> ISO "2026-11-25", tokenized as `2026 - 11 - 25`. Deterministic per `seed` and split; the
  splits share no date. Each example knows which source token each target token aligns to.

API (shapes: `B` batch, `S` source steps, `T` target steps):

    load_pairs(name, path=None, split="train", reverse=False, max_length=None, seed=0,
               size=None, lowercase=False) -> PairsSplit
        the keyword arguments are the fields of `PairsOptions`, which each registered
        loader takes: `DATASETS.get(name)(PairsOptions(...))`

    PairsSplit (frozen dataclass):
        sources, targets: list[str]              the sentences (NFKC), references for metrics
        source_tokens, target_tokens: list[list[str]]   as `common.text.tokenize` splits them
        dropped: int      pairs dropped because a side has more than `max_length` tokens
        skipped: int      malformed lines skipped (tsv: wrong column count, invalid UTF-8,
                          empty side), each reported in one logged warning
        alignments: list[list[int]] | None
                          dates only: for each target token, the index of the source token
                          it aligns to, or -1 (the `-` separators)

    build_vocabularies(pairs, min_count=1, max_size=None) -> (source_vocab, target_vocab)

    make_dataset(pairs, source_vocab, target_vocab, batch_size, shuffle=False, seed=0,
                 bucket=True, drop_remainder=False) -> tf.data.Dataset of dicts
        "source":     (B, S) int32, padded with 0 (`<pad>`)
        "target_in":  (B, T) int32, `<start>` then the target ids, padded with 0
        "target_out": (B, T) int32, the target ids then `<end>`, padded with 0
      Batches group pairs of similar length (`bucket_by_sequence_length`) when `bucket`;
      the order is the same on every run with the same `seed`; prefetched.

`size` keeps the first `size` pairs of a tsv split (before `max_length` filtering), or sets
how many date examples to generate (default 10,000 train, 1,000 valid, 1,000 test).

Example:
>>> pairs = load_pairs("dates", split="train", size=100, seed=1)
>>> source_vocab, target_vocab = build_vocabularies(pairs)
>>> batch = next(iter(make_dataset(pairs, source_vocab, target_vocab, batch_size=8)))
>>> sorted(batch)
['source', 'target_in', 'target_out']
"""

from __future__ import annotations

from seq2seq.catalog import DATASETS
from seq2seq.datasets.dates import load_dates
from seq2seq.datasets.pairs import PairsOptions, PairsSplit
from seq2seq.datasets.pipeline import build_vocabularies, make_dataset
from seq2seq.datasets.tsv import load_tsv

DATASETS.add("tsv", load_tsv)
DATASETS.add("dates", load_dates)


def load_pairs(name: str, **options) -> PairsSplit:
    """Load one split of the dataset registered as `name` (see the module docstring);
    `options` are the fields of `PairsOptions` (path, split, reverse, max_length, seed, size,
    lowercase), each with its default when not given."""
    return DATASETS.get(name)(PairsOptions(**options))


__all__ = [
    "DATASETS",
    "PairsOptions",
    "PairsSplit",
    "build_vocabularies",
    "load_pairs",
    "make_dataset",
]
