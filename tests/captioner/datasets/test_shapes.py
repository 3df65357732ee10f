"""The shapes dataset: determinism, disjoint splits, annotations that match the pixels, and
captions that the grammar reads back to the true objects and relations."""

import math

import numpy as np
import pytest

from captioner.datasets import DATASETS, load_split
from captioner.datasets.shapes import COLOURS, INVERSE, RELATION_PHRASES, spatial_relation
from captioner.datasets.shapes_metrics import (
    fact_score,
    names_an_object_twice,
    object_accuracy,
    parse_caption,
    relation_accuracy,
    shapes_scores,
)
from common.errors import UserError
from common.registry import UnknownNameError


@pytest.fixture(scope="module")
def train():
    return load_split("shapes", "train", num_images=300, seed=3)


def test_same_seed_gives_identical_images_and_captions(train):
    from captioner.datasets.shapes import _generate

    _generate.cache_clear()  # really generate again, not from the cache
    again = load_split("shapes", "train", num_images=300, seed=3)
    for a, b in zip(train, again):
        assert a.image_id == b.image_id
        np.testing.assert_array_equal(a.image, b.image)
        assert a.captions == b.captions
        assert [o.box for o in a.objects] == [o.box for o in b.objects]


def test_splits_are_prefix_stable_and_seeds_differ(train):
    small = load_split("shapes", "train", num_images=20, seed=3)
    for a, b in zip(small, train):
        np.testing.assert_array_equal(a.image, b.image)
    other_seed = load_split("shapes", "train", num_images=20, seed=4)
    assert not any(np.array_equal(a.image, b.image) for a, b in zip(small, other_seed))


def test_splits_are_disjoint(train):
    valid = load_split("shapes", "valid", num_images=100, seed=3)
    test = load_split("shapes", "test", num_images=100, seed=3)
    hashes = {split.split: {r.image.tobytes() for r in split} for split in (train, valid, test)}
    assert not hashes["train"] & hashes["valid"]
    assert not hashes["train"] & hashes["test"]
    assert not hashes["valid"] & hashes["test"]
    ids = [r.image_id for s in (train, valid, test) for r in s]
    assert len(set(ids)) == len(ids)


def test_default_sizes_and_image_format():
    split = load_split("shapes", "valid")
    assert len(split) == 500
    record = split[0]
    assert record.image.dtype == np.uint8 and record.image.shape == (64, 64, 3)
    assert (record.height, record.width) == (64, 64) and record.path is None
    big = load_split("shapes", "test", num_images=3, image_size=96)
    assert big[0].image.shape == (96, 96, 3)


def test_objects_counts_captions_and_distinct_kinds(train):
    counts = {len(r.objects) for r in train}
    assert counts == {1, 2, 3}
    for record in train:
        assert 3 <= len(record.captions) <= 5
        assert len(set(record.captions)) == len(record.captions)
        kinds = [o.category for o in record.objects]
        assert len(set(kinds)) == len(kinds)


def test_boxes_and_masks_match_the_pixels(train):
    for record in train[:100]:
        taken = np.zeros(record.image.shape[:2], bool)
        for obj in record.objects:
            x0, y0, x1, y1 = (int(v) for v in obj.box)
            mask = obj.mask
            ys, xs = np.nonzero(mask)
            # The box is the tight box of the mask, and masks never overlap.
            assert (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1) == (x0, y0, x1, y1)
            assert not (taken & mask).any()
            taken |= mask
            # The object's colour is what the pixels inside its mask show.
            mean = record.image[mask].astype(float).mean(axis=0)
            nearest = min(COLOURS, key=lambda c: np.abs(np.array(COLOURS[c]) - mean).sum())
            assert nearest == obj.attributes["colour"]
            assert obj.category == f"{obj.attributes['colour']} {obj.attributes['shape']}"
        # The background (outside every mask) is dark and grey.
        assert record.image[~taken].mean() < 110


def test_pairs_are_clearly_related_both_ways(train):
    for record in train:
        for a in record.objects:
            for b in record.objects:
                if a is not b:
                    assert spatial_relation(a, b) == INVERSE[spatial_relation(b, a)]


def test_ground_truth_captions_parse_back_to_the_true_objects(train):
    captions = [c for r in train for c in r.captions]
    objects = [r.objects for r in train for _ in r.captions]
    assert object_accuracy(captions, objects) == 1.0
    assert relation_accuracy(captions, objects) == 1.0
    stated = sum(len(parse_caption(c).relations) for c in captions)
    assert stated > len(train)  # many captions do state relations


def _flip(caption: str) -> str:
    for relation, phrase in RELATION_PHRASES.items():
        if phrase in caption:
            return caption.replace(phrase, "@").replace("@", RELATION_PHRASES[INVERSE[relation]])
    return caption


def test_flipped_relations_are_all_wrong(train):
    pairs = [(c, r.objects) for r in train for c in r.captions
             if len(parse_caption(c).relations) == 1]
    flipped = [_flip(c) for c, _ in pairs]
    assert all(f != c for f, (c, _) in zip(flipped, pairs))
    assert relation_accuracy(flipped, [o for _, o in pairs]) == 0.0


def test_parse_caption_reads_sizes_and_relation_words():
    parsed = parse_caption("The small red circle is under a large blue square, and a green diamond")
    assert [(o.size, o.colour, o.shape) for o in parsed.objects] == [
        ("small", "red", "circle"), ("large", "blue", "square"), (None, "green", "diamond")]
    assert parsed.relations == ((0, "below", 1),)
    assert parse_caption("a red").objects == ()


