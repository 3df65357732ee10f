"""The captioner's image pre-processing: one function from encoded bytes to the encoder's pixels,
for training, `captioner caption RUN_DIR` and the export alike.

`image_pixels(data, image_size)`: `common.images.decode_in_graph` (the pixels Pillow gives,
JPEG included), then `resize_pixels`: bilinear with antialiasing (`tf.image.resize`) to the
encoder's `(H, W)`, float32 in [0, 255]; an image already at that size is only cast (what the
resize gives it, exactly). Each path hands it bytes chosen by `common.images`' rules on EXIF:

- training and `captioner evaluate` (`captioner.datasets.pipeline`): a dataset's JPEG and PNG
  files as stored, whatever their EXIF says; other formats through `common.images.graph_bytes`
  (Pillow's pixels, re-encoded where TensorFlow would decode them otherwise or not at all);
- `captioner caption RUN_DIR` (`read_image`): `graph_bytes` of the file, so a photo is turned
  upright as its EXIF orientation says and what the graph's decoder misreads is re-encoded;
- the export (`captioner.export.CaptionerModule.read_inputs`): the bytes a client sends
  (`ExportedCaptioner.caption_files` sends `graph_bytes`, `captioner serve` the bytes of
  `common.images.prepare_for_graph`: the same pixels).

So the run directory and its export caption a photo from the same pixels, whatever its size
(`tests/captioner/test_preprocessing.py`, on COCO photos). Pillow's own bilinear resize, which
`caption RUN_DIR` used before, differs from TensorFlow's by up to several grey levels on a photo.

Dimensions: `H`, `W` the encoder's input size.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.errors import DataError


def resize_pixels(images: Any, image_size: Sequence[int]) -> Any:
    """Pixels `(..., h, w, 3)` (any dtype, 0–255; one image or a batch) at the encoder's size:
    `(..., H, W, 3)` float32 in [0, 255], bilinear with antialiasing (`tf.image.resize`).

    Images already at `image_size` are only cast (the resize would give them back exactly).
    """
    import tensorflow as tf

    height, width = (int(n) for n in image_size)
    images = tf.cast(images, tf.float32)
    size = images.shape[-3:-1]
    if size == (height, width):
        return images

    def resized():
        out = tf.image.resize(images, (height, width), method="bilinear", antialias=True)
        return tf.clip_by_value(out, 0.0, 255.0)

    if size.is_fully_defined():
        return resized()
    at_size = tf.reduce_all(tf.equal(tf.shape(images)[-3:-1], [height, width]))
    out = tf.cond(at_size, lambda: images, resized)
    out.set_shape(images.shape[:-3].concatenate([height, width, 3]))
    return out


def image_pixels(data: Any, image_size: Sequence[int]) -> Any:
    """One encoded image (a scalar `tf.string`) -> `(H, W, 3)` float32 in [0, 255]: decoded by
    `common.images.decode_in_graph` (EXIF is not read: give it the bytes the module doc says),
    resized by `resize_pixels`. Runs eagerly, in `tf.data` and inside a SavedModel.

    Raises:
        tf.errors.InvalidArgumentError: bytes the graph's decoder cannot read.
    """
    from common.images import decode_in_graph

    return resize_pixels(decode_in_graph(data), image_size)


@functools.lru_cache(maxsize=8)
def _pixels_function(image_size: tuple[int, int]) -> Any:
    """`image_pixels` at `image_size` as one `tf.function` of a scalar string (traced once)."""
    import tensorflow as tf

    return tf.function(lambda data: image_pixels(data, image_size), autograph=False,
                       input_signature=[tf.TensorSpec([], tf.string)])


def read_image(source: str | os.PathLike | bytes, image_size: Sequence[int],
               name: str | None = None) -> np.ndarray:
    """An image file (or its bytes) as the captioner sees it: `(H, W, 3)` float32 in [0, 255].

    The bytes `common.images.graph_bytes` gives (checked with Pillow; upright as the photo's
    EXIF says; re-encoded where the graph's decoder would read it otherwise) through
    `image_pixels`, as the export reads them. Any raster image a user is likely to have is
    read (`common.images.load_image`: RGBA, grayscale, 16-bit, palette, CMYK, animations'
    first frame, TIFF, WebP, ...).

    Args:
        source: a path, or the encoded bytes.
        image_size: the encoder's `(H, W)`.
        name: how to name the image in errors (default: the path, or "image").

    Raises:
        DataError: one line naming the file and the reason (missing, empty, not an image,
            truncated, or a header declaring more pixels than `common.images` allows).
    """
    import tensorflow as tf

    from common.images import REENCODED_GROWTH, graph_bytes, load_image, lossless_bytes

    where = name or ("image" if isinstance(source, (bytes, bytearray)) else str(source))
    pixels = _pixels_function(tuple(int(n) for n in image_size))
    data = graph_bytes(source, where)
    try:
        return pixels(tf.constant(data)).numpy()
    except tf.errors.InvalidArgumentError:
        pass
    # Bytes Pillow reads but TensorFlow's decoder refuses: Pillow's pixels, losslessly.
    again = lossless_bytes(load_image(data, where), REENCODED_GROWTH * len(data))
    try:
        return pixels(tf.constant(again)).numpy()
    except tf.errors.InvalidArgumentError as exc:
        raise DataError(f"{where}: the model could not decode it "
                        f"({' '.join(exc.message.split())})") from None
