"""Caption attention drawn over the image: the Show-Attend-Tell figure, as a PNG or a GIF.

Xu et al. 2015, "Show, Attend and Tell: Neural Image Caption Generation with Visual
Attention", figures 2-3: the image, then one panel per generated word with that step's
attention map upsampled to the image and laid over it, the word underneath.

Each panel keeps the image's aspect ratio: its longest side is `panel_size` pixels, so a
320x240 photo gives 224x168 panels and a disc stays round. The encoder saw the image resized
(squeezed) to its input size, so its `h x w` attention grid covers the whole image as equal
rectangles, cell `(i, j)` being the flat region index `i * w + j` (row-major, the order an
encoder's `(h, w, D)` features flatten to).

Each map is divided by its maximum (so every panel uses the full range), upsampled smoothly to
the panel, `m` in `[0, 1]`, and used as a mask, as in the paper's figures: what was not
attended is dimmed towards black and what was attended is lifted a little towards white,

    d = image * (1 - dim * (1 - m))          out = d + glow * m * (255 - d)

so the attended region stands out by about `dim` of the image's brightness plus `glow` of the
headroom above it, on a light image as on a dark one (the old white glow alone vanished on light
images). Hard attention's pick is outlined on top.

Dimensions: `T` words, `h x w` the attention grid (`L = h * w` regions), `Hi x Wi` the image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from common.errors import UserError
from common.registry import Registry
from common.viz.inputs import as_attention_maps, as_hard_indices, as_rgb_image, as_tokens

Color = tuple[int, int, int]
MARK_COLOR: Color = (255, 40, 0)

SMOOTHING = Registry("attention smoothing")

# The Gaussian's standard deviation, in attention cells.
GAUSSIAN_SIGMA_CELLS = 0.6
# How far unattended pixels are dimmed towards black, and the most attended lifted to white.
DIM = 0.7
GLOW = 0.3


@SMOOTHING.register("nearest")
def _nearest(attention_map: np.ndarray, height: int, width: int) -> np.ndarray:
    return _pil_resize(attention_map, height, width, Image.Resampling.NEAREST)


@SMOOTHING.register("bilinear")
def _bilinear(attention_map: np.ndarray, height: int, width: int) -> np.ndarray:
    return _pil_resize(attention_map, height, width, Image.Resampling.BILINEAR)


@SMOOTHING.register("gaussian")
def _gaussian(attention_map: np.ndarray, height: int, width: int) -> np.ndarray:
    blocks = _nearest(attention_map, height, width)
    rows, cols = attention_map.shape
    blur_y = _gaussian_matrix(height, GAUSSIAN_SIGMA_CELLS * height / rows)
    blur_x = _gaussian_matrix(width, GAUSSIAN_SIGMA_CELLS * width / cols)
    return (blur_y @ blocks @ blur_x.T).astype(np.float32)


def upsample_attention(
    attention_map: Any, size: tuple[int, int], smooth: str = "bilinear"
) -> np.ndarray:
    """Upsample one attention map to an image size.

    Args:
        attention_map: `(h, w)` weights.
        size: `(height, width)` of the result.
        smooth: `"bilinear"` (PIL resize), `"gaussian"` (blocks blurred with a Gaussian of
            `GAUSSIAN_SIGMA_CELLS` cells) or `"nearest"` (the raw cells).

    Returns:
        A float32 array `(height, width)`, within the range of the input.
    """
    resize = SMOOTHING.get(smooth)
    values = np.asarray(attention_map, dtype=np.float32)
    if values.ndim != 2:
        raise UserError(f"expected one attention map of shape (h, w), got shape {values.shape}")
    return resize(values, int(size[0]), int(size[1]))


def shade_attention(
    image: np.ndarray, weights: np.ndarray, dim: float = DIM, glow: float = GLOW
) -> np.ndarray:
    """Dim an image where the weight is low and lift it towards white where it is high.

    `d = image * (1 - dim * (1 - w))`, then `out = d + glow * w * (255 - d)`: at weight 1 a
    pixel is `image + glow * (255 - image)`, at weight 0 it is `image * (1 - dim)`.

    Args:
        image: `(Hi, Wi, 3)` uint8.
        weights: `(Hi, Wi)` floats in `[0, 1]` (clipped to it).
        dim: how far unattended pixels go towards black (0 keeps them, 1 blacks them out).
        glow: how far the most attended pixels go towards white.

    Returns:
        A `(Hi, Wi, 3)` uint8 array.
    """
    base = image.astype(np.float32)
    w = np.clip(weights, 0.0, 1.0)[:, :, None].astype(np.float32)
    dimmed = base * (1.0 - dim * (1.0 - w))
    out = dimmed + glow * w * (255.0 - dimmed)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def panel_shape(image_size: tuple[int, int], panel_size: int) -> tuple[int, int]:
    """`(width, height)` of a panel for an image of `(width, height)`: the same aspect ratio,
    the longest side `panel_size` pixels (at least one pixel each way)."""
    width, height = int(image_size[0]), int(image_size[1])
    scale = panel_size / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def default_label_height(panel_size: int) -> int:
    """The height in pixels of the strip under each panel that holds its word."""
    return max(14, panel_size // 7)


@dataclass(frozen=True)
class PanelOptions:
    """How each panel of `render_caption_overlay` and `render_caption_gif` is drawn.

    Args:
        hard_indices: `(T,)` ints, the region each step of hard attention picked (flat
            row-major into `h x w`); a rectangle marks it on top of the shading.
        panel_size: the longest side of each panel, in pixels.
        smooth: `"bilinear"`, `"gaussian"` or `"nearest"` upsampling of the maps.
        dim: how far the unattended parts go towards black, in `[0, 1]`.
        glow: how far the most attended part goes towards white, in `[0, 1]` (`dim = glow = 0`
            shows the plain image).
        mark_color: colour of the hard-attention rectangle.
        label_height: height of the word strip; default `default_label_height(panel_size)`.
    """

    hard_indices: Any = None
    panel_size: int = 224
    smooth: str = "bilinear"
    dim: float = DIM
    glow: float = GLOW
    mark_color: Color = MARK_COLOR
    label_height: int | None = None


def render_caption_overlay(
    image: Any,
    words: Sequence[str],
    attention: Any,
    out_path: str | Path | None = None,
    *,
    columns: int = 5,
    **panel_options: Any,
) -> Image.Image:
    """Draw the Show-Attend-Tell figure: the image, then one attended panel per word.

    Each panel is the image at its own aspect ratio, its longest side `panel_size` pixels
    (`panel_shape`), with a `label_height` strip underneath for the word; panels are laid out
    left to right in rows of `columns`, the first one the plain image. The figure is
    `min(columns, T + 1) * pw` wide and `rows * (ph + label_height)` high for panels `pw x ph`.

    Args:
        image: `(Hi, Wi, 3)` uint8 array, PIL image or image file bytes.
        words: the `T` generated words.
        attention: `(T, h, w)` weights (or `(T, L)`, `L` a square number), one map per word.
        out_path: where to save the figure as PNG (parent folders are created); None to only
            return it.
        columns: panels per row.
        panel_options: the fields of `PanelOptions` (`hard_indices`, `panel_size`, `smooth`,
            `dim`, `glow`, `mark_color`, `label_height`).

    Returns:
        The figure as an RGB `PIL.Image.Image`.

    Example:
    >>> image = np.zeros((32, 48, 3), np.uint8)  # 48 wide, 32 high: panels of 64 x 43
    >>> figure = render_caption_overlay(image, ["a", "cat"], np.random.rand(2, 4, 4),
    ...                                 columns=2, panel_size=64, label_height=16)
    >>> figure.size
    (128, 118)
    """
    panels = _caption_panels(image, words, attention, PanelOptions(**panel_options))
    columns = _positive_int(columns, "columns")
    cols = min(columns, len(panels))
    rows = math.ceil(len(panels) / cols)
    cell_w, cell_h = panels[0].size
    figure = Image.new("RGB", (cols * cell_w, rows * cell_h), "white")
    for k, panel in enumerate(panels):
        figure.paste(panel, ((k % cols) * cell_w, (k // cols) * cell_h))
    if out_path is not None:
        path = Path(out_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.save(path, format="PNG")
    return figure


def render_caption_gif(
    image: Any,
    words: Sequence[str],
    attention: Any,
    out_path: str | Path,
    *,
    duration_ms: int = 800,
    **panel_options: Any,
) -> list[Image.Image]:
    """Save an animated GIF: the plain image under the whole caption, then one frame per word.

    Each word's frame is labelled `word (t/T)`, so no two frames are alike and none is merged
    away: the GIF has exactly `T + 1` frames of `pw x (ph + label_height)`, the panels of
    `render_caption_overlay` (the image's aspect ratio, the longest side `panel_size`).

    Args:
        image, words, attention, panel_options: as for `render_caption_overlay`.
        out_path: where to save the GIF (parent folders are created).
        duration_ms: how long each frame shows; the animation loops forever.

    Returns:
        The `T + 1` frames, RGB `PIL.Image.Image`s.
    """
    words = as_tokens(words, "words")
    duration_ms = _positive_int(duration_ms, "duration_ms")
    frames = _caption_panels(image, words, attention, PanelOptions(**panel_options),
                             labels=[" ".join(words)] +
                             [f"{word} ({t + 1}/{len(words)})" for t, word in enumerate(words)])
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(path, format="GIF", save_all=True, append_images=frames[1:],
                   duration=duration_ms, loop=0)
    return frames


def _caption_panels(image: Any, words: Sequence[str], attention: Any, options: PanelOptions,
                    labels: Sequence[str] | None = None) -> list[Image.Image]:
    """The plain-image panel followed by one attended panel per word, each with its label."""
    words = as_tokens(words, "words")
    maps = as_attention_maps(attention, len(words))
    panel_size, smooth, label_height = options.panel_size, options.smooth, options.label_height
    dim, glow, hard_indices = options.dim, options.glow, options.hard_indices
    SMOOTHING.get(smooth)  # fail on a wrong name before any drawing
    panel_size = _positive_int(panel_size, "panel_size")
    if panel_size < 8:
        raise UserError(f"expected panel_size >= 8 pixels, got {panel_size}")
    for name, value in (("dim", dim), ("glow", glow)):
        if not 0.0 <= float(value) <= 1.0:
            raise UserError(f"expected {name} in [0, 1], got {value}")
    strip = default_label_height(panel_size) if label_height is None else int(label_height)
    if strip < 0:
        raise UserError(f"expected label_height >= 0, got {label_height}")
    grid = maps.shape[1:]
    picks = None if hard_indices is None else as_hard_indices(hard_indices, len(words), grid)
    picture = as_rgb_image(image)
    width, height = panel_shape(picture.size, panel_size)
    base = np.asarray(picture.resize((width, height), Image.Resampling.BILINEAR))
    labels = ["", *words] if labels is None else list(labels)
    font = _font(strip)

    panels = [_with_label(Image.fromarray(base), labels[0], strip, font)]
    for t in range(len(words)):
        peak = float(maps[t].max())
        if peak > 1e-12:
            weights = upsample_attention(maps[t] / peak, (height, width), smooth)
            picture = Image.fromarray(shade_attention(base, weights, float(dim), float(glow)))
        else:  # no weight anywhere: nothing to show, not "looked nowhere"
            picture = Image.fromarray(base)
        if picks is not None:
            _mark_cell(picture, int(picks[t]), grid, options.mark_color)
        panels.append(_with_label(picture, labels[t + 1], strip, font))
    return panels


def _mark_cell(picture: Image.Image, index: int, grid: tuple[int, int], color: Color) -> None:
    """Outlines a grid cell in `color`, edged in black on both sides so it reads on any image
    (a red line alone vanishes on a red object)."""
    rows, cols = grid
    row, col = divmod(index, cols)
    width, height = picture.size
    box = [round(col * width / cols), round(row * height / rows),
           round((col + 1) * width / cols) - 1, round((row + 1) * height / rows) - 1]
    line = max(2, min(width, height) // 112)
    draw = ImageDraw.Draw(picture)
    draw.rectangle([box[0] - 1, box[1] - 1, box[2] + 1, box[3] + 1], outline=(0, 0, 0),
                   width=line + 2)
    draw.rectangle(box, outline=color, width=line)


def _with_label(picture: Image.Image, text: str, strip: int, font: Any) -> Image.Image:
    if strip == 0:
        return picture
    width, height = picture.size
    panel = Image.new("RGB", (width, height + strip), "white")
    panel.paste(picture, (0, 0))
    draw = ImageDraw.Draw(panel)
    text = _fit_text(draw, text, font, width - 4)
    text_width = draw.textlength(text, font=font)
    draw.text(((width - text_width) / 2, height + strip / 2), text, fill="black", font=font,
              anchor="lm")
    return panel


def _fit_text(draw: ImageDraw.ImageDraw, text: str, font: Any, max_width: float) -> str:
    """`text`, cut with an ellipsis where it is wider than `max_width`.

    The longest prefix that fits is found by bisection (a prefix is never narrower than a
    shorter one), so a word of thousands of characters costs a dozen measurements, not one
    per character."""
    if draw.textlength(text, font=font) <= max_width:
        return text
    fits, too_long = 0, len(text)  # text[:fits] + "…" fits; text[:too_long] + "…" does not
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        if draw.textlength(text[:middle] + "…", font=font) <= max_width:
            fits = middle
        else:
            too_long = middle
    return text[:fits] + "…"


def _font(strip: int) -> Any:
    return ImageFont.load_default(size=max(8, int(strip * 0.6)))


def _pil_resize(values: np.ndarray, height: int, width: int, method: Any) -> np.ndarray:
    resized = Image.fromarray(np.ascontiguousarray(values, dtype=np.float32)).resize(
        (width, height), method
    )
    return np.asarray(resized, dtype=np.float32)


def _gaussian_matrix(size: int, sigma: float) -> np.ndarray:
    """`(size, size)` rows of a Gaussian blur, each renormalized to sum 1 at the edges."""
    positions = np.arange(size, dtype=np.float64)
    kernel = np.exp(-0.5 * ((positions[:, None] - positions[None, :]) / max(sigma, 1e-6)) ** 2)
    return kernel / kernel.sum(axis=1, keepdims=True)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"expected {name} as an integer >= 1, got {value!r}")
    return int(value)
