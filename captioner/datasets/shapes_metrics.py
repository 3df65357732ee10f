"""Object and relation accuracy of `shapes` captions, read with the grammar they are made from.

A caption names objects as `[size] colour shape` ("small red circle", "blue square") and
states relations between two consecutive object phrases with "left", "right", "above"/"top"
or "below"/"under"/"beneath" somewhere between them ("a red circle to the left of a blue
square", "the red circle is above the blue square"); "and" or "," with no relation word
between two phrases states none. Every other word is ignored.

- `object_accuracy`: the fraction of captions whose named objects (colour and shape) are
  exactly the image's objects, with every stated size right.
- `relation_accuracy`: the fraction of stated relations that are true of the image: both
  objects are in it and the relation matches their box centres (`shapes.spatial_relation`).
- `objects_named_twice`: the number of captions that name one object twice, that is, with an
  object phrase of the same colour and shape as an earlier one of the caption that is not
  introduced by "the" ("a yellow square left of a green diamond and a yellow square"). "The"
  is how the references refer back to an object they have named ("a red circle left of a blue
  square , and a green diamond above the blue square"; an image never holds two objects of
  one colour and shape), so no reference caption counts.
- `fact_score`: one caption's facts as a reward for self-critical training: +1 for the right
  objects, −1 for each false relation and for naming an object twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from captioner.datasets.records import CaptionSplit, ObjectAnnotation
from captioner.datasets.shapes import COLOURS, SHAPES, SIZES, spatial_relation
from common.errors import UserError

_RELATION_WORDS = {
    "left": "left",
    "right": "right",
    "above": "above",
    "top": "above",
    "over": "above",
    "below": "below",
    "under": "below",
    "beneath": "below",
    "underneath": "below",
}
_WORD = re.compile(r"[a-z]+")


@dataclass(frozen=True)
class NamedObject:
    """An object phrase of a caption: its colour, shape and (when stated) size."""

    colour: str
    shape: str
    size: str | None = None


@dataclass(frozen=True)
class ParsedCaption:
    """What a caption says: its distinct objects, and relations `(i, relation, j)` meaning
    "objects[i] is <relation> of objects[j]"."""

    objects: tuple[NamedObject, ...] = ()
    relations: tuple[tuple[int, str, int], ...] = field(default=())


def parse_caption(caption: str) -> ParsedCaption:
    """Read the objects and relations a `shapes` caption states.

    Example:
    >>> parse_caption("a small red circle to the left of a blue square")
    ParsedCaption(objects=(NamedObject(colour='red', shape='circle', size='small'),
    NamedObject(colour='blue', shape='square', size=None)), relations=((0, 'left', 1),))
    """
    words = _WORD.findall(caption.lower())
    mentions = _mentions(words)
    objects: list[NamedObject] = []
    index: dict[tuple[str, str], int] = {}
    mention_ids = []
    for _, _, named in mentions:
        key = (named.colour, named.shape)
        if key not in index:
            index[key] = len(objects)
            objects.append(named)
        elif named.size is not None and objects[index[key]].size is None:
            objects[index[key]] = named
        mention_ids.append(index[key])

    relations = []
    for k in range(len(mentions) - 1):
        between = words[mentions[k][1] + 1 : mentions[k + 1][0]]
        stated = [_RELATION_WORDS[w] for w in between if w in _RELATION_WORDS]
        if stated and mention_ids[k] != mention_ids[k + 1]:
            relations.append((mention_ids[k], stated[0], mention_ids[k + 1]))
    return ParsedCaption(objects=tuple(objects), relations=tuple(relations))


def _mentions(words: Sequence[str]) -> list[tuple[int, int, NamedObject]]:
    """The object phrases `[size] colour shape` of a caption's `words`, in order: `(first
    word, last word, object)`."""
    mentions = []
    i = 0
    while i < len(words) - 1:
        if words[i] in COLOURS and words[i + 1] in SHAPES:
            first = i - 1 if i > 0 and words[i - 1] in SIZES else i
            size = words[i - 1] if first < i else None
            mentions.append((first, i + 1, NamedObject(words[i], words[i + 1], size)))
            i += 2
        else:
            i += 1
    return mentions


def names_an_object_twice(caption: str) -> bool:
    """True when an object phrase of `caption` has the colour and shape of an earlier one and
    is not introduced by "the" (see the module docstring).

    Example:
    >>> names_an_object_twice("a small yellow square left of a green diamond and a yellow square")
    True
    >>> names_an_object_twice("a red circle left of a blue square , and a green diamond "
    ...                       "above the blue square")
    False
    """
    words = _WORD.findall(caption.lower())
    seen = set()
    for first, _, named in _mentions(words):
        key = (named.colour, named.shape)
        if key in seen and (first == 0 or words[first - 1] != "the"):
            return True
        seen.add(key)
    return False


def _find(objects: Sequence[ObjectAnnotation], named: NamedObject) -> ObjectAnnotation | None:
    for obj in objects:
        if obj.attributes.get("colour") == named.colour and obj.attributes.get("shape") == named.shape:
            return obj
    return None


def objects_correct(caption: str, objects: Sequence[ObjectAnnotation]) -> bool:
    """True when the caption names exactly the image's objects, every stated size right."""
    return _objects_correct(parse_caption(caption), objects)


def _objects_correct(parsed: ParsedCaption, objects: Sequence[ObjectAnnotation]) -> bool:
    named = {(o.colour, o.shape) for o in parsed.objects}
    present = {(o.attributes["colour"], o.attributes["shape"]) for o in objects}
    if named != present:
        return False
    return all(o.size is None or _find(objects, o).attributes["size"] == o.size
               for o in parsed.objects)


def relation_counts(caption: str, objects: Sequence[ObjectAnnotation]) -> tuple[int, int]:
    """`(true, stated)`: how many of the caption's stated relations hold in the image."""
    return _relation_counts(parse_caption(caption), objects)


def _relation_counts(parsed: ParsedCaption,
                     objects: Sequence[ObjectAnnotation]) -> tuple[int, int]:
    true = 0
    for i, relation, j in parsed.relations:
        a, b = _find(objects, parsed.objects[i]), _find(objects, parsed.objects[j])
        true += a is not None and b is not None and spatial_relation(a, b) == relation
    return true, len(parsed.relations)


def fact_score(caption: str, objects: Sequence[ObjectAnnotation]) -> int:
    """What `caption` gets right of its image's scene, as a reward for self-critical training
    (`scst.fact_weight`): 1 when it names exactly the image's objects (`objects_correct`),
    minus 1 for each relation it states that is false (`relation_counts`) and minus 1 when it
    names an object twice (`names_an_object_twice`).

    Example:
    >>> def shape(colour, name, box):
    ...     return ObjectAnnotation(name, box, attributes={"colour": colour, "shape": name,
    ...                                                    "size": "small"})
    >>> scene = [shape("red", "circle", (0, 0, 10, 10)), shape("blue", "square", (30, 0, 40, 10))]
    >>> fact_score("a red circle to the left of a blue square", scene)
    1
    >>> fact_score("a red circle above a blue square and a red circle", scene)
    -1
    """
    parsed = parse_caption(caption)
    true, stated = _relation_counts(parsed, objects)
    return (int(_objects_correct(parsed, objects)) - (stated - true)
            - int(names_an_object_twice(caption)))


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
        states a relation, `relations_stated` is the mean number per caption,
        `objects_named_twice` the number of captions that name an object twice
        (`names_an_object_twice`), `objects_named_twice_rate` their share (0-100; nan for no
        captions) and `facts` the mean `fact_score` per caption (in [-T, 1]).
    """
    ids = list(hypotheses)
    captions = [hypotheses[i] for i in ids]
    objects = [split.by_id(i).objects for i in ids]
    stated = sum(relation_counts(c, o)[1] for c, o in zip(captions, objects))
    twice = sum(names_an_object_twice(c) for c in captions)
    facts = sum(fact_score(c, o) for c, o in zip(captions, objects))
    return {
        "object_accuracy": 100.0 * object_accuracy(captions, objects),
        "relation_accuracy": 100.0 * relation_accuracy(captions, objects),
        "relations_stated": stated / len(ids) if ids else math.nan,
        "objects_named_twice": twice,
        "objects_named_twice_rate": 100.0 * twice / len(ids) if ids else math.nan,
        "facts": facts / len(ids) if ids else math.nan,
    }
