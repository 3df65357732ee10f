"""Checks and conversions for what the renderers take: images, tokens and attention arrays.

Every renderer in `common.viz` reads its inputs through these helpers, so a wrong shape gets
the same one-line `UserError` (what was received, what was expected) wherever it is passed.

Dimensions: `T` target steps (words), `S` source steps, `H` heads, `h x w` the attention grid
of an image (`L = h * w` regions), `Hi x Wi` the image itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from common.errors import UserError


def as_rgb_image(image: Any) -> Image.Image:
    """An RGB `PIL.Image` from a `(Hi, Wi, 3)` uint8 array, a PIL image, or encoded bytes.

    Args:
        image: a `(Hi, Wi, 3)` (or `(Hi, Wi)` greyscale) uint8 array, a `PIL.Image.Image`, or
            the bytes of an image file (PNG, JPEG, ...). A file's bytes or a PIL image with
            an EXIF turn are turned upright, as the model reads the file (a PIL image turned
            by hand with `transpose` keeps its tag: turn it with `ImageOps.exif_transpose`).

    Returns:
        The image in RGB mode.
    """
    # Through common.images, as the model reads its images: the same pixels (16-bit images
    # scaled, not clipped to white), the same pixel limit and one-line errors.
    from common.images import load_image, to_rgb, upright

    if isinstance(image, Image.Image):
        # Turned as its EXIF tag says, as a file is (loaded first, as `load_image` reads the
        # tag: a PNG's late eXIf chunk counts). `ImageOps.exif_transpose` and `load_image` drop
        # the tag, so an image turned by them is not turned twice.
        image.load()
        return to_rgb(upright(image))
    if isinstance(image, (bytes, bytearray, memoryview)):
        return load_image(bytes(image), f"the image bytes ({len(image)} bytes)")
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise UserError(f"expected a uint8 image array, got dtype {array.dtype}")
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] != 3 or array.shape[0] == 0 or array.shape[1] == 0:
        raise UserError(f"expected an image of shape (H, W, 3), got shape {array.shape}")
    return Image.fromarray(array)


def as_tokens(tokens: Any, what: str) -> list[str]:
    """A list of strings from a sequence of tokens (`what` names them in errors)."""
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise UserError(f"expected {what} as a list of strings, got {type(tokens).__name__}")
    return [str(token) for token in tokens]


def as_attention_maps(attention: Any, num_words: int) -> np.ndarray:
    """Attention over an image grid as a float array `(T, h, w)`.

    Args:
        attention: `(T, h, w)` weights, or `(T, L)` with `L` a perfect square (`h = w = √L`).
        num_words: `T`, the number of words the maps belong to.

    Returns:
        A float32 array `(T, h, w)`.
    """
    maps = _float_array(attention, "attention")
    if maps.ndim == 2:
        side = math.isqrt(maps.shape[1])
        if side * side != maps.shape[1] or side == 0:
            raise UserError(
                f"expected attention of shape (T, h, w), or (T, L) with L a square number; "
                f"got shape {maps.shape}"
            )
        maps = maps.reshape(maps.shape[0], side, side)
    if maps.ndim != 3 or maps.shape[1] == 0 or maps.shape[2] == 0:
        raise UserError(f"expected attention of shape (T, h, w), got shape {maps.shape}")
    if maps.shape[0] != num_words:
        raise UserError(
            f"expected one attention map per word ({num_words} words), got {maps.shape[0]} maps"
        )
    return maps


def as_alignment(weights: Any, num_target: int, num_source: int, heads: bool = False) -> np.ndarray:
    """Translation attention as a float array `(T, S)`, or `(H, T, S)` when `heads` is true."""
    array = _float_array(weights, "attention weights")
    if heads:
        ok = array.ndim == 3 and array.shape[0] > 0 and array.shape[1:] == (num_target, num_source)
        expected = f"(H, T, S) = (H, {num_target}, {num_source})"
    else:
        ok = array.shape == (num_target, num_source)
        expected = f"(T, S) = ({num_target}, {num_source})"
    if not ok:
        raise UserError(
            f"expected attention weights of shape {expected} for {num_target} target and "
            f"{num_source} source tokens, got shape {array.shape}"
        )
    return array


def as_hard_indices(indices: Any, num_words: int, grid: tuple[int, int]) -> np.ndarray:
    """Hard-attention picks as an int array `(T,)` of flat row-major indices into the grid."""
    array = np.asarray(indices)
    size = grid[0] * grid[1]
    if array.shape != (num_words,) or not np.issubdtype(array.dtype, np.integer):
        raise UserError(
            f"expected hard_indices as {num_words} integers (one per word), "
            f"got shape {array.shape} and dtype {array.dtype}"
        )
    if array.size and (array.min() < 0 or array.max() >= size):
        raise UserError(
            f"expected hard_indices in [0, {size}) for a {grid[0]}x{grid[1]} attention grid, "
            f"got values from {array.min()} to {array.max()}"
        )
    return array.astype(np.int64)


def _float_array(values: Any, what: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise UserError(f"expected {what} as a numeric array, got {type(values).__name__}") from None
    if not np.all(np.isfinite(array)):
        raise UserError(f"expected finite {what}, got NaN or infinite values")
    return array
