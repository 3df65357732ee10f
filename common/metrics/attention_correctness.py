"""Attention correctness (Liu et al. 2017, "Attention Correctness in Neural Image Captioning").

For each word that names an object present in the image, attention correctness is the
attention mass that the step producing that word puts inside the object's box; the score is
the mean over all such words. The uniform-attention baseline for the same words is the box's
share of the image (box area / image area), which is what a map spreading its mass evenly
would score.

The words can be a generated caption's (the attention of the step that generated each word)
or, as Liu et al. define the metric, a reference caption's read under teacher forcing (the
attention of the step that reads the words before it and is asked for the next one). On
generated captions only the objects the model chose to name are scored, so a model that
names objects that are not there is scored on its successes: `skipped` counts the words that
name an object kind (a shape word, a COCO category word) but no object of the image the
matcher can point to, and says how much was left out.

Upsampling: an attention map of `h x w` cells covers the image as a grid of equal
rectangles, cell `(i, j)` spanning `[j W / w, (j + 1) W / w) x [i H / h, (i + 1) H / h)`,
its weight spread evenly over that rectangle (nearest-neighbour upsampling, taken to the
limit of continuous area). The mass inside a region is then
`sum_ij alpha_ij * area(cell_ij & region) / area(cell_ij)`, computed exactly. A word matching
several objects (two dogs for "dogs") uses the union of their boxes.

Dimensions: `T` generated steps, `L = h * w` image regions, `H`, `W` image height and width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.errors import UserError

Box = tuple[float, float, float, float]
# words -> objects -> for each word, the indices of the objects it names ([] for none).
Matcher = Callable[[Sequence[str], Sequence[Any]], list[list[int]]]


# Colour words that, before a shape word, name which object is meant.
COLOUR_WORDS = frozenset({"red", "green", "blue", "yellow", "purple", "white", "black",
                          "orange", "pink", "brown", "grey", "gray", "cyan"})

# Caption words -> COCO category names (plurals are handled by `coco_category`): a one-word
# category's own name, and the other words captions use for a category. The categories named
# by their own name alone:
_COCO_SELF_NAMED = """
    bus bench elephant bear zebra giraffe backpack umbrella frisbee snowboard kite
    skateboard surfboard bottle fork spoon bowl banana apple sandwich orange broccoli
    carrot pizza cake chair bed toilet laptop mouse remote keyboard microwave toaster sink
    book clock vase scissors toothbrush
