"""A side without tokens (an empty translation) is drawn as one blank, labelled cell, with no
matplotlib warning."""

import warnings

import numpy as np
import pytest
from PIL import Image

from common.viz import alignment_figure, render_alignment_heatmap, render_head_grid

SOURCE = ["la", "casa", "."]


def _texts(figure):
    return [text.get_text() for axes in figure.axes for text in axes.texts]


@pytest.mark.parametrize("render, weights", [
    (render_alignment_heatmap, np.zeros((0, 3))),
    (render_head_grid, np.zeros((2, 0, 3))),
])
def test_an_empty_translation_draws_without_a_warning(tmp_path, render, weights):
    path = tmp_path / "empty.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "identical low and high ylims"
        render(SOURCE, [], weights, path)
    with Image.open(path) as image:
        assert image.format == "PNG"


def test_the_empty_side_is_said_and_the_other_keeps_its_labels():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = alignment_figure(SOURCE, [], np.zeros((0, 3)))
        figure.canvas.draw()
    axes = figure.axes[0]
    assert [label.get_text() for label in axes.get_xticklabels()] == SOURCE
    assert axes.get_yticks().size == 0
    assert "no target tokens" in _texts(figure)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = alignment_figure([], ["the"], np.zeros((1, 0)))
    assert "no source tokens" in _texts(figure)


def test_a_full_matrix_has_no_such_label():
    assert _texts(alignment_figure(SOURCE, ["the"], [[0.2, 0.5, 0.3]])) == []
