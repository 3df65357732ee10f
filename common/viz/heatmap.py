"""Translation attention as alignment heatmaps (Bahdanau et al. 2015, figure 3).

Bahdanau, Cho and Bengio 2015, "Neural Machine Translation by Jointly Learning to Align and
Translate": each target word is a row, each source word a column, and a cell's shade is the
weight the target step put on that source position. `render_head_grid` draws the same for
every head of a multi-head layer (Vaswani et al. 2017).

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no global state, no display).
Figures are sized to the token counts so every label gets its own slot; source tokens are
rotated so long ones do not overlap. A side without tokens (an empty translation) is drawn as
one blank, labelled cell.

Dimensions: `T` target tokens, `S` source tokens, `H` heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError
from common.viz.inputs import as_alignment, as_tokens

# Inches per token (one heatmap cell), the smallest heatmap side, in inches.
CELL_INCHES = 0.32
MIN_SIDE_INCHES = 1.6
CHAR_INCHES = 0.08  # the width of one character of a 10-point tick label, roughly
SOURCE_LABEL_ROTATION = 60
DPI = 100


def alignment_figure(
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    weights: Any,
    title: str | None = None,
    cmap: str = "viridis",
) -> Any:
    """Build the heatmap `Figure` of one source-target attention matrix.

    Args:
        source_tokens: the `S` source tokens, along the x axis (rotated labels).
        target_tokens: the `T` target tokens, down the y axis.
        weights: `(T, S)` attention weights; row `t` is target step `t`'s distribution.
        title: an optional title above the heatmap.
        cmap: a matplotlib colour map name.

    Returns:
        A `matplotlib.figure.Figure` on an Agg canvas.
    """
    source, target, matrix = _checked(source_tokens, target_tokens, weights)
    figure = _new_figure(_side(len(source)) + _label_width(target) + 1.4,
                         _side(len(target)) + _label_height(source) + 0.6)
    axes = figure.add_subplot(1, 1, 1)
    image = _draw(axes, matrix, source, target, cmap, vmax=_vmax(matrix))
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.03, label="attention weight")
    if title:
        axes.set_title(title)
    return figure


def head_grid_figure(
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    weights: Any,
    columns: int | None = None,
    title: str | None = None,
    cmap: str = "viridis",
) -> Any:
    """Build the `Figure` of a grid of attention heatmaps, one per head, sharing one colour
    scale.

    As `alignment_figure` draws one matrix, the source (key) tokens along each x axis and the
    target (query) tokens down the y axes, but for `weights (H, T, S)`, the attention weights
    of one layer (e.g. one example's slice of a `MultiHeadAttention`'s `(B, H, T, S)`), in
    `columns` heads per row (default `min(4, ceil(√H))`), `title` above the grid.
    """
    source, target, heads = _checked(source_tokens, target_tokens, weights, heads=True)
    num_heads = heads.shape[0]
    if columns is None:
        columns = min(4, math.ceil(math.sqrt(num_heads)))
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise UserError(f"expected columns as an integer >= 1, got {columns!r}")
    cols = min(columns, num_heads)
    rows = math.ceil(num_heads / cols)
    cell_w = _side(len(source)) + 0.3
    cell_h = _side(len(target)) + _label_height(source) + 0.5
    figure = _new_figure(cols * cell_w + _label_width(target) + 1.2,
                         rows * cell_h + (0.4 if title else 0.0))
    grid = figure.add_gridspec(rows, cols)
    vmax = _vmax(heads)
    image = None
    axes_list = []
    for h in range(num_heads):
        row, col = divmod(h, cols)
        axes = figure.add_subplot(grid[row, col])
        # Source tokens under every panel (rows stay alike), target tokens on the left only.
        image = _draw(axes, heads[h], source, target, cmap, vmax=vmax, show_y=col == 0)
        axes.set_title(f"head {h}", fontsize="small")
        axes_list.append(axes)
    figure.colorbar(image, ax=axes_list, fraction=0.03, pad=0.02, label="attention weight")
    if title:
        figure.suptitle(title)
    return figure


def _saved_as_png(build: Callable[..., Any], name: str, doc: str) -> Callable[..., None]:
    """`name(source_tokens, target_tokens, weights, out_path, **options)`: the figure
    `build(source_tokens, target_tokens, weights, **options)` saved as a PNG at `out_path`
    (parent folders are created)."""

    def render(source_tokens: Sequence[str], target_tokens: Sequence[str], weights: Any,
               out_path: str | Path, **options: Any) -> None:
        _save(build(source_tokens, target_tokens, weights, **options), out_path)

    render.__name__ = render.__qualname__ = name
    render.__doc__ = doc
    return render


render_alignment_heatmap = _saved_as_png(alignment_figure, "render_alignment_heatmap", """Save
    `alignment_figure(source_tokens, target_tokens, weights, **options)` (options: `title`,
    `cmap`) as a PNG at `out_path` (parent folders are created).

    Example:
    >>> render_alignment_heatmap(["la", "casa", "."], ["the", "house", "."],
    ...                          np.eye(3), "/tmp/alignment.png", title="es -> en")
    """)

render_head_grid = _saved_as_png(head_grid_figure, "render_head_grid", """Save
    `head_grid_figure(source_tokens, target_tokens, weights, **options)` (options: `columns`,
    `title`, `cmap`) as a PNG at `out_path` (parent folders are created).

    Example:
    >>> weights = np.full((8, 3, 4), 0.25)
    >>> render_head_grid(["a", "b", "c", "d"], ["x", "y", "z"], weights, "/tmp/heads.png")
    """)


def _checked(source_tokens: Sequence[str], target_tokens: Sequence[str], weights: Any,
             heads: bool = False) -> tuple[list[str], list[str], Any]:
    """The tokens as lists and the weights as an array that fits them, or a UserError."""
    source = as_tokens(source_tokens, "source_tokens")
    target = as_tokens(target_tokens, "target_tokens")
    return source, target, as_alignment(weights, len(target), len(source), heads=heads)


def _draw(axes: Any, matrix: Any, source: list[str], target: list[str], cmap: str,
          vmax: float, show_y: bool = True) -> Any:
    empty = 0 in matrix.shape  # an empty translation (or source): no cell to shade
    if empty:
        # One blank cell for the side without tokens (NaN: not shaded), so that the axes keep
        # their labels and limits; an image of no rows has none (matplotlib warns of it).
        matrix = np.full((max(len(target), 1), max(len(source), 1)), np.nan)
    image = axes.imshow(matrix, cmap=cmap, vmin=0.0, vmax=vmax, aspect="equal",
                        interpolation="nearest")
    if empty:
        axes.text(0.5, 0.5, f"no {'target' if not target else 'source'} tokens",
                  transform=axes.transAxes, ha="center", va="center", color="0.4")
    axes.set_xticks(range(len(source)))
    axes.set_yticks(range(len(target)))
    axes.set_xticklabels(source, rotation=SOURCE_LABEL_ROTATION, ha="right",
                         rotation_mode="anchor")
    if show_y:
        axes.set_yticklabels(target)
    else:
        axes.set_yticklabels([])
    axes.tick_params(length=0)
    return image


def _side(num_tokens: int) -> float:
    return max(MIN_SIDE_INCHES, CELL_INCHES * num_tokens)


def _label_width(tokens: list[str]) -> float:
    """Inches taken by the longest horizontal tick label."""
    return CHAR_INCHES * max((len(token) for token in tokens), default=0)


def _label_height(tokens: list[str]) -> float:
    """Inches taken by the longest rotated tick label."""
    angle = math.radians(SOURCE_LABEL_ROTATION)
    return CHAR_INCHES * max((len(token) for token in tokens), default=0) * math.sin(angle)


def _vmax(values: Any) -> float:
    peak = float(values.max()) if values.size else 0.0
    return peak if peak > 0.0 else 1.0


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, out_path: str | Path) -> None:
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
