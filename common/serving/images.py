"""Screening the binary inputs of a request before they reach the model.

`ImageScreen(max_pixels, screen)(array, where)` looks at every `bytes` element of an input:

- always: bytes that start like an image `tf.io.decode_image` reads (PNG, JPEG, GIF, BMP, WebP)
  and whose header declares more than `max_pixels` pixels are refused before any decoding
  (other bytes, text or not images, are left for the model to judge);
- with `screen=True` (the inputs are images, as a captioner's): every element goes through
  `common.images.prepare_for_graph`, which refuses what is not an image with its reason and
  re-encodes (as BMP) what the graph's `tf.io.decode_image` does not decode as Pillow does
  (TIFF, CMYK JPEG, a photo with an EXIF turn, turned upright), written back into the array.

A refusal is a `RequestError` (400) naming where.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

from common.errors import UserError
from common.images import GRAPH_FORMATS, bomb_pixels, prepare_for_graph
from common.serving.json_codec import RequestError

#: The first bytes of the formats `tf.io.decode_image` reads (`GRAPH_FORMATS`).
IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8", b"GIF8", b"BM", b"RIFF")


class ImageScreen:
    """Checks (and with `screen`, prepares) the image bytes in a request's input arrays.

    Args:
        max_pixels: the most pixels an image header may declare.
        screen: the binary inputs are images: refuse non-images and re-encode what the graph
            cannot decode faithfully (see the module's docstring).
    """

    def __init__(self, max_pixels: int, screen: bool = False):
        self.max_pixels = int(max_pixels)
        self.screen = bool(screen)

    def __call__(self, array: np.ndarray, where: str) -> None:
        if array.dtype != object:
            return
        flat = array.reshape(-1)  # a view: re-encoded images are written back into `array`
        for i, value in enumerate(flat):
            # A column of several images names the one refused (a row is one instance).
            here = f"{where}, instance {i}" if flat.size > 1 else where
            check_image_size(value, self.max_pixels, here)
            if self.screen and isinstance(value, bytes):
                try:
                    flat[i] = prepare_for_graph(value, here, self.max_pixels)
                except UserError as exc:
                    raise RequestError(str(exc)) from None


def check_image_size(data: Any, max_pixels: int, where: str) -> None:
    """Refuse bytes whose image header declares more than `max_pixels` pixels (no decoding)."""
    from PIL import Image

    if not isinstance(data, bytes) or not data.startswith(IMAGE_MAGIC):
        return  # text, or a format tf.io.decode_image does not read either
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=GRAPH_FORMATS) as image:
                width, height = image.size
    except Image.DecompressionBombError as exc:  # Pillow's own, larger limit fired
        raise RequestError(f"{where}: the image header declares {bomb_pixels(exc)}; the limit is "
                           f"{max_pixels}") from None
    except Exception:  # not an image Pillow knows: TensorFlow decides
        return
    if width * height > max_pixels:
        raise RequestError(
            f"{where}: the image header declares {width}x{height} = {width * height} pixels; "
            f"the limit is {max_pixels}"
        )
