"""The Show-Attend-Tell overlay and GIF: layout, where the blend lands, hard-attention marks."""

import re

import numpy as np
import pytest
from PIL import Image

from common.errors import UserError
from common.registry import UnknownNameError
from common.viz import (
    blend_attention,
    default_label_height,
    render_caption_gif,
    render_caption_overlay,
    upsample_attention,
)

P = 32  # panel size
LABEL = 10  # label strip height


def _image(seed=0, size=(24, 40)):
    rng = np.random.default_rng(seed)
    return (rng.random((*size, 3)) * 200).astype(np.uint8)


def _one_hot_maps(steps, cells, grid=(4, 4)):
    maps = np.zeros((steps, *grid), np.float32)
    for t, (i, j) in enumerate(cells):
        maps[t, i, j] = 1.0
    return maps


def _panel(figure, k, columns):
    """The picture part (no label) of panel `k` of a figure, as an int array."""
    row, col = divmod(k, columns)
    box = (col * P, row * (P + LABEL), (col + 1) * P, row * (P + LABEL) + P)
    return np.asarray(figure.crop(box), dtype=np.int32)


@pytest.mark.parametrize("steps, columns, expected_cols, expected_rows",
                         [(6, 3, 3, 3), (2, 5, 3, 1), (4, 5, 5, 1), (5, 1, 1, 6)])
def test_figure_is_columns_by_rows_of_panels(steps, columns, expected_cols, expected_rows):
    figure = render_caption_overlay(_image(), ["w"] * steps, np.ones((steps, 3, 3)),
                                    columns=columns, panel_size=P, label_height=LABEL)
    assert figure.size == (expected_cols * P, expected_rows * (P + LABEL))
    assert figure.mode == "RGB"


def test_default_label_strip_sets_the_panel_height():
    figure = render_caption_overlay(_image(), ["a", "b"], np.ones((2, 2, 2)), panel_size=70)
    assert figure.size == (3 * 70, 70 + default_label_height(70))


