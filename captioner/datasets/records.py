"""The in-memory form of a caption dataset: per-image records, a split, and the registry.

Every loader (`shapes`, `coco`, `karpathy`, `flickr8k`, `csv`) returns a `CaptionSplit`:
a list of `ImageRecord`s, each an image (an array in memory or a file path), its captions
and, when the dataset has them, its objects (a category, a box and maybe a mask). The
tf.data pipeline (`captioner.datasets.pipeline`) and the metrics read only this form.
"""

from __future__ import annotations

import inspect
import logging
import operator
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.config import load_json
from common.errors import DataError, UserError
from common.registry import Registry

logger = logging.getLogger(__name__)

DATASETS = Registry("dataset")
SPLITS = ("train", "valid", "test")
_SPLIT_ALIASES = {"val": "valid", "validation": "valid", "dev": "valid"}

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class ObjectAnnotation:
    """One object in an image.

    Args:
        category: what the object is, as words: `"red circle"` (shapes), `"dog"` (COCO).
        box: `(x0, y0, x1, y1)` in pixels of the original image; `x1`, `y1` exclusive.
        mask: `(H, W)` bool array of the object's pixels, or None when unknown.
        attributes: extra labels; shapes gives `{"shape", "colour", "size"}`.
    """

    category: str
    box: Box
    mask: np.ndarray | None = field(default=None, compare=False, repr=False)
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageRecord:
    """One image and its captions; exactly one of `image` and `path` is set.

    Args:
        image_id: the dataset's id for the image.
        captions: its reference captions.
        height, width: the original image size in pixels.
        image: `(H, W, 3)` uint8 pixels held in memory (shapes).
        path: the image file (real data).
        objects: the annotated objects, empty when the dataset has none.
    """

    image_id: str | int
    captions: tuple[str, ...]
    height: int
    width: int
    image: np.ndarray | None = field(default=None, compare=False, repr=False)
    path: str | None = None
    objects: tuple[ObjectAnnotation, ...] = ()


@dataclass
class CaptionSplit:
    """One split of a caption dataset: a list of `ImageRecord`s.

    Args:
        name: the dataset's registry name.
        split: `"train"`, `"valid"` or `"test"`.
        records: the images, in a fixed order.
        skipped: images left out because they could not be read.
    """

    name: str
    split: str
    records: list[ImageRecord]
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> ImageRecord:
        return self.records[index]

    def __iter__(self) -> Iterator[ImageRecord]:
        return iter(self.records)

    @property
    def num_captions(self) -> int:
        return sum(len(r.captions) for r in self.records)

    @property
    def in_memory(self) -> bool:
        """True when every record holds its pixels (shapes), False when they are files."""
        return bool(self.records) and all(r.image is not None for r in self.records)

    def references(self) -> dict[str | int, list[str]]:
        """`{image_id: [caption, ...]}`, the form `common.metrics.caption_scores` takes."""
        return {r.image_id: list(r.captions) for r in self.records}

    def by_id(self, image_id: str | int) -> ImageRecord:
        if not hasattr(self, "_index"):
            self._index = {r.image_id: i for i, r in enumerate(self.records)}
        try:
            return self.records[self._index[image_id]]
        except KeyError:
            raise UserError(f"no image {image_id!r} in {self.name}/{self.split}") from None

    def __repr__(self) -> str:
        return (f"CaptionSplit({self.name!r}, {self.split!r}, images={len(self)}, "
                f"captions={self.num_captions}, skipped={self.skipped})")


