"""The Show-Attend-Tell overlay and GIF: layout, the attention mask, hard-attention marks."""

import re

import numpy as np
import pytest
from PIL import Image, ImageDraw

from common.errors import UserError
from common.registry import UnknownNameError
from common.viz import (
    default_label_height,
    panel_shape,
    render_caption_gif,
    render_caption_overlay,
    shade_attention,
    upsample_attention,
)

P = 40  # panel size: the longest side
LABEL = 10  # label strip height
H, W = 24, 40  # the test image: wider than high, so panels are P x PH
PH = 24


def _image(seed=0, size=(H, W)):
    rng = np.random.default_rng(seed)
    return (rng.random((*size, 3)) * 200).astype(np.uint8)


def _one_hot_maps(steps, cells, grid=(4, 4)):
    maps = np.zeros((steps, *grid), np.float32)
    for t, (i, j) in enumerate(cells):
        maps[t, i, j] = 1.0
    return maps


def _panel(figure, k, columns, width=P, height=PH, label=LABEL):
    """The picture part (no label) of panel `k` of a figure, as an int array."""
    row, col = divmod(k, columns)
    box = (col * width, row * (height + label), (col + 1) * width, row * (height + label) + height)
    return np.asarray(figure.crop(box), dtype=np.int32)


def _brightness(pixels):
    return pixels.astype(np.float64).mean()


@pytest.mark.parametrize("size, panel, expected", [
    ((320, 240), 224, (224, 168)),  # (width, height) in, (width, height) out
    ((240, 320), 224, (168, 224)),
    ((640, 427), 144, (144, 96)),   # 427 * 144 / 640 = 96.1
    ((100, 100), 64, (64, 64)),
    ((1000, 10), 64, (64, 1)),      # never below one pixel
])
def test_panel_keeps_the_aspect_ratio_with_the_longest_side_panel_size(size, panel, expected):
    assert panel_shape(size, panel) == expected


@pytest.mark.parametrize("steps, columns, expected_cols, expected_rows",
                         [(6, 3, 3, 3), (2, 5, 3, 1), (4, 5, 5, 1), (5, 1, 1, 6)])
def test_figure_is_columns_by_rows_of_panels(steps, columns, expected_cols, expected_rows):
    figure = render_caption_overlay(_image(), ["w"] * steps, np.ones((steps, 3, 3)),
                                    columns=columns, panel_size=P, label_height=LABEL)
    assert figure.size == (expected_cols * P, expected_rows * (PH + LABEL))
    assert figure.mode == "RGB"


def test_default_label_strip_sets_the_panel_height():
    figure = render_caption_overlay(_image(), ["a", "b"], np.ones((2, 2, 2)), panel_size=70)
    assert figure.size == (3 * 70, 42 + default_label_height(70))  # 24 * 70 / 40 = 42


