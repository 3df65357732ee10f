"""The `shapes` fact parser reads what a caption says: pronouns, fronted and joined relations,
references back, repeats; every caption the dataset writes scores 1, and a caption it cannot
read never earns the reward."""

import numpy as np
import pytest

from captioner.datasets.records import ObjectAnnotation
from captioner.datasets.shapes import RELATIONS, load_shapes, make_captions, spatial_relation
from captioner.datasets.shapes_metrics import (
    fact_score,
    objects_correct,
    parse_caption,
    relation_counts,
    relation_holds,
)
from captioner.datasets.shapes_parser import RELATION_WORDS


def _shape(name: str, x: float, y: float, size: str = "small") -> ObjectAnnotation:
    colour, shape = name.split()
    return ObjectAnnotation(name, (x, y, x + 10, y + 10),
                            attributes={"colour": colour, "shape": shape, "size": size})


# A red circle left of a blue square (the outside review's scene).
SIDE = [_shape("red circle", 0, 0), _shape("blue square", 30, 0)]
# A red circle above a blue square.
STACKED = [_shape("red circle", 0, 0), _shape("blue square", 0, 30)]
# A red circle above and to the left of a blue square: neither axis clearly dominates.
DIAGONAL = [_shape("red circle", 0, 0), _shape("blue square", 20, 15)]
# A red circle above a blue square, both left of a green diamond.
THREE = [_shape("red circle", 0, 0), _shape("blue square", 0, 30), _shape("green diamond", 30, 15)]


def _facts(caption: str) -> set[tuple[str, str, str]]:
    """The relations `caption` is read to state, as `(named, relation, named)`."""
    parsed = parse_caption(caption)
    name = [f"{o.colour} {o.shape}" for o in parsed.objects]
    return {(name[i], relation, name[j]) for i, relation, j in parsed.relations}


# caption, scene, fact score, relations read (None: the caption cannot be read)
REVIEW = [
    ("a blue square , a red circle to the right", SIDE, 0,
     {("red circle", "right", "blue square")}),
    ("a blue square and a red circle to its right", SIDE, 0,
     {("red circle", "right", "blue square")}),
    ("a blue square , and to its left a red circle", SIDE, 1,
     {("red circle", "left", "blue square")}),
    ("to the left is a red circle , to the right a blue square", SIDE, 1,
     {("red circle", "left", "blue square")}),
    ("the red circle is above and to the left of the blue square", DIAGONAL, 1,
     {("red circle", "above", "blue square"), ("red circle", "left", "blue square")}),
    ("a red circle and a blue square to the left of a green diamond, where the circle is right "
     "of the diamond", THREE, 1 - 1,
     {("blue square", "left", "green diamond"), ("red circle", "right", "green diamond")}),
    ("a red circle and a blue square and the red circle and the blue square", SIDE, 1 - 1, set()),
]

MORE = [
    # Pronouns: "its" and "it" refer to the one earlier object other than their subject.
    ("a red circle , a blue square to its right", SIDE, 1,
     {("blue square", "right", "red circle")}),
    ("a blue square . a red circle left of it .", SIDE, 1, {("red circle", "left", "blue square")}),
    ("a red circle and to the right of it a blue square", SIDE, 1,
     {("blue square", "right", "red circle")}),
    ("a red circle and a blue square , where it is above the square", STACKED, 1,
     {("red circle", "above", "blue square")}),
    ("a red circle above a blue square and a green diamond to its right", THREE, -2, None),
    ("a red circle above a blue square , and a green diamond right of it", THREE, -2, None),
    ("a red circle to the left of it", SIDE, -1, None),  # nothing for "it" to be
    # below / under / beneath / underneath; above / over / on top of; bare and fronted.
    ("a blue square under a red circle", STACKED, 1, {("blue square", "below", "red circle")}),
    ("a blue square beneath the red circle", STACKED, 1, {("blue square", "below", "red circle")}),
    ("the blue square is underneath the red circle", STACKED, 1,
     {("blue square", "below", "red circle")}),
    ("a red circle on top of a blue square", STACKED, 1, {("red circle", "above", "blue square")}),
    ("a red circle over a blue square", SIDE, 1 - 1, {("red circle", "above", "blue square")}),
    ("a red circle beneath a blue square", STACKED, 1 - 1,
     {("red circle", "below", "blue square")}),
    ("above is a red circle , below a blue square", STACKED, 1,
     {("red circle", "above", "blue square")}),
    ("a red circle to the left , a blue square to the right", SIDE, 1,
     {("red circle", "left", "blue square")}),
    ("to the right of a blue square is a red circle", SIDE, 1 - 1,
     {("red circle", "right", "blue square")}),
    ("a red circle and a blue square above", SIDE, 1 - 1, {("blue square", "above", "red circle")}),
    # Three objects: lists, references back, a subject with two relations.
    ("a red circle above a blue square , and a green diamond to the right of the blue square",
     THREE, 1, {("red circle", "above", "blue square"), ("green diamond", "right", "blue square")}),
    ("a red circle above a blue square and to the left of a green diamond", THREE, 1,
     {("red circle", "above", "blue square"), ("red circle", "left", "green diamond")}),
    ("a red circle above a blue square and a green diamond", THREE, 1,
     {("red circle", "above", "blue square")}),  # "and" lists the diamond
    ("the diamond is right of the circle , a red circle and a green diamond", THREE, -1, None),
    ("a red circle left of a blue square above a green diamond", THREE, -2, None),  # a chain
    # One fact said twice is one relation; an object is never beside itself.
    ("a red circle to the left of a blue square , and the blue square to the right of the red "
     "circle", SIDE, 1, {("red circle", "left", "blue square")}),
    ("a red circle and a blue square , where the red circle is left of the red circle", SIDE,
     1 - 1, {("red circle", "left", "red circle")}),
    # Sizes are checked, and one object cannot have two.
    ("a large red circle to the left of a small blue square", SIDE, 0,
     {("red circle", "left", "blue square")}),
    ("a small red circle left of a blue square , and the large red circle", SIDE, -2, None),
    # What the parser cannot read is wrong: unknown words, dangling "of", cut-off captions.
    ("a red circle beside a blue square", SIDE, -1, None),
    ("a red circle next to a blue square", SIDE, -1, None),
    ("a red circle <unk> a blue square", SIDE, -1, None),
    ("a red circle to the left of", SIDE, -1, None),
    ("a red circle and a blue square and", SIDE, -1, None),
    ("a red circle , , a blue square", SIDE, -1, None),
    ("a red circle left a blue square", SIDE, -1, None),
    ("the red circle is a blue square", SIDE, -1, None),
    ("a circle to the left of a blue square", SIDE, -1, None),  # which circle?
]


