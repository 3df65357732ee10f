"""The feature cache: a frozen encoder's annotations computed once, then read for training.

With a frozen encoder every epoch would run the same images through the same network; the
cache runs each image once (`cache_features`), stores the annotations `(N, L, D)` as a `.npy`
file in the run directory, and `make_feature_dataset` then yields the same batches as
`captioner.datasets.make_dataset` with `"features"` in place of `"image"`, which
`ShowAttendTell.loss_terms` accepts as they are.

Layout: `RUN_DIR/features/{split}.npy` (float32 `(N, L, D)`, in split order) and
`RUN_DIR/features/{split}.json` (`{"count", "missing", "encoder"}`; `missing` lists the record
indices whose image could not be read, so their captions are left out).

Shapes: `N` images, `B` batch, `T` caption steps, `L` regions, `D` features.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from captioner.datasets import CaptionSplit
from captioner.encoders import ImageEncoder
from common.config import save_json
from common.text import Vocabulary


def feature_paths(directory: str | os.PathLike, split: str) -> tuple[Path, Path]:
    directory = Path(directory)
    return directory / f"{split}.npy", directory / f"{split}.json"


def cache_features(encoder: ImageEncoder, split: CaptionSplit, directory: str | os.PathLike,
                   batch_size: int = 64, encoder_config: dict[str, Any] | None = None) -> Path:
    """Encode every image of `split` once and save the annotations; returns the `.npy` path.

    An existing cache written for the same encoder config and split size is reused.
    """
    from captioner.datasets.pipeline import make_image_dataset

    array_path, meta_path = feature_paths(directory, split.split)
    if has_features(directory, split.split, len(split), encoder_config):
        return array_path
    array_path.parent.mkdir(parents=True, exist_ok=True)

    @tf.function
    def encode(images):
        return encoder(images, training=False)

    features = np.zeros((len(split), encoder.num_regions, encoder.feature_dim), np.float32)
    seen = np.zeros(len(split), bool)
    for batch in make_image_dataset(split, encoder.image_size, batch_size):
        index = batch["index"].numpy()
        features[index] = encode(batch["image"]).numpy()
        seen[index] = True
    tmp = array_path.with_suffix(".tmp.npy")
    np.save(tmp, features)
    os.replace(tmp, array_path)
    save_json(meta_path, {"count": len(split), "missing": np.flatnonzero(~seen).tolist(),
                          "encoder": encoder_config})
    return array_path


def has_features(directory: str | os.PathLike, split: str, count: int,
                 encoder_config: dict[str, Any] | None) -> bool:
    """Whether `directory` holds a complete cache of `count` images for this encoder config.

    The metadata is written after the array is in place, so a cache being written reads as
    absent, never as complete.
    """
    array_path, meta_path = feature_paths(directory, split)
    if not (array_path.exists() and meta_path.exists()):
        return False
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    # Compared as JSON reads it back (tuples become lists).
    wanted = json.loads(json.dumps(encoder_config))
    return meta.get("count") == count and meta.get("encoder") == wanted


def load_features(directory: str | os.PathLike, split: str) -> tuple[np.ndarray, list[int]]:
    """The cached annotations `(N, L, D)` (memory-mapped) and the missing record indices."""
    array_path, meta_path = feature_paths(directory, split)
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return np.load(array_path, mmap_mode="r"), list(meta.get("missing", []))


def make_feature_dataset(features: np.ndarray, split: CaptionSplit, vocab: Vocabulary,
                         batch_size: int = 32, shuffle: bool = False, seed: int | None = None,
                         max_length: int | None = None, repeat: bool = False,
                         lowercase: bool = True, drop_remainder: bool = False,
                         pad_to_max_length: bool = False,
                         missing: list[int] | tuple[int, ...] = ()) -> tf.data.Dataset:
    """`make_dataset`'s batches with cached `"features" (B, L, D)` instead of `"image"`.

    The pairs, their order and shuffling are those of `captioner.datasets.make_dataset` with
    the same arguments (for a split whose images all loaded).

    Returns:
        A `tf.data.Dataset` of dicts: `features (B, L, D)` float32, `caption_in (B, T)` and
        `caption_out (B, T)` int32, padded with 0.
    """
    from captioner.datasets.pipeline import caption_pairs, teacher_forced

    owners, ids = caption_pairs(split, vocab, lowercase, max_length)
    if missing:
        keep = ~np.isin(owners, np.asarray(missing, np.int32))
        owners, ids = owners[keep], tf.ragged.boolean_mask(ids, tf.constant(keep))
    table = tf.constant(np.asarray(features, np.float32))

    ds = tf.data.Dataset.from_tensor_slices((owners, ids))
    if shuffle:
        ds = ds.shuffle(len(owners), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.map(lambda owner, caption: {"features": tf.gather(table, owner),
                                        **teacher_forced(caption, vocab)},
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    length = max_length if pad_to_max_length else None
    ds = ds.padded_batch(
        batch_size,
        padded_shapes={"features": list(features.shape[1:]), "caption_in": [length],
                       "caption_out": [length]},
        drop_remainder=drop_remainder,
    )
    return ds.prefetch(tf.data.AUTOTUNE)
