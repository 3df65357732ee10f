"""The tf.data pipeline: a `CaptionSplit` -> padded batches of images and caption ids.

Dimensions: `B` batch, `T` caption steps, `H`, `W` image height and width.

`make_dataset` yields one element per (image, caption) pair, as a dict
`{"image": (B, H, W, 3) float32 in [0, 255], "caption_in": (B, T) int32,
"caption_out": (B, T) int32}`: `caption_in` is `<start> w1 ... wn` and `caption_out` is
`w1 ... wn <end>`, both padded with 0 (`<pad>`). The captions are tokenized and encoded once,
up front; file images are read, decoded and resized in parallel, in-memory images (shapes)
are gathered from one tensor, both by `captioner.preprocessing` (the pre-processing of
`captioner caption` and the export). Order is deterministic for a fixed seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from captioner.datasets.records import CaptionSplit
from captioner.preprocessing import image_pixels, resize_pixels
from common.errors import UserError
from common.images import graph_bytes
from common.text import Vocabulary, normalize, tokenize, tokenize_texts

AUTOTUNE = tf.data.AUTOTUNE


def _size_pair(image_size: int | Sequence[int] | None) -> tuple[int, int] | None:
    if image_size is None:
        return None
    if isinstance(image_size, int | np.integer):
        size = (int(image_size), int(image_size))
    else:
        size = tuple(int(s) for s in image_size)
    if len(size) != 2 or min(size) < 1:
        raise UserError(f"image_size must be an int or (height, width) >= 1, got {image_size!r}")
    return size


def encode_captions(captions: Sequence[str], vocab: Vocabulary, lowercase: bool = True,
                    chunk: int = 4096) -> tf.RaggedTensor:
    """`(N, None)` int32 ids of `captions`: NFKC-normalized, `tokenize`d, looked up."""
    parts = []
    for start in range(0, len(captions), chunk):
        texts = [normalize(c) for c in captions[start : start + chunk]]
        tokens = tokenize(tf.constant(texts, dtype=tf.string), lowercase=lowercase)
        parts.append(tf.cast(vocab.encode_tf(tokens), tf.int32))
    return tf.concat(parts, axis=0) if len(parts) > 1 else parts[0]


def caption_pairs(split: CaptionSplit, vocab: Vocabulary, lowercase: bool = True,
                  max_length: int | None = None) -> tuple[np.ndarray, tf.RaggedTensor]:
    """Every (image, caption) pair of `split`, in order: `owners (N,)` int32, the index of the
    pair's record, and `ids (N, None)`, the caption's ids (`encode_captions`) cut to
    `max_length - 1` tokens (room for `<start>` or `<end>`)."""
    owners = np.repeat(np.arange(len(split), dtype=np.int32), [len(r.captions) for r in split])
    captions = [c for r in split for c in r.captions]
    if not captions:
        raise UserError(f"{split.name}/{split.split} has no captions")
    ids = encode_captions(captions, vocab, lowercase)
    return owners, (ids if max_length is None else ids[:, : max_length - 1])


def teacher_forced(caption: tf.Tensor, vocab: Vocabulary) -> dict[str, tf.Tensor]:
    """A caption's ids `(T,)` as the decoder is trained on them: `caption_in`, `<start>` then
    the ids, and `caption_out`, the ids then `<end>`."""
    return {"caption_in": tf.concat([tf.constant([vocab.start_id], tf.int32), caption], 0),
            "caption_out": tf.concat([caption, tf.constant([vocab.end_id], tf.int32)], 0)}


def build_vocabulary(split: CaptionSplit, min_count: int = 1, max_size: int | None = None,
                     lowercase: bool = True) -> Vocabulary:
    """The caption vocabulary of a (training) split.

    Args:
        split: the split whose captions are counted.
        min_count: leave out tokens seen fewer times.
        max_size: keep at most this many entries, special tokens included.
        lowercase: lowercase the captions, as `make_dataset` does.

    Returns:
        A `common.text.Vocabulary`.
    """
    captions = [c for record in split for c in record.captions]
    if not captions:
        raise UserError(f"{split.name}/{split.split} has no captions to build a vocabulary from")
    tokens = tokenize_texts(captions, lowercase=lowercase)
    return Vocabulary.build(tokens, min_count=min_count, max_size=max_size)


def _image_source(split: CaptionSplit, size: tuple[int, int] | None):
    """The per-record image reference and a function that turns it into `(H, W, 3)` float32."""
    if not len(split):
        raise UserError(f"{split.name}/{split.split} is empty")
    if split.in_memory:
        shapes = {r.image.shape for r in split}
        if len(shapes) > 1:
            raise UserError(f"{split.name}/{split.split}: in-memory images differ in shape "
                            f"({sorted(shapes)[:3]}); expected one shape")
        images = tf.constant(np.stack([r.image for r in split]))
        native = tuple(images.shape[1:3])
        references = tf.range(len(split), dtype=tf.int32)

        def load(index):  # a scalar index or a (B,) batch of them
            return resize_pixels(tf.gather(images, index), size or native)

        return references, load, size or native
    if any(r.path is None for r in split):
        raise UserError(f"{split.name}/{split.split}: records mix in-memory images and files")
    if size is None:
        raise UserError(f"{split.name}/{split.split}: image files need an image_size to batch "
                        "them; got None")
    references = tf.constant([r.path for r in split], dtype=tf.string)

    def load(path):
        data = tf.io.read_file(path)
        # JPEG and PNG, nearly every dataset's files, go to TensorFlow's decoders as they are.
        # The rest (GIF, BMP, WebP, TIFF) are read by Pillow and re-encoded where TensorFlow
        # would decode them otherwise (an offset GIF frame, a WebP with alpha, a palette BMP)
        # or not at all (TIFF, an animated WebP: dropped from the data without a word).
        common = tf.logical_or(tf.io.is_jpeg(data),
                               tf.equal(tf.strings.substr(data, 0, 8), PNG_SIGNATURE))
        data = tf.cond(common, lambda: data, lambda: _graph_bytes_of(data, path))
        return image_pixels(data, size)  # as `caption RUN_DIR` and the export read images

    return references, load, size


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _graph_bytes_of(data: tf.Tensor, path: tf.Tensor) -> tf.Tensor:
    """`common.images.graph_bytes` in the input pipeline (a `tf.py_function`): an image that
    does not decode raises, and the pipeline drops it as it drops any file that fails."""
    def reencode(data, path):
        return graph_bytes(data.numpy(), path.numpy().decode("utf-8", "replace"))

    encoded = tf.py_function(reencode, [data, path], tf.string)
    encoded.set_shape([])
    return encoded


def make_dataset(split: CaptionSplit, vocab: Vocabulary,
                 image_size: int | Sequence[int] | None = None, batch_size: int = 32,
                 shuffle: bool = False, seed: int | None = None, max_length: int | None = None,
                 repeat: bool = False, lowercase: bool = True, drop_remainder: bool = False,
                 pad_to_max_length: bool = False,
                 num_parallel_calls: int = AUTOTUNE) -> tf.data.Dataset:
    """Batches of (image, caption) pairs for teacher-forced training.

    Args:
        split: a `CaptionSplit` from `load_split`.
        vocab: the caption vocabulary (`build_vocabulary`).
        image_size: resize images to this `int` or `(H, W)` (bilinear, antialiased:
            `captioner.preprocessing.resize_pixels`); None keeps
            in-memory images at their native size (file images need a size).
        batch_size: pairs per batch.
        shuffle: shuffle all pairs (a full-size buffer), anew each pass.
        seed: the shuffle seed; the order is then the same in every run.
        max_length: keep at most `max_length - 1` words, so `T <= max_length`.
        repeat: repeat forever.
        lowercase: lowercase captions before tokenizing.
        drop_remainder: drop a last, smaller batch (for fixed shapes across replicas).
        pad_to_max_length: pad `T` to `max_length` instead of the batch's longest caption.
        num_parallel_calls: parallel image reads and decodes.

    Returns:
        A `tf.data.Dataset` of dicts: `image` `(B, H, W, 3)` float32 in [0, 255],
        `caption_in` `(B, T)` int32 (`<start>` first) and `caption_out` `(B, T)` int32
        (`<end>` last), padded with 0.

    Example:
    >>> split = load_split("shapes", "train", num_images=100)
    >>> ds = make_dataset(split, build_vocabulary(split), batch_size=8, shuffle=True, seed=1)
    >>> {k: v.shape for k, v in next(iter(ds)).items()}  # doctest: +SKIP
    {'image': (8, 64, 64, 3), 'caption_in': (8, 14), 'caption_out': (8, 14)}
    """
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if max_length is not None and max_length < 2:
        raise UserError(f"max_length must be >= 2 (a word and <end>), got {max_length}")
    if pad_to_max_length and max_length is None:
        raise UserError("pad_to_max_length needs a max_length; got None")
    size = _size_pair(image_size)
    references, load, out_size = _image_source(split, size)

    owners, ids = caption_pairs(split, vocab, lowercase, max_length)
    pair_refs = tf.gather(references, owners)

    ds = tf.data.Dataset.from_tensor_slices((pair_refs, ids))
    if shuffle:
        ds = ds.shuffle(len(owners), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()

    def to_example(reference, caption):
        # In-memory images are gathered a batch at a time, after batching.
        return {"image": reference if split.in_memory else load(reference),
                **teacher_forced(caption, vocab)}

    ds = ds.map(to_example, num_parallel_calls=num_parallel_calls, deterministic=True)
    if not split.in_memory:
        ds = ds.ignore_errors(log_warning=True)  # a file that PIL read but TF cannot decode
    length = max_length if pad_to_max_length else None
    ds = ds.padded_batch(
        batch_size,
        padded_shapes={"image": [] if split.in_memory else [*out_size, 3],
                       "caption_in": [length], "caption_out": [length]},
        padding_values={"image": 0 if split.in_memory else 0.0, "caption_in": 0,
                        "caption_out": 0},
        drop_remainder=drop_remainder,
    )
    if split.in_memory:
        ds = ds.map(lambda batch: {**batch, "image": load(batch["image"])},
                    num_parallel_calls=num_parallel_calls, deterministic=True)
    return ds.prefetch(AUTOTUNE)


def make_image_dataset(split: CaptionSplit, image_size: int | Sequence[int] | None = None,
                       batch_size: int = 32,
                       num_parallel_calls: int = AUTOTUNE, shuffle: bool = False,
                       seed: int | None = None, repeat: bool = False,
                       drop_remainder: bool = False) -> tf.data.Dataset:
    """Batches of images, one element per image in split order, for captioning and evaluation
    (shuffled, for self-critical training's batches of images: `captioner.scst`).

    Args:
        split: a `CaptionSplit`.
        image_size: as for `make_dataset`.
        batch_size: images per batch (the last batch may be smaller).
        num_parallel_calls: parallel image reads and decodes.
        shuffle, seed, repeat, drop_remainder: as for `make_dataset`, over images.

    Returns:
        A `tf.data.Dataset` of dicts: `image` `(B, H, W, 3)` float32 in [0, 255] and `index`
        `(B,)` int32, each image's index in `split.records`.
    """
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    references, load, _ = _image_source(split, _size_pair(image_size))
    indices = tf.range(len(split), dtype=tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((references, indices))
    if shuffle:
        ds = ds.shuffle(len(split), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.map(lambda ref, i: {"image": load(ref), "index": i},
                num_parallel_calls=num_parallel_calls, deterministic=True)
    if not split.in_memory:
        ds = ds.ignore_errors(log_warning=True)  # "index" says which images came through
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)
