"""From sentence pairs to batches: vocabularies and a length-bucketed tf.data pipeline.

Dimension names: `B` batch, `S` source steps, `T` target steps (the target plus one:
`<start>` in front for the decoder input, `<end>` behind for the decoder output).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from common.errors import UserError
from common.text import Vocabulary
from seq2seq.datasets.pairs import PairsSplit


def build_vocabularies(
    pairs: PairsSplit, min_count: int = 1, max_size: int | None = None
) -> tuple[Vocabulary, Vocabulary]:
    """A source and a target vocabulary built from the training pairs' tokens.

    Args:
        pairs: the training split.
        min_count: drop tokens seen fewer times than this.
        max_size: the most ids per vocabulary, the four special tokens included.

    Returns:
        `(source_vocab, target_vocab)`.
    """
    return (
        Vocabulary.build(pairs.source_tokens, min_count=min_count, max_size=max_size),
        Vocabulary.build(pairs.target_tokens, min_count=min_count, max_size=max_size),
    )


def _padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """`(N, max length)` int32 ids padded with 0, and the `(N,)` lengths."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
    ids = np.zeros((len(rows), max(int(lengths.max()), 1)), dtype=np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids, lengths


def bucket_boundaries(max_length: int, width: int = 8) -> list[int]:
    """Length boundaries `width, 2*width, ...` below `max_length` for bucketed batching."""
    return list(range(width, max(max_length, width + 1), width))


def make_dataset(
    pairs: PairsSplit,
    source_vocab: Vocabulary,
    target_vocab: Vocabulary,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    bucket: bool = True,
    drop_remainder: bool = False,
    bucket_width: int = 8,
    copy: bool = False,
) -> tf.data.Dataset:
    """Batches of padded id tensors for teacher-forced training and evaluation.

    Args:
        pairs: the split to serve.
        source_vocab: maps `pairs.source_tokens` to ids.
        target_vocab: maps `pairs.target_tokens` to ids.
        batch_size: pairs per batch.
        shuffle: shuffle the pairs (once per pass, reproducibly from `seed`).
        seed: the shuffling seed; the same seed gives the same batches on every run.
        bucket: group pairs of similar length (`bucket_by_sequence_length`, buckets
            `bucket_width` tokens wide) so that batches carry little padding.
        drop_remainder: drop the last, smaller batch of each bucket (a fixed batch shape).
        bucket_width: tokens per bucket.
        copy: for a copying translator (`seq2seq.copying`): add `"source_copy"` and give
            `"target_out"` over the extended vocabulary.

    Returns:
        A prefetched `tf.data.Dataset` of dicts:
        `"source"`: `(B, S)` int32, padded with 0;
        `"target_in"`: `(B, T)` int32, `<start>` followed by the target ids, padded with 0;
        `"target_out"`: `(B, T)` int32, the target ids followed by `<end>`, padded with 0;
        with `copy`, `"source_copy"`: `(B, S)` int32, each source token's extended id
        (`copy_ids`), and `"target_out"` holds `V + s` for a target word outside the target
        vocabulary found at source position `s` (`extend_target_ids`).
    """
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if len(pairs) == 0:
        raise UserError("no sentence pairs to batch (the split is empty after filtering)")
    start, end = target_vocab.start_id, target_vocab.end_id
    sources, source_lengths = _padded([source_vocab.encode(t) for t in pairs.source_tokens])
    targets = [target_vocab.encode(tokens) for tokens in pairs.target_tokens]
    target_in, target_lengths = _padded([[start] + ids for ids in targets])
    if copy:
        from seq2seq.copying import copy_ids, extend_target_ids

        targets = [extend_target_ids(target, source, target_vocab)
                   for source, target in zip(pairs.source_tokens, pairs.target_tokens)]
        source_copy, _ = _padded([copy_ids(t, target_vocab) for t in pairs.source_tokens])
    target_out, _ = _padded([ids + [end] for ids in targets])

    def unpad(source, source_length, target_in, target_out, target_length, *extra):
        batch = {
            "source": source[:source_length],
            "target_in": target_in[:target_length],
            "target_out": target_out[:target_length],
        }
        if extra:
            batch["source_copy"] = extra[0][:source_length]
        return batch

    columns = (sources, source_lengths, target_in, target_out, target_lengths)
    dataset = tf.data.Dataset.from_tensor_slices(columns + ((source_copy,) if copy else ()))
    if shuffle:
        dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(unpad)
    if bucket:
        longest = max(sources.shape[1], target_in.shape[1])
        boundaries = bucket_boundaries(longest, bucket_width)
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=lambda x: tf.maximum(
                tf.shape(x["source"])[0], tf.shape(x["target_in"])[0]
            ),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            drop_remainder=drop_remainder,
        )
    else:
        dataset = dataset.padded_batch(batch_size, drop_remainder=drop_remainder)
    return dataset.prefetch(tf.data.AUTOTUNE)
