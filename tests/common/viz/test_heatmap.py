"""Alignment heatmaps and head grids: saved PNGs, labels that fit, one shared colour scale."""

import itertools
import re
import warnings

import numpy as np
import pytest
from PIL import Image

from common.errors import UserError
from common.viz import (
    alignment_figure,
    head_grid_figure,
    render_alignment_heatmap,
    render_head_grid,
)
from common.viz.heatmap import DPI, SOURCE_LABEL_ROTATION

SOURCE = "el hombre , que nunca había visto el mar-mediterráneo , se quedó callado .".split()
TARGET = "the man , who had never seen the mediterranean-sea , stayed quiet . <end>".split()


def _weights(*shape, seed=0):
    weights = np.random.default_rng(seed).random(shape)
    return weights / weights.sum(axis=-1, keepdims=True)


def _overlaps(labels, renderer):
    boxes = [label.get_window_extent(renderer) for label in labels if label.get_text()]
    return [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]


def _tick_spacing_pixels(axes, axis):
    """The distance in pixels between neighbouring tick positions along `axis`."""
    ticks = (axes.get_xticks() if axis == "x" else axes.get_yticks())[:2]
    points = [(tick, 0) if axis == "x" else (0, tick) for tick in ticks]
    a, b = axes.transData.transform(points)
    return float(np.hypot(*(b - a)))


def test_heatmap_png_is_saved_at_the_figure_size(tmp_path):
    path = tmp_path / "plots" / "alignment.png"
    figure = alignment_figure(SOURCE, TARGET, _weights(len(TARGET), len(SOURCE)))
    render_alignment_heatmap(SOURCE, TARGET, _weights(len(TARGET), len(SOURCE)), path,
                             title="es -> en")
    width, height = figure.get_size_inches() * DPI
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert abs(image.size[0] - width) <= 1 and abs(image.size[1] - height) <= 1
        # 14 x 14 tokens need room: well over a small default-sized figure.
        assert image.size[0] > 500 and image.size[1] > 500


def test_heatmap_grows_with_the_token_counts(tmp_path):
    small = alignment_figure(["a", "b"], ["x"], [[0.5, 0.5]]).get_size_inches()
    wide = alignment_figure(SOURCE, ["x"], _weights(1, len(SOURCE))).get_size_inches()
    tall = alignment_figure(["a", "b"], TARGET, _weights(len(TARGET), 2)).get_size_inches()
    assert wide[0] > small[0] and tall[1] > small[1]


@pytest.mark.parametrize("repeat", [1, 3])  # 14 and 42 tokens a side
def test_heatmap_labels_every_token_without_overlap(repeat):
    source, target = SOURCE * repeat, TARGET * repeat
    weights = _weights(len(target), len(source))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. constrained layout giving up, missing glyphs
        figure = alignment_figure(source, target, weights, title="t")
        figure.canvas.draw()
    axes, colorbar = figure.axes
    assert colorbar.get_ylabel() == "attention weight"
    x_labels, y_labels = axes.get_xticklabels(), axes.get_yticklabels()
    assert [label.get_text() for label in x_labels] == source
    assert [label.get_text() for label in y_labels] == target
    assert all(label.get_rotation() == SOURCE_LABEL_ROTATION for label in x_labels)
    renderer = figure.canvas.get_renderer()
    # Horizontal target labels: their boxes must not touch.
    assert _overlaps(y_labels, renderer) == []
    # Parallel rotated source labels: the gap between neighbouring baselines, measured across
    # the text, must hold a line of text (their axis-aligned boxes overlap by construction).
    line = x_labels[0].get_fontsize() * figure.dpi / 72
    across = _tick_spacing_pixels(axes, "x") * np.sin(np.radians(SOURCE_LABEL_ROTATION))
    assert across >= line
    assert _tick_spacing_pixels(axes, "y") >= line
    # Every label lies inside the figure (nothing clipped).
    canvas = figure.bbox
    for label in [*x_labels, *y_labels]:
        box = label.get_window_extent(renderer)
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= canvas.x1 + 1 and box.y1 <= canvas.y1 + 1


def test_heatmap_shows_the_weights():
    weights = _weights(3, 4)
    figure = alignment_figure(list("abcd"), list("xyz"), weights)
    image = figure.axes[0].get_images()[0]
    np.testing.assert_allclose(np.asarray(image.get_array()), weights)
    assert image.get_clim() == (0.0, pytest.approx(weights.max()))


def test_head_grid_draws_every_head_on_one_scale(tmp_path):
    heads = _weights(5, len(TARGET), len(SOURCE))
    heads[3] *= 2.0  # one head with larger values sets the shared scale
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = head_grid_figure(SOURCE, TARGET, heads)
        figure.canvas.draw()
    panels = [axes for axes in figure.axes if axes.get_images()]
    assert [axes.get_title() for axes in panels] == [f"head {h}" for h in range(5)]
    for h, axes in enumerate(panels):
        image = axes.get_images()[0]
        np.testing.assert_allclose(np.asarray(image.get_array()), heads[h])
        assert image.get_clim() == (0.0, pytest.approx(heads.max()))
    assert len(figure.axes) == 6  # five heads and one colour bar
    path = tmp_path / "heads.png"
    render_head_grid(SOURCE, TARGET, heads, path, title="layer 0")
    with Image.open(path) as image:
        assert image.format == "PNG"
        # Three columns (ceil(sqrt(5))) by two rows of 14 x 14 heatmaps.
        assert image.size[0] > 3 * 400 and image.size[1] > 2 * 400


def test_head_grid_columns(tmp_path):
    figure = head_grid_figure(["a", "b"], ["x"], _weights(4, 1, 2), columns=4)
    boxes = [axes.get_position() for axes in figure.axes if axes.get_images()]
    assert len({round(box.y0, 3) for box in boxes}) == 1  # one row


@pytest.mark.parametrize("render, weights, message", [
    (render_alignment_heatmap, np.ones((2, 3)), "(T, S) = (3, 2)"),
    (render_alignment_heatmap, np.ones((3,)), "(T, S) = (3, 2)"),
    (render_head_grid, np.ones((3, 2)), "(H, T, S) = (H, 3, 2)"),
    (render_head_grid, np.ones((0, 3, 2)), "(H, T, S) = (H, 3, 2)"),
    (render_alignment_heatmap, np.full((3, 2), np.nan), "finite"),
])
def test_bad_shapes_are_user_errors(tmp_path, render, weights, message):
    with pytest.raises(UserError, match=re.escape(message)):
        render(["a", "b"], ["x", "y", "z"], weights, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