@pytest.mark.parametrize("caption, scene, score, relations", REVIEW + MORE,
                         ids=[row[0] for row in REVIEW + MORE])
def test_a_caption_scores_as_what_it_says_is_true(caption, scene, score, relations):
    parsed = parse_caption(caption)
    assert fact_score(caption, scene) == score, parsed
    if relations is None:
        assert parsed.problems and not parsed.readable and parsed.relations == ()
        assert not objects_correct(caption, scene)
    else:
        assert parsed.readable, parsed.problems
        assert _facts(caption) == relations


@pytest.mark.parametrize("caption, scene, score, relations", REVIEW,
                         ids=[row[0] for row in REVIEW])
def test_the_reviews_false_captions_lose_the_reward_and_true_ones_keep_it(caption, scene, score,
                                                                          relations):
    true, stated = relation_counts(caption, scene)
    if score == 1:
        assert objects_correct(caption, scene) and true == stated
    else:
        assert score < 1


def test_an_ambiguous_pronoun_and_an_ambiguous_reference_are_named_as_problems():
    assert parse_caption("a red circle and a blue square and a green diamond to its left"
                         ).problems == ("a pronoun with 2 objects it may refer to; expected one",)
    problems = parse_caption("a red circle and a red square , where the red one is above it"
                             ).problems
    assert problems[0] == "'the red one' fits 2 objects named before it; expected one"
    assert parse_caption("a blue square ; to the left is a red circle , to the right a green "
                         "diamond").problems  # to the square's left, or the diamond's?


def test_a_relation_holds_along_an_axis_that_is_not_clearly_the_minor_one():
    circle, square = DIAGONAL
    assert {r for r in RELATIONS if relation_holds(circle, square, r)} == {"left", "above"}
    assert {r for r in RELATIONS if relation_holds(square, circle, r)} == {"right", "below"}
    assert spatial_relation(circle, square) == "left"  # the dominant axis only
    side_circle, side_square = SIDE
    assert {r for r in RELATIONS if relation_holds(side_circle, side_square, r)} == {"left"}
    assert not any(relation_holds(circle, circle, r) for r in RELATIONS)


@pytest.fixture(scope="module")
def scenes():
    return load_shapes("train", num_images=300, seed=11, with_masks=False)


def test_on_the_datasets_pairs_a_relation_holds_exactly_when_spatial_relation_gives_it(scenes):
    for record in scenes:
        for a in record.objects:
            for b in record.objects:
                if a is not b:
                    held = {r for r in RELATIONS if relation_holds(a, b, r)}
                    assert held == {spatial_relation(a, b)}


