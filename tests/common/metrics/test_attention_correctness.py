"""Attention correctness against hand-computed cases and a brute-force rasterization."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from common.errors import UserError
from common.metrics.attention_correctness import (
    AttentionCorrectness,
    attention_correctness,
    coco_category,
    corpus_attention_correctness,
    match_coco_words,
    match_shapes_words,
    region_fractions,
)


def shape(colour, kind, box):
    return SimpleNamespace(category=f"{colour} {kind}", box=box,
                           attributes={"colour": colour, "shape": kind})


def coco(category, box):
    return SimpleNamespace(category=category, box=box, attributes={})


def brute_force_fractions(boxes, image_size, grid, step=0.125):
    """Sample the image at the centres of step x step squares: exact when every edge is a
    multiple of `step`."""
    height, width = image_size
    ys = np.arange(step / 2, height, step)
    xs = np.arange(step / 2, width, step)
    inside = np.zeros((len(ys), len(xs)), bool)
    for x0, y0, x1, y1 in boxes:
        inside |= ((ys > y0) & (ys < y1))[:, None] & ((xs > x0) & (xs < x1))[None, :]
    rows, cols = grid
    cell = inside.reshape(rows, len(ys) // rows, cols, len(xs) // cols)
    return cell.mean(axis=(1, 3))


@pytest.mark.parametrize("boxes", [
    [(3.25, 5.5, 21.75, 30.0)],
    [(0.0, 0.0, 40.0, 48.0)],
    [(10.5, 2.0, 30.25, 20.0), (20.0, 10.0, 38.5, 47.75)],  # overlapping: union, not sum
    [(-5.0, 40.0, 12.0, 60.0)],  # partly outside the image
])
def test_region_fractions_match_a_brute_force_rasterization(boxes):
    got = region_fractions(boxes, (48, 40), (6, 5))
    np.testing.assert_allclose(got, brute_force_fractions(boxes, (48, 40), (6, 5)), atol=1e-12)


def test_uneven_cells_and_a_box_outside():
    # 3 columns over 10 px: cells are 10/3 px wide; a box over the first 5 px covers all of
    # cell 0 and half of cell 1.
    got = region_fractions([(0, 0, 5, 2)], (2, 10), (1, 3))
    np.testing.assert_allclose(got, [[1.0, 0.5, 0.0]])
    assert region_fractions([(50, 50, 60, 60)], (20, 20), (2, 2)).sum() == 0


@pytest.mark.parametrize("size", [(0, 0), (10, 0), (-5, 10)])
def test_an_unknown_image_size_is_refused_not_scored_zero(size):
    with pytest.raises(ValueError, match="expected a positive"):
        region_fractions([(0, 0, 5, 5)], size, (2, 2))


def test_all_mass_inside_the_box_scores_one():
    circle = shape("red", "circle", (0.0, 0.0, 32.0, 32.0))
    alpha = np.zeros((3, 4, 4))
    alpha[:, :2, :2] = 0.25  # all mass on the four cells under the box
    got = attention_correctness(["a", "red", "circle"], alpha, [circle], (64, 64))
    assert got == AttentionCorrectness(correctness=1.0, baseline=0.25, count=1)
    alpha_outside = np.zeros((3, 16))
    alpha_outside[:, 15] = 1.0  # the bottom-right cell, (T, L) form
    got = attention_correctness(["a", "red", "circle"], alpha_outside, [circle], (64, 64))
    assert got.correctness == 0.0


def test_uniform_attention_scores_the_baseline():
    box = (5.0, 7.0, 29.0, 40.0)
    square = shape("blue", "square", box)
    alpha = np.full((2, 49), 1 / 49)
    got = attention_correctness(["blue", "square"], alpha, [square], (64, 48))
    area = (29 - 5) * (40 - 7) / (64 * 48)
    assert got.count == 1
    assert got.correctness == pytest.approx(area, abs=1e-12)
    assert got.baseline == pytest.approx(area, abs=1e-12)


def test_shapes_matcher_uses_the_colour_before_the_shape():
    objects = [shape("red", "circle", (0, 0, 8, 8)), shape("blue", "circle", (8, 8, 16, 16)),
               shape("green", "square", (0, 8, 8, 16))]
    words = ["a", "blue", "circle", "left", "of", "a", "square", "and", "a", "yellow", "square",
             "and", "a", "circle", "and", "red", "circle"]
    got = match_shapes_words(words, objects)
    assert got[2] == [1]  # blue circle
    assert got[6] == [2]  # the only square
    assert got[10] == []  # a yellow square is not in the image
    assert got[13] == []  # which circle?
    assert got[16] == [0]
    assert sum(bool(m) for m in got) == 3


def test_coco_matcher_maps_words_to_categories_and_unions_boxes():
    objects = [coco("dog", (0, 0, 10, 10)), coco("dog", (30, 30, 40, 40)),
               coco("person", (10, 0, 20, 10))]
    got = match_coco_words(["two", "dogs", "and", "a", "man", "with", "a", "cat"], objects)
    assert got == [[], [0, 1], [], [], [2], [], [], []]
    assert coco_category("Puppies") == "dog" and coco_category("women") == "person"
    assert coco_category("sofa") == "couch" and coco_category("grass") is None
    # a one-word category by its own name, with or without other words; a two-word one only by
    # its other words
    assert [coco_category(w) for w in ("buses", "Zebra", "dog", "knives", "phone")] == [
        "bus", "zebra", "dog", "knife", "cell phone"]
    assert coco_category("light") is None and coco_category("cell") is None
    alpha = np.zeros((8, 2, 2))
    alpha[1, 0, 0] = alpha[1, 1, 1] = 0.5  # "dogs": half on each dog's cell
    alpha[4] = 0.25  # "man": uniform
    got = attention_correctness(["two", "dogs", "and", "a", "man", "with", "a", "cat"], alpha,
                                objects, (40, 40), matcher="coco")
    dogs_mass = 0.5 * (100 / 400) * 2  # each box covers a quarter of its 20 x 20 cell
    man_mass = 100 / 1600
    assert got.count == 2
    assert got.correctness == pytest.approx((dogs_mass + man_mass) / 2)
    assert got.baseline == pytest.approx((200 / 1600 + 100 / 1600) / 2)


def test_words_after_end_are_ignored_and_captions_pool_by_word():
    circle = shape("red", "circle", (0, 0, 32, 64))
    alpha = np.zeros((4, 1, 2))
    alpha[:, 0, 0] = 1.0
    first = (["red", "circle", "<end>", "circle"], alpha, [circle], (64, 64))
    alpha2 = np.full((2, 1, 2), 0.5)
    second = (["red", "circle"], alpha2, [circle], (64, 64))
    assert attention_correctness(*first).count == 1
    pooled = corpus_attention_correctness([first, second, second])
    assert pooled.count == 3
    assert pooled.correctness == pytest.approx((1.0 + 0.5 + 0.5) / 3)
    assert pooled.baseline == pytest.approx(0.5)


def test_no_matched_words_gives_nan_and_bad_shapes_are_user_errors():
    got = attention_correctness(["a", "thing"], np.full((2, 4), 0.25), [], (8, 8))
    assert got.count == 0 and math.isnan(got.correctness) and math.isnan(got.baseline)
    with pytest.raises(UserError, match="square grid"):
        attention_correctness(["a"], np.full((1, 6), 1 / 6), [], (8, 8))
    with pytest.raises(UserError, match="grid"):
        attention_correctness(["a"], np.full((1, 6), 1 / 6), [], (8, 8), grid=(2, 2))
    assert attention_correctness(["a"], np.full((1, 6), 1 / 6), [], (8, 8),
                                 grid=(2, 3)).count == 0
    with pytest.raises(UserError, match="matcher"):
        attention_correctness(["a"], np.full((1, 4), 0.25), [], (8, 8), matcher="flickr")


def test_on_shapes_mask_attention_scores_what_pixel_counting_says():
    from captioner.datasets import load_split

    split = load_split("shapes", "valid", num_images=40, seed=11)
    items, expected, baseline = [], [], []
    for record in split:
        caption = record.captions[0].split()
        # Each step looks at the mask of the object its word names (pooled into 8 x 8 cells of
        # 8 x 8 pixels), else at the whole image; the expected mass inside the box is counted
        # pixel by pixel.
        maps = []
        for indices in match_shapes_words(caption, record.objects):
            if not indices:
                maps.append(np.full((8, 8), 1 / 64))
                continue
            obj = record.objects[indices[0]]
            cells = obj.mask.reshape(8, 8, 8, 8).sum(axis=(1, 3)) / obj.mask.sum()
            maps.append(cells)
            x0, y0, x1, y1 = (int(v) for v in obj.box)
            in_box = np.zeros((64, 64))
            in_box[y0:y1, x0:x1] = 1
            expected.append((cells * in_box.reshape(8, 8, 8, 8).mean(axis=(1, 3))).sum())
            baseline.append(in_box.mean())
        items.append((caption, np.stack(maps), record.objects, (64, 64)))
    got = corpus_attention_correctness(items, matcher="shapes")
    assert got.count == len(expected) >= len(split)  # every caption names an object
    assert got.correctness == pytest.approx(np.mean(expected), abs=1e-12)
    assert got.baseline == pytest.approx(np.mean(baseline), abs=1e-12)
    assert got.correctness > 0.5 > 0.2 > got.baseline


def test_object_words_naming_nothing_in_the_image_are_counted_as_skipped():
    # A hallucinated "yellow square", an ambiguous bare "circle" beside two circles, and a
    # "triangle" the image lacks name objects but none the matcher can point to: skipped, not
    # scored. "red circle" is scored; "shapes" and "left" name no object kind.
    objects = [shape("red", "circle", (0, 0, 32, 32)), shape("blue", "circle", (32, 0, 64, 32))]
    words = ["two", "shapes", ":", "a", "red", "circle", "left", "of", "a", "yellow", "square",
             ",", "a", "circle", "and", "a", "triangle"]
    alpha = np.full((len(words), 2, 2), 0.25)
    alpha[5] = [[1.0, 0.0], [0.0, 0.0]]  # "circle" after "red": all on the red circle's cell
    got = attention_correctness(words, alpha, objects, (64, 64))
    assert got == AttentionCorrectness(correctness=1.0, baseline=0.25, count=1, skipped=3)
    # The COCO matcher's object words are its category words, singular or plural.
    dog = coco("dog", (0, 0, 10, 10))
    got = attention_correctness(["two", "cats", "and", "a", "dog", "on", "grass"],
                                np.full((7, 2, 2), 0.25), [dog], (20, 20), matcher="coco")
    assert (got.count, got.skipped) == (1, 1)
    # With nothing to score the mean is nan and the skipped words still show.
    got = attention_correctness(["a", "green", "square"], np.full((3, 4), 0.25), objects,
                                (64, 64))
    assert got.count == 0 and got.skipped == 1 and math.isnan(got.correctness)


def test_skipped_words_pool_over_captions_and_follow_the_word_test_given():
    circle = shape("red", "circle", (0, 0, 32, 32))
    item = (["a", "blue", "circle", "and", "a", "red", "circle"], np.full((7, 4), 0.25),
            [circle], (64, 64))
    assert corpus_attention_correctness([item, item]).skipped == 2
    # A matcher function names no object kinds unless told which words do.
    assert corpus_attention_correctness([item], match_shapes_words).skipped == 0
    got = corpus_attention_correctness([item], match_shapes_words,
                                       names_object=lambda word, objects: word == "circle")
    assert (got.count, got.skipped) == (1, 1)