def normalize_split(split: str) -> str:
    """`"val"`, `"validation"`, `"dev"` -> `"valid"`; anything outside `SPLITS` is an error."""
    name = _SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise UserError(f"Unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    return name


def load_split(name: str, split: str, data_dir: str | os.PathLike | None = None,
               **options: Any) -> CaptionSplit:
    """Load one split of the dataset registered as `name`.

    Args:
        name: a name in `DATASETS` (`shapes`, `coco`, `karpathy`, `flickr8k`, `csv`).
        split: `"train"`, `"valid"` (or `"val"`, `"dev"`) or `"test"`.
        data_dir: the dataset's folder; not used by `shapes`.
        **options: the loader's own options (see each loader).

    Returns:
        A `CaptionSplit`.

    Raises:
        UserError: an unknown name or split, an option the loader does not take, or a
            missing data directory (`DataError`).

    Example:
    >>> split = load_split("shapes", "valid", num_images=10)
    >>> len(split), split[0].image.shape
    (10, (64, 64, 3))
    """
    loader = DATASETS.get(name)
    check_options(name, options)
    split = normalize_split(split)
    if loader.needs_data_dir:
        if data_dir is None:
            raise UserError(f"dataset {name!r} needs a data directory; got none")
        data_dir = Path(data_dir)
        if not data_dir.is_dir():
            raise DataError(f"{data_dir}: no such data directory for dataset {name!r}")
    return loader(split, data_dir, **options)


def dataset_options(name: str) -> list[str]:
    """The options (keyword arguments after `split` and `data_dir`) the loader `name` takes."""
    parameters = list(inspect.signature(DATASETS.get(name)).parameters.values())[2:]
    return [p.name for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def check_options(name: str, options: dict[str, Any]) -> None:
    """A `UserError` naming the options the loader `name` does not take, and those it does.

    (A preset's or a run's options belong to its own dataset: `num_images` is a `shapes`
    option, which `coco` would otherwise fail on with a `TypeError`.)
    """
    accepted = dataset_options(name)
    unknown = [key for key in options if key not in accepted]
    if unknown:
        raise UserError(
            f"dataset {name!r} has no option {', '.join(map(repr, unknown))} (given with "
            f"--data-option or a preset); its options are: {', '.join(accepted) or 'none'}")


def require_file(path: Path, what: str) -> Path:
    """`path` if it is a file, else a DataError naming it and what it should hold."""
    if not path.is_file():
        raise DataError(f"{path}: no such file ({what})")
    return path


def require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise DataError(f"{path}: no such directory ({what})")
    return path


def read_text(path: Path) -> str:
    """The text of a UTF-8 file (a byte order mark is dropped), else a DataError naming it."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:  # a folder, no permission
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_json(path: Path, what: str) -> Any:
    """The JSON value in `path`, else a DataError naming it and `what` it should hold."""
    return load_json(path, what, DataError)


# -- checked options: the values `--data-option KEY=VALUE` (read as JSON) or a preset gives ----

def option_error(dataset: str, name: str, value: Any, expected: str) -> UserError:
    """The error for a loader's option given a value it cannot take."""
    return UserError(f"dataset {dataset!r} option {name}: expected {expected}, got {value!r:.60}")


def int_option(dataset: str, name: str, value: Any, minimum: int | None = None,
               optional: bool = False) -> int | None:
    """`value` as an int (None passes when `optional`), else a UserError naming the option.

    A float with no fraction counts (`1e3` is read as 1000.0); `2.7`, `"abc"` and `true` do not.
    """
    expected = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
    expected += " or null" if optional else ""
    if value is None and optional:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (bool, np.bool_)):
        raise option_error(dataset, name, value, expected)
    try:
        number = operator.index(value)  # an int, a NumPy integer
    except TypeError:
        raise option_error(dataset, name, value, expected) from None
    if minimum is not None and number < minimum:
        raise option_error(dataset, name, value, expected)
    return number


def bool_option(dataset: str, name: str, value: Any, optional: bool = False) -> bool | None:
    """`value` as a bool (None passes when `optional`), else a UserError naming the option.

    Also `"true"`/`"false"` in any case and `0`/`1`; any other string is refused (`"maybe"`,
    or `"False"`, was true).
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise option_error(dataset, name, value, "true or false" + (" or null" if optional else ""))


def str_option(dataset: str, name: str, value: Any, optional: bool = False) -> str | None:
    """`value` as non-empty text (None passes when `optional`), else a UserError naming the
    option. A whole number counts as its digits (`year=2017` is read as a number)."""
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value:
        return value
    raise option_error(dataset, name, value, "non-empty text" + (" or null" if optional else ""))


#: How far from a JPEG's end its end-of-image marker (FF D9) is looked for: some writers pad
#: or append a little after it.
JPEG_TAIL = 4096


def check_image(path: str | os.PathLike) -> tuple[tuple[int, int] | None, str]:
    """`((height, width), "")` for an image file that decodes, else `(None, why not)`.

    Cheap: PIL reads the header and verifies the file's structure without decoding pixels
    (for PNG that checks every chunk's CRC, so a PNG cut short is caught). A JPEG's structure
    is not verified that way, so its last bytes are read too: one cut short (an interrupted
    download or copy) has no end-of-image marker there, and only then are its pixels decoded
    to confirm, as TensorFlow would fail to decode them.
    """
    from PIL import Image

    if not Path(path).exists():
        return None, "no such file"
    try:
        with Image.open(path) as image:
            width, height = image.size
            kind = image.format
            image.verify()
    except Exception:  # PIL raises many kinds for broken files
        return None, "not an image"
    if kind in ("JPEG", "MPO") and not _ends_jpeg(path):  # MPO: a phone's multi-picture JPEG
        try:
            with Image.open(path) as image:
                image.load()
        except Exception as exc:  # "image file is truncated", a corrupt scan
            return None, f"a JPEG cut short, its pixels do not decode ({exc})"
    return (height, width), ""


def _header_size(path: str | os.PathLike) -> tuple[int, int]:
    """`(height, width)` from an image file's header; `(0, 0)` when it cannot be read."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            width, height = image.size
    except Exception:  # left to the decoder, which names it
        return 0, 0
    return height, width


def _ends_jpeg(path: str | os.PathLike) -> bool:
    """Whether a JPEG file's end-of-image marker (FF D9) is among its last `JPEG_TAIL` bytes,
    after the start of its image data: one inside the header (the end of an EXIF thumbnail)
    does not count."""
    with open(path, "rb") as file:
        start = _jpeg_scan_start(file)
        if start is None:
            return False
        file.seek(0, os.SEEK_END)
        size = file.tell()
        file.seek(max(0, size - JPEG_TAIL))
        tail = file.read()
    found = tail.rfind(b"\xff\xd9")
    return found >= 0 and size - len(tail) + found >= start


def _jpeg_scan_start(file) -> int | None:
    """The offset where a JPEG's first scan (its image data) starts, found by walking the
    header's segments by their lengths (so an APP1 segment's EXIF thumbnail is skipped whole);
    None when the file ends before it."""
    file.seek(2)  # after the start-of-image marker
    while True:
        marker = file.read(2)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        code = marker[1]
        while code == 0xFF:  # fill bytes before a marker
            byte = file.read(1)
            if not byte:
                return None
            code = byte[0]
        if code == 0x01 or 0xD0 <= code <= 0xD7:  # markers without a length
            continue
        length = file.read(2)
        if len(length) < 2:
            return None
        end = file.tell() + int.from_bytes(length, "big") - 2
        if code == 0xDA:  # start of scan: the image data follows its header
            return end
        file.seek(end)


def file_records(name: str, split: str, items: Iterable[tuple[Any, Path, list[str], Any]],
                 check_images: bool = True) -> CaptionSplit:
    """Build a split of file images, skipping (and counting) those that cannot be read.

    Args:
        items: `(image_id, path, captions, objects_or_None)`; the objects, if any, are a
            callable `(height, width) -> tuple[ObjectAnnotation, ...]` or a tuple.
        check_images: check each image cheaply with PIL (`check_image`); off, sizes are
            reported as 0 and a file that does not decode is left to the input pipeline.
    """
    records, skipped, missing = [], 0, 0
    for image_id, path, captions, objects in items:
        if check_images:
            size, why = check_image(path)
            if size is None:
                skipped += 1
                missing += why == "no such file"
                logger.warning("skipping %s: %s", path, why)
                continue
        elif objects:  # the boxes need the image's size: from its header, without checks
            size = _header_size(path)
        else:
            size = (0, 0)
        if callable(objects):
            objects = objects(*size)
        records.append(ImageRecord(image_id=image_id, captions=tuple(captions), height=size[0],
                                   width=size[1], path=str(path), objects=tuple(objects or ())))
    if skipped:
        logger.warning("%s/%s: skipped %d unreadable image(s) of %d%s", name, split, skipped,
                       skipped + len(records),
                       f" ({missing} missing)" if missing else "")
    if not records:
        raise DataError(f"{name}/{split}: no readable images (skipped {skipped})")
    return CaptionSplit(name=name, split=split, records=records, skipped=skipped)


def register_loader(name: str, needs_data_dir: bool = True):
    """Register `fn(split, data_dir, **options) -> CaptionSplit` in `DATASETS` as `name`."""

    def decorator(fn):
        fn.needs_data_dir = needs_data_dir
        DATASETS.add(name, fn)
        return fn

    return decorator