def test_first_panel_is_the_plain_image():
    image = _image()
    figure = render_caption_overlay(image, ["a"], np.ones((1, 2, 2)), columns=2, panel_size=P,
                                    label_height=LABEL)
    plain = np.asarray(Image.fromarray(image).resize((P, PH), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(_panel(figure, 0, 2), plain)


# -- the case: a light 4:3 photo -----------------------------------------------------

LIGHT = (215, 215, 215)
DISC = (90, 110, 50)  # centre x, centre y, radius, in the 320x240 image


def _disc_and_square(background=LIGHT):
    """320x240: a red disc on the left and a blue square on the right, on `background`."""
    image = Image.new("RGB", (320, 240), background)
    draw = ImageDraw.Draw(image)
    x, y, r = DISC
    draw.ellipse([x - r, y - r, x + r, y + r], fill=(220, 30, 30))
    draw.rectangle([200, 120, 280, 200], fill=(30, 60, 200))
    return np.asarray(image)


def _disc_attention():
    """A 3x4 map (80x80-pixel cells): all the weight on the 2x2 cells around the disc."""
    maps = np.zeros((1, 3, 4), np.float32)
    maps[0, :2, :2] = 0.25  # x 0-160, y 0-160; the disc spans x 40-140, y 60-160
    return maps


def _regions(shape, scale):
    """Masks of a panel: well inside the attended cells, and far from them (> half a cell)."""
    attended, far = np.zeros(shape, bool), np.zeros(shape, bool)
    attended[:round(130 * scale), :round(130 * scale)] = True
    far[round(200 * scale):, :] = True
    far[:, round(200 * scale):] = True
    return attended, far


@pytest.mark.parametrize("background", [LIGHT, (255, 255, 255), (128, 128, 128), (0, 0, 0)])
@pytest.mark.parametrize("smooth", ["bilinear", "gaussian", "nearest"])
def test_attended_region_stands_out_on_light_and_dark_images(background, smooth):
    """The same background, attended and not, must differ by a clear margin in the overlay.

    The old white glow added at most 0.6 * (255 - 215) = 24 levels to the light grey and
    nothing to white: no panel showed where the model looked on a light image.
    """
    scale = 224 / 320
    figure = render_caption_overlay(_disc_and_square(background), ["disc"], _disc_attention(),
                                    columns=2, panel_size=224, label_height=0, smooth=smooth)
    plain = _panel(figure, 0, 2, width=224, height=168, label=0)
    panel = _panel(figure, 1, 2, width=224, height=168, label=0)
    attended, far = _regions(panel.shape[:2], scale)
    ground = (np.abs(plain - background) <= 3).all(-1)  # background pixels only
    margin = _brightness(panel[attended & ground]) - _brightness(panel[far & ground])
    assert margin > 60, f"attended background only {margin:.1f} levels brighter than the rest"
    # The objects, relative to themselves: the attended disc keeps its brightness, the square
    # the model did not look at is dimmed well below its own.
    disc = (plain[:, :, 0] > 150) & (plain[:, :, 1] < 80)
    square = (plain[:, :, 2] > 150) & (plain[:, :, 0] < 80)
    assert _brightness(panel[disc]) >= 0.95 * _brightness(plain[disc])
    assert _brightness(panel[square]) <= 0.5 * _brightness(plain[square])


def test_a_4_by_3_photo_keeps_its_aspect_ratio_and_its_disc_stays_round():
    image = _disc_and_square()
    figure = render_caption_overlay(image, ["disc"], _disc_attention(), columns=2,
                                    panel_size=224, label_height=0)
    tile_w, tile_h = figure.width // 2, figure.height
    assert abs(tile_w / tile_h - 320 / 240) < 0.01
    for k in range(2):  # the plain image and the attended panel
        panel = _panel(figure, k, 2, width=tile_w, height=tile_h, label=0)
        red = (panel[:, :, 0] > panel[:, :, 1] + 40) & (panel[:, :, 0] > panel[:, :, 2] + 40)
        rows, cols = np.nonzero(red)
        width, height = cols.max() - cols.min() + 1, rows.max() - rows.min() + 1
        assert abs(width - height) <= 2, (k, width, height)  # a circle, not an ellipse
        assert abs(width - 2 * DISC[2] * 224 / 320) <= 3


# -- the mask itself ----------------------------------------------------------------------------

def test_shade_attention_matches_a_hand_computed_table():
    # d = image * (1 - dim * (1 - w)), out = d + glow * w * (255 - d), with dim 0.7, glow 0.25:
    #   200, w=1:   d = 200,            out = 200 + 0.25 * 55 = 213.75 -> 214
    #   200, w=0:   d = 60,             out = 60
    #   200, w=0.5: d = 200 * 0.65 = 130, out = 130 + 0.125 * 125 = 145.625 -> 146
    #     0, w=1:   d = 0,              out = 0.25 * 255 = 63.75 -> 64
    #   255, w=0:   d = 76.5,           out = 76.5 -> 76 (round half to even)
    image = np.array([[[200, 200, 200], [200, 200, 200], [200, 200, 200], [0, 0, 0],
                       [255, 255, 255]]], np.uint8)
    weights = np.array([[1.0, 0.0, 0.5, 1.0, 0.0]])
    out = shade_attention(image, weights, dim=0.7, glow=0.25)
    np.testing.assert_array_equal(out[0, :, 0], [214, 60, 146, 64, 76])
    np.testing.assert_array_equal(shade_attention(image, weights, dim=0, glow=0), image)


def test_nearest_mask_matches_the_formula_cell_by_cell():
    dim, glow = 0.7, 0.25
    maps = _one_hot_maps(1, [(1, 2)])
    figure = render_caption_overlay(_image(), ["w"], maps, columns=2, panel_size=P,
                                    label_height=LABEL, smooth="nearest", dim=dim, glow=glow)
    plain, panel = _panel(figure, 0, 2), _panel(figure, 1, 2)
    cell_h, cell_w = PH // 4, P // 4
    expected = plain * (1 - dim)  # unattended
    region = np.s_[cell_h:2 * cell_h, 2 * cell_w:3 * cell_w]
    expected[region] = plain[region] + glow * (255 - plain[region])  # weight 1
    assert np.abs(panel - expected).max() <= 0.5 + 1e-3  # the formula, up to rounding


@pytest.mark.parametrize("smooth", ["bilinear", "gaussian", "nearest"])
def test_mask_follows_the_attended_cell(smooth):
    maps = _one_hot_maps(2, [(0, 0), (3, 3)])  # top-left cell, then bottom-right cell
    image = np.full((H, W, 3), 150, np.uint8)
    figure = render_caption_overlay(image, ["top", "bottom"], maps, columns=3, panel_size=P,
                                    label_height=LABEL, smooth=smooth)
    top, bottom = _panel(figure, 1, 3), _panel(figure, 2, 3)
    top_left, bottom_right = np.s_[:PH // 8, :P // 8], np.s_[-PH // 8:, -P // 8:]
    dimmed = round(150 * 0.3)
    # Near the attended corner the image keeps (nearly) its 150; far from it, it is dimmed.
    assert top[top_left].mean() > 120 and bottom[bottom_right].mean() > 120
    assert abs(top[bottom_right] - dimmed).max() <= 1
    assert abs(bottom[top_left] - dimmed).max() <= 1


def test_each_map_is_scaled_to_its_own_peak():
    maps = np.random.default_rng(1).random((1, 4, 4)).astype(np.float32)
    tiny = render_caption_overlay(_image(), ["w"], maps * 1e-3, panel_size=P, label_height=0)
    big = render_caption_overlay(_image(), ["w"], maps, panel_size=P, label_height=0)
    zero = render_caption_overlay(_image(), ["w"], maps * 0, panel_size=P, label_height=0)
    np.testing.assert_array_equal(np.asarray(tiny), np.asarray(big))
    zero = np.asarray(zero)
    np.testing.assert_array_equal(zero[:, P:], zero[:, :P])  # an all-zero map changes nothing


def test_hard_index_outlines_the_chosen_cell_edged_in_black():
    mark = (255, 40, 0)
    size, height = 80, 48  # panels 80 x 48: 4x4 cells of 20 x 12
    # dim = glow = 0: no mask, so only the outline can change pixels. Index 6 in a 4x4 grid is
    # row 1, column 2.
    figure = render_caption_overlay(_image(), ["w"], np.ones((1, 4, 4)), columns=2,
                                    panel_size=size, label_height=LABEL, dim=0.0, glow=0.0,
                                    hard_indices=[6], mark_color=mark)
    plain = _panel(figure, 0, 2, width=size, height=height)
    panel = _panel(figure, 1, 2, width=size, height=height)
    y0, x0, ch, cw = 12, 40, 12, 20

    def ring(inset, thickness):
        inner = np.zeros((height, size), bool)
        inner[y0 + inset:y0 + ch - inset, x0 + inset:x0 + cw - inset] = True
        hole = np.zeros_like(inner)
        t = inset + thickness
        hole[y0 + t:y0 + ch - t, x0 + t:x0 + cw - t] = True
        return inner & ~hole

    coloured = ring(0, 2)  # a 2-pixel line just inside the cell
    black = ring(-1, 1) | ring(2, 1)  # one pixel either side of it
    assert (panel[coloured] == mark).all()
    assert (panel[black] == 0).all()
    untouched = ~(coloured | black)
    np.testing.assert_array_equal(panel[untouched], plain[untouched])


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
        assert gif.size == (P, PH + default_label_height(P))  # the image's aspect ratio


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


@pytest.mark.parametrize("kwargs, message", [
    ({"words": ["a"]}, "one attention map per word"),
    ({"attention": np.ones((2, 5))}, "square number"),
    ({"image": np.zeros((8, 8, 3), np.float32)}, "uint8"),
    ({"image": np.zeros((8, 8, 4), np.uint8)}, "(H, W, 3)"),
    ({"hard_indices": [0, 4]}, "in [0, 4)"),
    ({"hard_indices": [0]}, "one per word"),
    ({"columns": 0}, "columns"),
    ({"dim": 1.5}, "expected dim in [0, 1]"),
    ({"glow": -0.1}, "expected glow in [0, 1]"),
])
def test_bad_input_is_a_user_error(kwargs, message):
    args = {"image": _image(), "words": ["a", "b"], "attention": np.ones((2, 2, 2))}
    args.update(kwargs)
    with pytest.raises(UserError, match=re.escape(message)):
        render_caption_overlay(**args)


def test_unknown_smoothing_lists_the_choices():
    with pytest.raises(UnknownNameError, match="bilinear, gaussian"):
        render_caption_overlay(_image(), ["a"], np.ones((1, 2, 2)), smooth="cubic")


@pytest.mark.parametrize("text", ["a caption", "W" * 40, "ééé" * 40, "word" * 100])
@pytest.mark.parametrize("width", [4, 30, 120])
def test_a_label_is_cut_where_the_longest_prefix_still_fits(text, width):
    """Bisection (a long word's label costs a dozen measurements) gives what dropping one
    character at a time gives."""
    from common.viz.overlay import _fit_text, _font

    draw, font = ImageDraw.Draw(Image.new("RGB", (8, 8))), _font(20)
    expected = text
    if draw.textlength(text, font=font) > width:
        while expected and draw.textlength(expected + "…", font=font) > width:
            expected = expected[:-1]
        expected += "…"
    assert _fit_text(draw, text, font, width) == expected