def test_accuracies_catch_wrong_objects_and_sizes(train):
    record = next(r for r in train if len(r.objects) == 2)
    a, b = record.objects
    wrong_size = {"small": "large", "large": "small"}[a.attributes["size"]]
    good = f"a {a.category} and a {b.category}"
    assert object_accuracy([good], [record.objects]) == 1.0
    assert object_accuracy([f"a {a.category}"], [record.objects]) == 0.0  # one missing
    assert object_accuracy([f"a {wrong_size} {a.category} and a {b.category}"],
                           [record.objects]) == 0.0
    assert math.isnan(relation_accuracy([good], [record.objects]))
    scores = shapes_scores({record.image_id: good}, train)
    assert scores["object_accuracy"] == 100.0 and scores["relations_stated"] == 0.0
    for accuracy in (object_accuracy, relation_accuracy):
        assert math.isnan(accuracy([], []))
        with pytest.raises(UserError, match="got 2 captions for 1 images"):
            accuracy([good, good], [record.objects])


@pytest.mark.parametrize("caption, twice", [
    ("a small yellow square to the left of a green diamond and a small yellow square", True),
    ("a yellow square and a large yellow square", True),  # another size, the same object
    ("a red circle , a red circle and a blue square", True),
    ("two shapes : a red circle above a red circle", True),
    ("the red circle is above a blue square and the red circle", True),  # "the", for nothing
    ("a red circle and a blue square , where the red circle is above the square", False),
    ("a red circle left of a blue square , and a green diamond above the blue square", False),
    ("a red circle and a red square and a blue circle", False),  # colour or shape differs
    ("", False),
])
def test_names_an_object_twice_counts_a_repeat_that_is_not_a_reference_back(caption, twice):
    assert names_an_object_twice(caption) is twice


def test_no_reference_names_an_object_twice_and_the_scores_count_those_that_do(train):
    assert not any(names_an_object_twice(c) for r in train for c in r.captions)
    records = [r for r in train if len(r.objects) == 2][:4]
    hypotheses = {r.image_id: f"a {r.objects[0].category} and a {r.objects[1].category}"
                  for r in records}
    first = records[0]
    hypotheses[first.image_id] += f" and a {first.objects[0].category}"
    scores = shapes_scores(hypotheses, train)
    assert scores["objects_named_twice"] == 1 and scores["objects_named_twice_rate"] == 25.0


def test_the_fact_score_is_right_objects_minus_false_relations_and_repeats(train):
    record = next(r for r in train if len(r.objects) == 3)
    a, b, c = record.objects
    ab, bc = spatial_relation(a, b), spatial_relation(b, c)
    true_ab = f"a {a.category} {RELATION_PHRASES[ab]} a {b.category}"
    false_ab = f"a {a.category} {RELATION_PHRASES[INVERSE[ab]]} a {b.category}"
    false_bc = f"{RELATION_PHRASES[INVERSE[bc]]} a {c.category}"
    false_cb = f"a {c.category} {RELATION_PHRASES[bc]} the {b.category}"
    table = {  # caption -> objects exactly right (0/1) - false relations - named twice (0/1)
        f"{true_ab} and a {c.category}": 1 - 0 - 0,
        f"{false_ab} and a {c.category}": 1 - 1 - 0,
        f"{false_ab} , and {false_cb}": 1 - 2 - 0,
        # Unreadable (a chain: is b or a beside c?): its two relation words count false.
        f"{false_ab} {false_bc}": 0 - 2 - 0,
        f"{true_ab}": 0 - 0 - 0,  # c is missing
        f"{false_ab} and a {a.category}": 0 - 1 - 1,  # c missing, a named twice
        f"{true_ab} and a {c.category} and a {c.category}": 1 - 0 - 1,
        "": 0,
    }
    for caption, expected in table.items():
        assert fact_score(caption, record.objects) == expected, caption
    # Every reference caption is right and states nothing false: 1 each.
    assert {fact_score(text, r.objects) for r in train for text in r.captions} == {1}
    scores = shapes_scores({record.image_id: f"{false_ab} , and {false_cb}"}, train)
    assert scores["facts"] == -1.0
    # With a relation bonus, each stated relation that holds adds it, counted apart here.
    true_ba = f"the {b.category} is {RELATION_PHRASES[INVERSE[ab]]} the {a.category}"
    for caption, expected, true in [*((c, e, c.startswith(true_ab)) for c, e in table.items()),
                                    (f"{true_ab} , and a {c.category}", 1, 1),
                                    (f"{true_ab} , and {true_ba}", 0, 1),  # one fact twice
                                    (f"{true_ab} , and a {c.category} "
                                     f"{RELATION_PHRASES[spatial_relation(c, b)]} "
                                     f"the {b.category}", 1, 2)]:
        assert fact_score(caption, record.objects) == expected, caption
        assert fact_score(caption, record.objects, relation_bonus=0.25) == expected + 0.25 * true


def test_bad_options_are_user_errors():
    with pytest.raises(UserError, match="num_images"):
        load_split("shapes", "train", num_images=0)
    with pytest.raises(UserError, match="split"):
        load_split("shapes", "training")
    with pytest.raises(UnknownNameError, match="shapes"):
        load_split("shapez", "train")
    assert "shapes" in DATASETS