def test_every_caption_the_grammar_writes_reads_back_to_its_scene_and_scores_1(scenes):
    rng = np.random.default_rng(0)
    count = 0
    for record in scenes:
        # The split's own captions, and five more drawings of the templates for its scene.
        captions = list(record.captions)
        for _ in range(5):
            captions += make_captions(rng, record.objects)
        present = {(o.attributes["colour"], o.attributes["shape"]): o for o in record.objects}
        for caption in captions:
            parsed = parse_caption(caption)
            assert parsed.readable, (caption, parsed.problems)
            assert {(o.colour, o.shape) for o in parsed.objects} == set(present), caption
            for named in parsed.objects:
                assert named.size in (None, present[(named.colour, named.shape)].attributes["size"])
            for i, relation, j in parsed.relations:
                a = present[(parsed.objects[i].colour, parsed.objects[i].shape)]
                b = present[(parsed.objects[j].colour, parsed.objects[j].shape)]
                assert spatial_relation(a, b) == relation, caption
            assert len(parsed.relations) == sum(w in ("left", "right", "above", "below")
                                                for w in caption.split()), caption
            assert not parsed.named_twice, caption
            assert fact_score(caption, record.objects) == 1, caption
            count += 1
    assert count > 5000


def _corruptions(caption: str, rng: np.random.Generator) -> list[str]:
    """`caption` cut short at every word, and with words dropped, doubled, swapped or put in."""
    words = caption.split()
    out = [" ".join(words[:k]) for k in range(1, len(words))]
    for _ in range(6):
        k = int(rng.integers(len(words)))
        inserted = str(rng.choice(["of", "it", "its", "and", "is", "beside", "the", ",", "left",
                                   "above", "near", "to"]))
        out += [" ".join(words[:k] + words[k + 1:]), " ".join(words[:k] + [words[k]] + words[k:]),
                " ".join(words[:k] + [inserted] + words[k:])]
        if k + 1 < len(words):
            out.append(" ".join(words[:k] + [words[k + 1], words[k]] + words[k + 2:]))
    return out


def test_a_caption_that_cannot_be_read_never_earns_the_reward(scenes):
    rng = np.random.default_rng(1)
    unreadable = 0
    for record in scenes[:120]:
        for caption in record.captions:
            for corrupted in _corruptions(caption, rng):
                parsed = parse_caption(corrupted)
                score = fact_score(corrupted, record.objects)
                if not parsed.readable:
                    unreadable += 1
                    relation_words = sum(w in RELATION_WORDS for w in corrupted.split())
                    assert parsed.relations == () and parsed.unread >= max(1, relation_words)
                    assert not objects_correct(corrupted, record.objects)
                    assert score <= -max(1, relation_words), corrupted
                    assert relation_counts(corrupted, record.objects) == (0, parsed.unread)
                elif score == 1:  # the reward only for what was read, and all of it true
                    true, stated = relation_counts(corrupted, record.objects)
                    assert true == stated and objects_correct(corrupted, record.objects)
    assert unreadable > 1000  # not a test of nothing


OBJECTS = ["a red circle", "the red circle", "a blue square", "the blue square", "a red circle",
           "a blue square", "the circle", "the square", "it", "a green diamond", "a circle"]
RELATION_PHRASES = ["to the left of", "to the right of", "left of", "above", "below", "under",
                    "on top of", "above and to the left of", "to its left", "to its right",
                    "to the left", "to the right", "to the left of", "below", "beside", "of"]
CLAUSES = ["O", "O R O", "O is R O", "R O O", "R O is O", "R is O", "O R", "R O"]


def _random_caption(rng: np.random.Generator) -> str:
    """Clauses of random object and relation phrases, some with a stray phrase put in."""
    clauses = []
    for _ in range(int(rng.integers(1, 4))):
        words = [str(rng.choice(OBJECTS if slot == "O" else RELATION_PHRASES))
                 if slot in "OR" else slot for slot in str(rng.choice(CLAUSES)).split()]
        if rng.random() < 0.1:
            words.insert(int(rng.integers(len(words) + 1)),
                         str(rng.choice(OBJECTS + RELATION_PHRASES + [",", "and"])))
        clauses.append(" ".join(words))
    caption = clauses[0]
    for clause in clauses[1:]:
        caption += f" {rng.choice([',', 'and', ', and', 'where', '.'])} {clause}"
    return caption


@pytest.mark.parametrize("scene", [SIDE, STACKED], ids=["side by side", "stacked"])
def test_random_captions_are_rewarded_only_when_read_and_true(scene):
    rng = np.random.default_rng(2)
    scores = []
    for _ in range(3000):
        caption = _random_caption(rng)
        parsed = parse_caption(caption)
        scores.append(fact_score(caption, scene))
        true, stated = relation_counts(caption, scene)
        if scores[-1] > 0:
            assert parsed.readable and true == stated and objects_correct(caption, scene), caption
        if not parsed.readable:
            assert scores[-1] < 0 and true == 0 < stated, caption
    assert scores.count(1) >= 5 and scores.count(0) > 50 and min(scores) < -2  # not vacuous