""".split()
# ... and the categories with other words (a two-word category only by these):
_COCO_SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": ("people", "man", "men", "woman", "women", "boy", "girl", "child", "children", "kid",
               "guy", "lady", "ladies", "player", "skier", "surfer", "skateboarder", "snowboarder",
               "baby", "toddler", "rider", "adult", "crowd", "someone", "gentleman", "teenager",
               "cyclist", "catcher", "batter", "pitcher"),
    "bicycle": ("bike", "cycle"),
    "car": ("taxi", "suv", "sedan"),
    "motorcycle": ("motorbike", "scooter", "moped"),
    "airplane": ("plane", "jet", "aircraft", "airliner", "aeroplane"),
    "train": ("locomotive",),
    "truck": ("pickup",),
    "boat": ("ship", "sailboat", "canoe", "kayak", "yacht"),
    "traffic light": ("stoplight",),
    "fire hydrant": ("hydrant",),
    "parking meter": ("meter",),
    "bird": ("pigeon", "seagull", "gull", "duck", "parrot"),
    "cat": ("kitten", "kitty"),
    "dog": ("puppy", "pup"),
    "horse": ("pony",),
    "sheep": ("lamb",),
    "cow": ("cattle", "bull", "calf"),
    "handbag": ("purse",),
    "tie": ("necktie",),
    "suitcase": ("luggage",),
    "skis": ("ski",),
    "sports ball": ("ball", "football", "soccer"),
    "baseball bat": ("bat",),
    "baseball glove": ("glove", "mitt"),
    "tennis racket": ("racket", "racquet"),
    "wine glass": ("glass",),
    "cup": ("mug",),
    "knife": ("knives",),
    "hot dog": ("hotdog",),
    "donut": ("doughnut",),
    "couch": ("sofa",),
    "potted plant": ("plant",),
    "dining table": ("table",),
    "tv": ("television",),
    "cell phone": ("phone", "cellphone"),
    "oven": ("stove",),
    "refrigerator": ("fridge",),
    "teddy bear": ("teddy",),
    "hair drier": ("drier", "dryer", "hairdryer"),
}
COCO_WORDS: dict[str, str] = {
    **{c: c for c in [*_COCO_SELF_NAMED, *_COCO_SYNONYMS] if " " not in c},
    **{w: c for c, words in _COCO_SYNONYMS.items() for w in words},
}


def coco_category(word: str) -> str | None:
    """The COCO category a caption word names ("men" -> "person"), or None.

    Example:
    >>> coco_category("puppies"), coco_category("Dogs"), coco_category("grass")
    ('dog', 'dog', None)
    """
    word = word.lower()
    for candidate in (word, word[:-1] if word.endswith("s") else None,
                      word[:-2] if word.endswith("es") else None,
                      word[:-3] + "y" if word.endswith("ies") else None):
        if candidate and candidate in COCO_WORDS:
            return COCO_WORDS[candidate]
    return None


# The shape words of the `shapes` dataset (`captioner.datasets.shapes.SHAPES`).
SHAPE_WORDS = frozenset({"circle", "square", "triangle", "diamond"})


@dataclass(frozen=True)
class AttentionCorrectness:
    """Mean attention mass inside the named objects' boxes, the uniform baseline for the same
    words, how many words were scored (the means are nan when none were), and how many words
    named an object kind but were not scored: no object of that kind in the image, or none
    the matcher could single out ("a circle" beside two circles)."""

    correctness: float
    baseline: float
    count: int
    skipped: int = 0


def region_fractions(boxes: Sequence[Box], image_size: tuple[int, int],
                     grid: tuple[int, int]) -> np.ndarray:
    """For each attention cell, the fraction of its area inside the union of `boxes`.

    Args:
        boxes: `(x0, y0, x1, y1)` in image pixels; parts outside the image are ignored.
        image_size: `(H, W)`.
        grid: `(h, w)` attention cells.

    Returns:
        `(h, w)` float64 in [0, 1].

    Raises:
        ValueError: an image size that is not positive (an unknown size would clip every box
            to nothing and score a word 0 rather than leave it out).
    """
    height, width = (float(s) for s in image_size)
    if not (height > 0 and width > 0):
        raise ValueError(f"image size {tuple(image_size)}: expected a positive (H, W)")
    rows, cols = grid
    x_edges = np.linspace(0.0, width, cols + 1)
    y_edges = np.linspace(0.0, height, rows + 1)
    clipped = [(max(0.0, x0), max(0.0, y0), min(width, x1), min(height, y1))
               for x0, y0, x1, y1 in boxes]
    clipped = [b for b in clipped if b[0] < b[2] and b[1] < b[3]]
    if not clipped:
        return np.zeros((rows, cols))
    # Cut the image along every cell and box edge: each piece is wholly inside one cell and
    # wholly inside or outside the union of boxes.
    xs = np.unique(np.concatenate([x_edges, [v for b in clipped for v in (b[0], b[2])]]))
    ys = np.unique(np.concatenate([y_edges, [v for b in clipped for v in (b[1], b[3])]]))
    cx, cy = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2
    inside = np.zeros((len(cy), len(cx)), bool)
    for x0, y0, x1, y1 in clipped:
        inside |= ((cy > y0) & (cy < y1))[:, None] & ((cx > x0) & (cx < x1))[None, :]
    area = np.outer(np.diff(ys), np.diff(xs)) * inside
    col = np.clip(np.searchsorted(x_edges, cx, side="right") - 1, 0, cols - 1)
    row = np.clip(np.searchsorted(y_edges, cy, side="right") - 1, 0, rows - 1)
    covered = np.zeros((rows, cols))
    np.add.at(covered, (row[:, None], col[None, :]), area)
    return covered / ((height / rows) * (width / cols))


def _grid_of(attention: np.ndarray, grid: tuple[int, int] | None) -> tuple[np.ndarray, tuple]:
    """Attention as `(T, h, w)` and its grid."""
    attention = np.asarray(attention, np.float64)
    if attention.ndim == 3:
        return attention, attention.shape[1:]
    if attention.ndim != 2:
        raise UserError(f"attention must be (T, L) or (T, h, w), got shape {attention.shape}")
    regions = attention.shape[1]
    if grid is None:
        side = math.isqrt(regions)
        if side * side != regions:
            raise UserError(f"attention has L={regions} regions, not a square grid; pass grid")
        grid = (side, side)
    if grid[0] * grid[1] != regions:
        raise UserError(f"grid {grid} has {grid[0] * grid[1]} cells; attention has {regions}")
    return attention.reshape(len(attention), *grid), tuple(grid)


def attention_correctness(words: Sequence[str], attention: np.ndarray, objects: Sequence[Any],
                          image_size: tuple[int, int], matcher: str | Matcher = "shapes",
                          grid: tuple[int, int] | None = None) -> AttentionCorrectness:
    """Attention correctness of one caption, generated or teacher-forced.

    Args:
        words: the caption's words, without `<start>`; `<end>` and later are ignored.
        attention: the step-by-step maps, `(T, L)` (a square grid unless `grid` is given) or
            `(T, h, w)`; step `t` generated (or, teacher-forced, was asked for) `words[t]`.
            Rows should sum to 1.
        objects: the image's objects, each with a `box` `(x0, y0, x1, y1)` in pixels (e.g.
            `captioner.datasets.ObjectAnnotation`).
        image_size: `(H, W)` of the image the boxes refer to.
        matcher: `"shapes"`, `"coco"`, or `fn(words, objects) -> [[object index, ...], ...]`.
        grid: `(h, w)` when `attention` is `(T, L)` with a non-square grid.

    Returns:
        An `AttentionCorrectness` (sums over words, so `corpus_attention_correctness` can
        pool captions).

    Example:
    >>> circle = ObjectAnnotation("red circle", (0, 0, 32, 32),
    ...                           attributes={"colour": "red", "shape": "circle"})
    >>> alpha = np.full((3, 4, 4), 1 / 16)  # uniform maps over a 4 x 4 grid
    >>> attention_correctness(["a", "red", "circle"], alpha, [circle], (64, 64))
    AttentionCorrectness(correctness=0.25, baseline=0.25, count=1, skipped=0)
    """
    return corpus_attention_correctness([(words, attention, objects, image_size)], matcher, grid)


def corpus_attention_correctness(
        items: Iterable[tuple[Sequence[str], np.ndarray, Sequence[Any], tuple[int, int]]],
        matcher: str | Matcher = "shapes",
        grid: tuple[int, int] | None = None,
        names_object: Callable[[str, Sequence[Any]], bool] | None = None,
) -> AttentionCorrectness:
    """Attention correctness over many captions: the mean over all their matched words.

    Args:
        items: `(words, attention, objects, image_size)` per caption, as for
            `attention_correctness`.
        matcher, grid: as for `attention_correctness`.
        names_object: `fn(word, objects) -> bool`, whether a word names an object kind, for
            counting the words skipped; by default the registered matcher's
            (`OBJECT_WORDS`), and for a matcher function none are counted.
    """
    match = MATCHERS.get(matcher, matcher) if isinstance(matcher, str) else matcher
    if not callable(match):
        raise UserError(f"Unknown word matcher {matcher!r}; choose one of: "
                        f"{', '.join(MATCHERS)} or pass a function")
    if names_object is None:
        names_object = OBJECT_WORDS.get(matcher) if isinstance(matcher, str) else None
    mass = base = 0.0
    count = skipped = 0
    for words, attention, objects, image_size in items:
        maps, cells = _grid_of(attention, grid)
        words = list(words)
        if "<end>" in words:
            words = words[: words.index("<end>")]
        words = words[: len(maps)]
        for t, indices in enumerate(match(words, objects)):
            if not indices:
                skipped += bool(names_object and names_object(words[t], objects))
                continue
            fractions = region_fractions([objects[i].box for i in indices], image_size, cells)
            mass += float((maps[t] * fractions).sum())
            base += float(fractions.mean())
            count += 1
    if not count:
        return AttentionCorrectness(math.nan, math.nan, 0, skipped)
    return AttentionCorrectness(mass / count, base / count, count, skipped)


def match_shapes_words(words: Sequence[str], objects: Sequence[Any]) -> list[list[int]]:
    """For each word, the shapes object it names: a shape word, told apart by the colour word
    before it ("red circle"); a bare shape word counts only when one object has that shape.
    A named object not in the image matches nothing."""
    matches: list[list[int]] = []
    for t, word in enumerate(words):
        same_shape = [i for i, o in enumerate(objects) if o.attributes.get("shape") == word]
        colour = words[t - 1] if t > 0 else None
        coloured = [i for i in same_shape if objects[i].attributes.get("colour") == colour]
        if coloured:
            matches.append(coloured[:1])
        elif len(same_shape) == 1 and colour not in COLOUR_WORDS:
            matches.append(same_shape)
        else:
            matches.append([])
    return matches


def match_coco_words(words: Sequence[str], objects: Sequence[Any]) -> list[list[int]]:
    """For each word, the COCO objects of the category it names ("man" -> every person box;
    see `common.metrics.coco_words`); none when the image has no such object."""
    matches = []
    for word in words:
        category = coco_category(word)
        matches.append([i for i, o in enumerate(objects) if category and o.category == category])
    return matches


def names_shape(word: str, objects: Sequence[Any]) -> bool:
    """Whether `word` is a shape word ("circle", "squares"), or an image object's shape."""
    singular = word[:-1] if word.endswith("s") else word
    shapes = SHAPE_WORDS | {o.attributes.get("shape") for o in objects}
    return word in shapes or singular in shapes


def names_coco_object(word: str, objects: Sequence[Any]) -> bool:
    """Whether `word` names a COCO category (`coco_category`)."""
    return coco_category(word) is not None


MATCHERS: dict[str, Matcher] = {"shapes": match_shapes_words, "coco": match_coco_words}
# For each matcher: whether a word names an object kind at all (the skipped words' count).
OBJECT_WORDS: dict[str, Callable[[str, Sequence[Any]], bool]] = {
    "shapes": names_shape, "coco": names_coco_object}
