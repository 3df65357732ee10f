"""`shapes`: a captioning dataset generated in code, small enough to train on a laptop.

Each image is `image_size` x `image_size` RGB (64 by default) on a noisy dark background,
with 1-3 non-overlapping objects: a shape (circle, square, triangle, diamond) in a colour
(red, green, blue, yellow, purple, white) and a size (small, large); no two objects in an
image share both colour and shape, so a phrase like "red circle" names exactly one object.
Every pair of objects is placed so that one axis clearly dominates the offset between their
centres, which makes "left of / right of / above / below" unambiguous. Each image has 3-5
captions with varied wording, e.g. "a small red circle to the left of a blue square",
"there is a blue square to the right of a small red circle", "the green triangle is above
the yellow circle". Every object comes with its attributes, box and mask, so attention
correctness and relation/object accuracy (`shapes_metrics`) can be measured exactly.

Generation is deterministic per `(seed, split)` (the splits use different seed streams) and
prefix-stable: the first 10 images of a 500-image split are the 10 images of a 10-image one.
Images are generated once per process and kept in memory (the 8000-image train split takes
a few seconds).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from captioner.datasets.records import (
    SPLITS,
    CaptionSplit,
    ImageRecord,
    ObjectAnnotation,
    bool_option,
    int_option,
    register_loader,
)
from common.errors import UserError

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 45, 45),
    "green": (45, 185, 70),
    "blue": (55, 95, 240),
    "yellow": (235, 215, 45),
    "purple": (160, 65, 215),
    "white": (235, 235, 235),
}
SHAPES = ("circle", "square", "triangle", "diamond")
SIZES: dict[str, tuple[float, float]] = {"small": (0.16, 0.21), "large": (0.28, 0.36)}
RELATIONS = ("left", "right", "above", "below")
RELATION_PHRASES = {
    "left": "to the left of",
    "right": "to the right of",
    "above": "above",
    "below": "below",
}
INVERSE = {"left": "right", "right": "left", "above": "below", "below": "above"}
DEFAULT_SIZES = {"train": 8000, "valid": 500, "test": 500}
# A pair's relation is stated only when the dominant axis of the centre offset is at least
# this many times the other axis; generation places every pair so that this holds.
CLEAR_RATIO = 1.5


def spatial_relation(a: ObjectAnnotation, b: ObjectAnnotation) -> str:
    """Where `a` is relative to `b` by their box centres: the dominant axis decides.

    Returns `"left"`, `"right"`, `"above"` or `"below"` (image y grows downwards).
    """
    ax, ay = (a.box[0] + a.box[2]) / 2, (a.box[1] + a.box[3]) / 2
    bx, by = (b.box[0] + b.box[2]) / 2, (b.box[1] + b.box[3]) / 2
    dx, dy = ax - bx, ay - by
    if abs(dx) >= abs(dy):
        return "left" if dx < 0 else "right"
    return "above" if dy < 0 else "below"


def _shape_outline(shape: str, x0: float, y0: float, x1: float, y1: float):
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    if shape == "triangle":
        return [(x0, y1), (x1, y1), (cx, y0)]
    if shape == "diamond":
        return [(cx, y0), (x1, cy), (cx, y1), (x0, cy)]
    return None


def _place(rng: np.random.Generator, sides: list[int], size: int) -> list[tuple[int, int]] | None:
    """Top-left corners for squares of `sides` that do not overlap (2 px apart) and whose
    centres are pairwise clearly related; None after too many tries."""
    for _ in range(200):
        corners = [(int(rng.integers(1, size - s)), int(rng.integers(1, size - s))) for s in sides]
        ok = True
        for i in range(len(sides)):
            for j in range(i):
                (xi, yi), (xj, yj), si, sj = corners[i], corners[j], sides[i], sides[j]
                apart = (xi + si + 2 <= xj or xj + sj + 2 <= xi
                         or yi + si + 2 <= yj or yj + sj + 2 <= yi)
                dx = abs((xi + si / 2) - (xj + sj / 2))
                dy = abs((yi + si / 2) - (yj + sj / 2))
                if not apart or max(dx, dy) < CLEAR_RATIO * min(dx, dy):
                    ok = False
        if ok:
            return corners
    return None


def _generate_image(rng: np.random.Generator, image_size: int, with_masks: bool):
    """One image: pixels `(S, S, 3)` uint8 and its objects."""
    for _ in range(20):
        count = int(rng.integers(1, 4))
        kinds = rng.choice(len(COLOURS) * len(SHAPES), size=count, replace=False)
        sizes = [str(rng.choice(list(SIZES))) for _ in range(count)]
        sides = [max(4, int(round(image_size * rng.uniform(*SIZES[s])))) for s in sizes]
        corners = _place(rng, sides, image_size)
        if corners is not None:
            break
    else:  # pragma: no cover - placement of 1-3 objects practically always succeeds
        raise RuntimeError("could not place shapes")

    labels = Image.new("L", (image_size, image_size), 0)
    draw = ImageDraw.Draw(labels)
    for k, ((x, y), side, kind) in enumerate(zip(corners, sides, kinds)):
        shape = SHAPES[int(kind) % len(SHAPES)]
        box = (x, y, x + side - 1, y + side - 1)
        outline = _shape_outline(shape, *box)
        if shape == "circle":
            draw.ellipse(box, fill=k + 1)
        elif shape == "square":
            draw.rectangle(box, fill=k + 1)
        else:
            draw.polygon(outline, fill=k + 1)
    labels = np.asarray(labels)

    background = np.float32(rng.uniform(25, 75))
    noise = rng.standard_normal(size=(image_size, image_size, 3), dtype=np.float32)
    pixels = noise * np.float32(10.0) + background
    objects = []
    for k, (kind, size) in enumerate(zip(kinds, sizes)):
        colour = list(COLOURS)[int(kind) // len(SHAPES)]
        shape = SHAPES[int(kind) % len(SHAPES)]
        mask = labels == k + 1
        rgb = np.asarray(COLOURS[colour], np.float32) + rng.uniform(-15, 15, size=3)
        pixels[mask] = rgb + noise[mask] * np.float32(0.5)  # objects are less noisy
        ys, xs = np.nonzero(mask)
        box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
        if with_masks:
            mask.setflags(write=False)
        objects.append(ObjectAnnotation(
            category=f"{colour} {shape}", box=box, mask=mask if with_masks else None,
            attributes={"shape": shape, "colour": colour, "size": size}))
    image = np.clip(pixels + np.float32(0.5), 0, 255).astype(np.uint8)  # rounded
    image.setflags(write=False)
    return image, tuple(objects)


def _phrase(rng: np.random.Generator, obj: ObjectAnnotation) -> str:
    words = [obj.attributes["colour"], obj.attributes["shape"]]
    if rng.random() < 0.5:
        words.insert(0, obj.attributes["size"])
    return " ".join(words)


def make_captions(rng: np.random.Generator, objects: tuple[ObjectAnnotation, ...]) -> list[str]:
    """3-5 distinct captions for `objects`, in varied wording, relations from box centres."""
    order = [objects[i] for i in rng.permutation(len(objects))]

    def p(obj: ObjectAnnotation) -> str:
        return _phrase(rng, obj)

    def rel(a: ObjectAnnotation, b: ObjectAnnotation) -> str:
        return RELATION_PHRASES[spatial_relation(a, b)]

    if len(order) == 1:
        (a,) = order
        templates = [
            lambda: f"a {p(a)}",
            lambda: f"there is a {p(a)}",
            lambda: f"a picture of a {p(a)}",
            lambda: f"one {p(a)} on a dark background",
            lambda: f"the image shows a {p(a)}",
            lambda: f"a single {p(a)}",
        ]
    elif len(order) == 2:
        a, b = order
        templates = [
            lambda: f"a {p(a)} {rel(a, b)} a {p(b)}",
            lambda: f"there is a {p(b)} {rel(b, a)} a {p(a)}",
            lambda: f"the {p(a)} is {rel(a, b)} the {p(b)}",
            lambda: f"a {p(b)} {rel(b, a)} a {p(a)}",
            lambda: f"a {p(a)} and a {p(b)}",
            lambda: f"two shapes : a {p(b)} {rel(b, a)} a {p(a)}",
        ]
    else:
        a, b, c = order
        templates = [
            lambda: f"a {p(a)} {rel(a, b)} a {p(b)} and a {p(c)}",
            lambda: f"a {p(a)} , a {p(b)} and a {p(c)}",
            lambda: f"there is a {p(c)} {rel(c, a)} a {p(a)} , and a {p(b)}",
            lambda: f"a {p(b)} {rel(b, c)} a {p(c)} , and a {p(a)} {rel(a, c)} the {p(c)}",
            lambda: f"three shapes : a {p(c)} , a {p(a)} and a {p(b)}",
            lambda: f"the {p(a)} is {rel(a, c)} the {p(c)} , and there is a {p(b)}",
        ]
    count = int(rng.integers(3, 6))
    captions: list[str] = []
    for index in rng.permutation(len(templates)):
        caption = templates[int(index)]()
        if caption not in captions:
            captions.append(caption)
        if len(captions) == count:
            break
    return captions


@functools.lru_cache(maxsize=8)
def _generate(split: str, num_images: int, image_size: int, seed: int,
              with_masks: bool) -> tuple[ImageRecord, ...]:
    rng = np.random.default_rng(np.random.SeedSequence([seed, SPLITS.index(split)]))
    records = []
    for i in range(num_images):
        image, objects = _generate_image(rng, image_size, with_masks)
        captions = make_captions(rng, objects)
        records.append(ImageRecord(image_id=f"shapes-{split}-{i:05d}", captions=tuple(captions),
                                   height=image_size, width=image_size, image=image,
                                   objects=objects))
    return tuple(records)


# Bytes a pixel of a split in memory: the RGB image and up to three object masks.
BYTES_PER_PIXEL = 6


def _check_memory(num_images: int, image_size: int) -> None:
    """Refuse a split that cannot fit in this machine's memory (the images are made in it),
    before any is made, rather than fail or swap after minutes of work."""
    needed = num_images * image_size * image_size * BYTES_PER_PIXEL
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not known here: nothing to compare with
        return
    if needed > total:
        raise UserError(f"dataset 'shapes': num_images={num_images} at image_size={image_size} "
                        f"needs about {needed / 2**30:.1f} GiB of memory, more than this "
                        f"machine's {total / 2**30:.1f} GiB; expected fewer or smaller images")


@register_loader("shapes", needs_data_dir=False)
def load_shapes(split: str, data_dir: str | Path | None = None, num_images: int | None = None,
                image_size: int = 64, seed: int = 0, with_masks: bool = True) -> CaptionSplit:
    """Generate (or fetch from this process's cache) one split of `shapes`.

    Args:
        split: `"train"`, `"valid"` or `"test"`.
        data_dir: ignored; the images are generated in memory.
        num_images: how many images (defaults: train 8000, valid 500, test 500).
        image_size: the side of the square images in pixels (at least 32).
        seed: the dataset seed; each split draws from its own stream of it.
        with_masks: keep each object's `(S, S)` bool mask.

    Returns:
        A `CaptionSplit` of in-memory `(S, S, 3)` uint8 images with objects.

    Example:
    >>> split = load_shapes("train", num_images=4)
    >>> split[0].captions[0]  # doctest: +SKIP
    'a small red circle to the left of a blue square'
    """
    num_images = int_option("shapes", "num_images", num_images, minimum=1, optional=True)
    image_size = int_option("shapes", "image_size", image_size, minimum=32)
    seed = int_option("shapes", "seed", seed, minimum=0)
    with_masks = bool_option("shapes", "with_masks", with_masks)
    num_images = DEFAULT_SIZES[split] if num_images is None else num_images
    _check_memory(num_images, image_size)
    records = _generate(split, num_images, image_size, seed, with_masks)
    return CaptionSplit(name="shapes", split=split, records=list(records))