def test_first_panel_is_the_plain_image():
    image = _image()
    figure = render_caption_overlay(image, ["a"], np.ones((1, 2, 2)), columns=2, panel_size=P,
                                    label_height=LABEL)
    plain = np.asarray(Image.fromarray(image).resize((P, P), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(_panel(figure, 0, 2), plain)


@pytest.mark.parametrize("smooth", ["bilinear", "gaussian", "nearest"])
def test_blend_brightens_where_weight_is_high_and_not_where_it_is_zero(smooth):
    maps = _one_hot_maps(2, [(0, 0), (3, 3)])  # top-left cell, then bottom-right cell
    figure = render_caption_overlay(_image(), ["top", "bottom"], maps, columns=3, panel_size=P,
                                    label_height=LABEL, smooth=smooth, alpha=0.6)
    plain, top, bottom = (_panel(figure, k, 3) for k in range(3))
    cell = P // 4
    top_left_hot, top_left_far = np.s_[: cell // 2, : cell // 2], np.s_[:cell, :cell]
    bottom_right_hot, bottom_right_far = np.s_[-cell // 2:, -cell // 2:], np.s_[-cell:, -cell:]
    tolerance = 1 if smooth == "gaussian" else 0  # gaussian tails may round to one level
    # Where the weight peaks the pixels move towards white; far away they stay.
    assert (top[top_left_hot] - plain[top_left_hot]).min() > 0
    assert np.abs(top[bottom_right_far] - plain[bottom_right_far]).max() <= tolerance
    assert (bottom[bottom_right_hot] - plain[bottom_right_hot]).min() > 0
    assert np.abs(bottom[top_left_far] - plain[top_left_far]).max() <= tolerance


def test_nearest_blend_matches_the_formula():
    alpha, color = 0.6, np.array([255, 255, 255])
    maps = _one_hot_maps(1, [(1, 2)])
    figure = render_caption_overlay(_image(), ["w"], maps, columns=2, panel_size=P,
                                    label_height=LABEL, smooth="nearest", alpha=alpha)
    plain, panel = _panel(figure, 0, 2), _panel(figure, 1, 2)
    cell = P // 4
    expected = plain.copy()
    region = np.s_[cell:2 * cell, 2 * cell:3 * cell]
    expected[region] = np.rint(plain[region] + alpha * (color - plain[region]))
    np.testing.assert_array_equal(panel, expected)


def test_each_map_is_scaled_to_its_own_peak():
    maps = np.random.default_rng(1).random((1, 4, 4)).astype(np.float32)
    tiny = render_caption_overlay(_image(), ["w"], maps * 1e-3, panel_size=P, label_height=0)
    big = render_caption_overlay(_image(), ["w"], maps, panel_size=P, label_height=0)
    zero = render_caption_overlay(_image(), ["w"], maps * 0, panel_size=P, label_height=0)
    np.testing.assert_array_equal(np.asarray(tiny), np.asarray(big))
    zero = np.asarray(zero)
    np.testing.assert_array_equal(zero[:, P:], zero[:, :P])  # an all-zero map changes nothing


def test_hard_index_outlines_the_chosen_cell():
    mark = (255, 40, 0)
    # alpha 0: no blend, so only the rectangle can change pixels. Index 6 in a 4x4 grid is
    # row 1, column 2.
    figure = render_caption_overlay(_image(), ["w"], np.ones((1, 4, 4)), columns=2,
                                    panel_size=P, label_height=LABEL, alpha=0.0,
                                    hard_indices=[6], mark_color=mark)
    plain, panel = _panel(figure, 0, 2), _panel(figure, 1, 2)
    cell = P // 4
    y0, x0 = cell, 2 * cell
    border = np.zeros((P, P), bool)
    border[y0:y0 + cell, x0:x0 + cell] = True
    border[y0 + 2:y0 + cell - 2, x0 + 2:x0 + cell - 2] = False  # 2-pixel outline
    assert (panel[border] == mark).all()
    np.testing.assert_array_equal(panel[~border], plain[~border])


def test_flat_square_attention_is_read_as_a_grid():
    maps = np.random.default_rng(2).random((2, 3, 3))
    grid = render_caption_overlay(_image(), ["a", "b"], maps, panel_size=P)
    flat = render_caption_overlay(_image(), ["a", "b"], maps.reshape(2, 9), panel_size=P)
    np.testing.assert_array_equal(np.asarray(grid), np.asarray(flat))


def test_out_path_gets_a_png(tmp_path):
    path = tmp_path / "sub" / "overlay.png"
    figure = render_caption_overlay(_image(), ["a", "b"], np.ones((2, 2, 2)), path,
                                    panel_size=P)
    with Image.open(path) as saved:
        assert saved.format == "PNG"
        np.testing.assert_array_equal(np.asarray(saved.convert("RGB")), np.asarray(figure))


def test_gif_has_one_frame_per_word_after_the_plain_image(tmp_path):
    # Repeated words with identical maps must still give distinct frames.
    words = ["a", "a", "dog", "a"]
    path = tmp_path / "caption.gif"
    frames = render_caption_gif(_image(), words, np.ones((4, 2, 2)), path, panel_size=P,
                                hard_indices=[0, 0, 1, 3], duration_ms=100)
    assert len(frames) == len(words) + 1
    with Image.open(path) as gif:
        assert gif.format == "GIF"
        assert gif.n_frames == len(words) + 1
        assert gif.size == (P, P + default_label_height(P))


def test_nearest_upsampling_repeats_cells():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(upsample_attention(values, (8, 12), "nearest"),
                                  np.kron(values, np.ones((4, 4))))


@pytest.mark.parametrize("smooth", ["bilinear", "gaussian"])
def test_smooth_upsampling_stays_in_range_and_keeps_constants(smooth):
    values = np.random.default_rng(3).random((5, 5)).astype(np.float32)
    up = upsample_attention(values, (40, 30), smooth)
    assert up.shape == (40, 30)
    assert values.min() - 1e-6 <= up.min() and up.max() <= values.max() + 1e-6
    np.testing.assert_allclose(upsample_attention(np.full((5, 5), 0.3), (40, 30), smooth), 0.3,
                               rtol=1e-5)


def test_blend_attention_formula():
    image = np.array([[[0, 100, 200], [50, 50, 50]]], np.uint8)
    out = blend_attention(image, np.array([[1.0, 0.5]]), alpha=0.5, color=(255, 0, 0))
    expected = np.rint(image + 0.5 * np.array([[1.0], [0.5]]) * ([255, 0, 0] - image.astype(float)))
    np.testing.assert_array_equal(out, expected.astype(np.uint8))


@pytest.mark.parametrize("kwargs, message", [
    ({"words": ["a"]}, "one attention map per word"),
    ({"attention": np.ones((2, 5))}, "square number"),
    ({"image": np.zeros((8, 8, 3), np.float32)}, "uint8"),
    ({"image": np.zeros((8, 8, 4), np.uint8)}, "(H, W, 3)"),
    ({"hard_indices": [0, 4]}, "in [0, 4)"),
    ({"hard_indices": [0]}, "one per word"),
    ({"columns": 0}, "columns"),
    ({"alpha": 1.5}, "alpha"),
])
def test_bad_input_is_a_user_error(kwargs, message):
    args = {"image": _image(), "words": ["a", "b"], "attention": np.ones((2, 2, 2))}
    args.update(kwargs)
    with pytest.raises(UserError, match=re.escape(message)):
        render_caption_overlay(**args)


def test_unknown_smoothing_lists_the_choices():
    with pytest.raises(UnknownNameError, match="bilinear, gaussian"):
        render_caption_overlay(_image(), ["a"], np.ones((1, 2, 2)), smooth="cubic")
