"""What a `shapes` caption says of its image, and how much of it is true.

Captions are read by `captioner.datasets.shapes_parser.parse_caption` (its docstring gives
the grammar and what makes a caption unreadable); every score here reads them through it.

The scores:
- A stated relation `X R Y` holds when `relation_holds` says so: the offset between the box
  centres along R's axis has R's sign and is more than `1 / CLEAR_RATIO` of the offset along
  the other axis. On the dataset's scenes, whose pairs all have one axis clearly dominant,
  that is exactly `shapes.spatial_relation`; "above and to the left" holds only of a pair
  that is diagonal. Every stated relation is checked, one fact stated twice ("X left of Y",
  "Y right of X") is one relation, and an object is never beside itself.
- `object_accuracy`: the fraction of captions, readable, that name exactly the image's
  objects (colour and shape), with every stated size right.
- `relation_accuracy`: the fraction of stated relations that hold; an unreadable caption
  states as many false ones as it has relation words and unknown words, at least one
  (`ParsedCaption.unread`), so that a garbled tail never pays better than a false relation.
- `objects_named_twice`: the captions that name one object twice: an object phrase of the
  colour and shape of an earlier one not introduced by "the", or a "the" phrase of an earlier
  object that states nothing of it ("a red circle and a blue square and the red circle").
  "The" is how the references refer back to an object in a relation ("a red circle left of a
  blue square , and a green diamond above the blue square"), so no reference caption counts.
- `fact_score`: one caption's facts as a reward for self-critical training: +1 for the right
  objects (`object_accuracy`'s test), −1 for each relation that does not hold (the unread
  ones included) and −1 for naming an object twice. Every reference caption scores 1.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

from captioner.datasets.records import CaptionSplit, ObjectAnnotation
from captioner.datasets.shapes import CLEAR_RATIO
from captioner.datasets.shapes_parser import NamedObject, ParsedCaption, parse_caption
from common.errors import UserError

__all__ = ["NamedObject", "ParsedCaption", "caption_errors", "fact_score", "names_an_object_twice",
           "object_accuracy", "objects_correct", "parse_caption", "relation_accuracy",
           "relation_counts", "relation_holds", "shapes_scores"]


def _centre(obj: ObjectAnnotation) -> tuple[float, float]:
    return (obj.box[0] + obj.box[2]) / 2, (obj.box[1] + obj.box[3]) / 2


def relation_holds(a: ObjectAnnotation, b: ObjectAnnotation, relation: str) -> bool:
    """Whether `a` is `relation` ("left", "right", "above", "below") of `b` by their box
    centres: the offset along the relation's axis has its sign and is more than
    `1 / CLEAR_RATIO` of the offset along the other axis (image y grows downwards).

    `shapes.spatial_relation` names the dominant axis only; this also holds for the other
    axis of a diagonal pair, and on the dataset's pairs (one axis at least `CLEAR_RATIO`
    times the other) it holds of exactly the relation `spatial_relation` gives.

    Example:
    >>> def box(x, y):
    ...     return ObjectAnnotation("red circle", (x, y, x + 10, y + 10))
    >>> [relation_holds(box(0, 0), box(20, 15), r) for r in ("left", "above", "right")]
    [True, True, False]
    >>> relation_holds(box(0, 0), box(30, 5), "above")  # clearly side by side
    False
    """
    (ax, ay), (bx, by) = _centre(a), _centre(b)
    dx, dy = ax - bx, ay - by
    along, across = (dx, dy) if relation in ("left", "right") else (dy, dx)
    sign = -1 if relation in ("left", "above") else 1
    return along * sign > 0 and CLEAR_RATIO * abs(along) > abs(across)


def names_an_object_twice(caption: str) -> bool:
    """True when `caption` names an object twice: an object phrase of the colour and shape
    of an earlier one that is not introduced by "the", or a "the" phrase of an earlier object
    that states nothing of it (see the module docstring).

    Example:
    >>> names_an_object_twice("a small yellow square left of a green diamond and a yellow square")
    True
    >>> names_an_object_twice("a red circle and a blue square and the red circle")
    True
    >>> names_an_object_twice("a red circle left of a blue square , and a green diamond "
    ...                       "above the blue square")
    False
    """
    return parse_caption(caption).named_twice


def _find(objects: Sequence[ObjectAnnotation], named: NamedObject) -> ObjectAnnotation | None:
    for obj in objects:
        if (obj.attributes.get("colour"), obj.attributes.get("shape")) == (named.colour,
                                                                            named.shape):
            return obj
    return None


def objects_correct(caption: str, objects: Sequence[ObjectAnnotation]) -> bool:
    """True when the caption is readable and names exactly the image's objects, every stated
    size right."""
    return _objects_correct(parse_caption(caption), objects)


def _objects_correct(parsed: ParsedCaption, objects: Sequence[ObjectAnnotation]) -> bool:
    named = {(o.colour, o.shape) for o in parsed.objects}
    present = {(o.attributes["colour"], o.attributes["shape"]) for o in objects}
    if not parsed.readable or named != present:
        return False
    return all(o.size is None or _find(objects, o).attributes["size"] == o.size
               for o in parsed.objects)


def relation_counts(caption: str, objects: Sequence[ObjectAnnotation]) -> tuple[int, int]:
    """`(true, stated)`: how many of the caption's stated relations hold in the image
    (`relation_holds`; an unreadable caption's `unread` ones are stated and false)."""
    return _relation_counts(parse_caption(caption), objects)


def _relation_counts(parsed: ParsedCaption,
                     objects: Sequence[ObjectAnnotation]) -> tuple[int, int]:
    true = 0
    for i, relation, j in parsed.relations:
        a, b = _find(objects, parsed.objects[i]), _find(objects, parsed.objects[j])
        true += i != j and a is not None and b is not None and relation_holds(a, b, relation)
    return true, len(parsed.relations) + parsed.unread


def _fact_score(parsed: ParsedCaption, objects: Sequence[ObjectAnnotation],
                relation_bonus: float = 0.0) -> float:
    true, stated = _relation_counts(parsed, objects)
    score = int(_objects_correct(parsed, objects)) - (stated - true) - int(parsed.named_twice)
    return score + relation_bonus * true if relation_bonus else score


def fact_score(caption: str, objects: Sequence[ObjectAnnotation],
               relation_bonus: float = 0.0) -> float:
    """What `caption` gets right of its image's scene, as a reward for self-critical training
    (`scst.fact_weight`): 1 when it is readable and names exactly the image's objects
    (`objects_correct`), minus 1 for each relation it states that does not hold, the unread
    ones of an unreadable caption included (`relation_counts`), and minus 1 when it names an
    object twice (`names_an_object_twice`); plus `relation_bonus` for each stated relation
    that holds (`scst.relation_bonus`: without it a relation earns nothing and costs 1 when
    false, so a policy learns to state none it is unsure of; with it, one it is right about
    more than `1 / (1 + relation_bonus)` of the time pays).

    Example:
    >>> def shape(colour, name, box):
    ...     return ObjectAnnotation(name, box, attributes={"colour": colour, "shape": name,
    ...                                                    "size": "small"})
    >>> scene = [shape("red", "circle", (0, 0, 10, 10)), shape("blue", "square", (30, 0, 40, 10))]
    >>> fact_score("a red circle to the left of a blue square", scene)
    1
    >>> fact_score("a red circle above a blue square and a red circle", scene)
    -1
    >>> fact_score("a blue square , a red circle to the right", scene)
    0
    >>> fact_score("a red circle beside a blue square", scene)  # unreadable
    -1
    >>> fact_score("a red circle to the left of a blue square", scene, relation_bonus=0.25)
    1.25
    """
    return _fact_score(parse_caption(caption), objects, relation_bonus)


def caption_errors(caption: str, objects: Sequence[ObjectAnnotation]) -> list[str]:
    """What is wrong with `caption` of a scene, in words; `[]` when it is right: readable,
    naming exactly the scene's objects (every stated size right), each once, every stated
    relation true.

    Example:
    >>> def shape(colour, name, box):
    ...     return ObjectAnnotation(name, box, attributes={"colour": colour, "shape": name,
    ...                                                    "size": "small"})
    >>> scene = [shape("red", "circle", (0, 0, 10, 10)), shape("blue", "square", (30, 0, 40, 10))]
    >>> caption_errors("a red circle to the left of a blue square", scene)
    []
    >>> caption_errors("a blue square to the left of a red circle", scene)
    ['1 of 1 stated relations false']
    >>> caption_errors("a blue square below a blue square", scene)[:2]
    ['names blue square; the scene has blue square, red circle', 'names an object twice']
    """
    parsed = parse_caption(caption)
    if not parsed.readable:
        return ["unreadable"]
    errors = []
    if not _objects_correct(parsed, objects):
        named = ", ".join(sorted(f"{o.colour} {o.shape}" for o in parsed.objects))
        present = ", ".join(sorted(f"{o.attributes['colour']} {o.attributes['shape']}"
                                   for o in objects))
        errors.append(f"names {named or 'nothing'}; the scene has {present}")
    if parsed.named_twice:
        errors.append("names an object twice")
    true, stated = _relation_counts(parsed, objects)
    if true < stated:
        errors.append(f"{stated - true} of {stated} stated relations false")
    return errors


def _pooled(captions: Sequence[str], objects: Sequence[Sequence[ObjectAnnotation]],
            counts: Callable[[str, Sequence[ObjectAnnotation]], tuple[int, int]]) -> float:
    """`sum(true) / sum(stated)` of `counts(caption, its image's objects)` over the images;
    nan when nothing was stated."""
    if len(captions) != len(objects):
        raise UserError(f"got {len(captions)} captions for {len(objects)} images; "
                        "expected one caption per image")
    true = stated = 0
    for caption, objs in zip(captions, objects):
        t, s = counts(caption, objs)
        true, stated = true + t, stated + s
    return true / stated if stated else math.nan


def object_accuracy(captions: Sequence[str],
                    objects: Sequence[Sequence[ObjectAnnotation]]) -> float:
    """The fraction of `captions` that name exactly their image's objects.

    Args:
        captions: one caption per image.
        objects: each image's `ObjectAnnotation`s (shapes attributes required).

    Returns:
        A float in [0, 1]; nan for no captions.
    """
    return _pooled(captions, objects, lambda c, o: (int(objects_correct(c, o)), 1))


def relation_accuracy(captions: Sequence[str],
                      objects: Sequence[Sequence[ObjectAnnotation]]) -> float:
    """The fraction of all relations the `captions` state that are true of their images
    (arguments as for `object_accuracy`); nan when no caption states a relation."""
    return _pooled(captions, objects, relation_counts)


def shapes_scores(hypotheses: Mapping[Hashable, str], split: CaptionSplit) -> dict[str, float]:
    """Object and relation accuracy (0-100) of generated captions `{image_id: caption}`.

    Returns:
        `{"object_accuracy", "relation_accuracy", "relations_stated", "objects_named_twice",
        "objects_named_twice_rate", "facts"}`; relation accuracy is nan when no caption
        states a relation, `relations_stated` is the mean number per caption (the unread ones
        of unreadable captions included), `objects_named_twice` the number of captions that
        name an object twice (`names_an_object_twice`), `objects_named_twice_rate` their share
        (0-100; nan for no captions) and `facts` the mean `fact_score` per caption (in
        [-T, 1]).
    """
    ids = list(hypotheses)
    parsed = [parse_caption(hypotheses[i]) for i in ids]
    objects = [split.by_id(i).objects for i in ids]
    counts = [_relation_counts(p, o) for p, o in zip(parsed, objects)]
    true, stated = sum(c[0] for c in counts), sum(c[1] for c in counts)
    right = sum(_objects_correct(p, o) for p, o in zip(parsed, objects))
    twice = sum(p.named_twice for p in parsed)
    facts = sum(_fact_score(p, o) for p, o in zip(parsed, objects))

    def mean(total: float) -> float:
        return total / len(ids) if ids else math.nan

    return {
        "object_accuracy": 100.0 * mean(right),
        "relation_accuracy": 100.0 * true / stated if stated else math.nan,
        "relations_stated": mean(stated),
        "objects_named_twice": twice,
        "objects_named_twice_rate": 100.0 * mean(twice),
        "facts": mean(facts),
    }
