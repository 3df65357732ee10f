"""`coco`: MS-COCO captions from the official annotation files, read with pycocotools.

Layout of `data_dir` (the official download, unpacked):
```
annotations/captions_train2017.json     captions (required)
annotations/instances_train2017.json    object boxes (optional; for attention correctness)
train2017/*.jpg                         the images
```
and the same with `val2017`. By default the `train` split reads `train2017` and `valid` and
`test` read `val2017` (COCO's test images have no public captions; for the usual
train/valid/test division of COCO use the `karpathy` dataset).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from captioner.datasets.records import (
    CaptionSplit,
    ObjectAnnotation,
    file_records,
    register_loader,
    require_dir,
    require_file,
)
from common.errors import DataError

DEFAULT_YEARS = {"train": "train2017", "valid": "val2017", "test": "val2017"}


def _read(path: Path):
    """A `pycocotools.coco.COCO` of `path`, without its prints; DataError if unreadable."""
    from pycocotools.coco import COCO

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(str(path))
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise DataError(f"{path}: not a COCO annotation file ({exc!r:.200})") from None


def _objects(instances, image_id: int) -> tuple[ObjectAnnotation, ...]:
    objects = []
    for ann in instances.imgToAnns.get(image_id, []):
        if ann.get("iscrowd", 0):
            continue
        x, y, w, h = ann["bbox"]
        name = instances.cats[ann["category_id"]]["name"]
        objects.append(ObjectAnnotation(
            category=name, box=(float(x), float(y), float(x + w), float(y + h)),
            attributes={"supercategory": instances.cats[ann["category_id"]]["supercategory"]}))
    return tuple(objects)


@register_loader("coco")
def load_coco(split: str, data_dir: Path, year: str | None = None,
              captions_file: str | None = None, instances_file: str | None = None,
              images_dir: str | None = None, with_objects: bool | None = None,
              max_images: int | None = None, check_images: bool = True) -> CaptionSplit:
    """Load one split of COCO captions (and, optionally, object boxes).

    Args:
        split: `"train"`, `"valid"` or `"test"`.
        data_dir: the COCO folder (see the module docstring).
        year: the annotation set, e.g. `"train2017"`, `"val2014"` (default: by split).
        captions_file: the captions JSON (default `annotations/captions_{year}.json`).
        instances_file: the instances JSON (default `annotations/instances_{year}.json`).
        images_dir: the image folder (default `data_dir / year`).
        with_objects: read object boxes from the instances file; None reads them when the
            file exists and the split is not `train` (the train file is large and boxes are
            for evaluation). True requires the file.
        max_images: keep only the first images by id (quick experiments).
        check_images: skip images that do not decode, checked cheaply at load time
            (`records.check_image`; counted in `skipped`).

    Returns:
        A `CaptionSplit` of file images ordered by image id; `image_id` is COCO's integer id,
        objects (non-crowd instances) have the category name and `(x0, y0, x1, y1)` box.
    """
    year = year or DEFAULT_YEARS[split]
    captions_path = require_file(
        data_dir / (captions_file or f"annotations/captions_{year}.json"), "COCO captions")
    images = require_dir(Path(images_dir) if images_dir else data_dir / year, "COCO images")
    instances_path = data_dir / (instances_file or f"annotations/instances_{year}.json")
    if with_objects is None:
        with_objects = instances_path.is_file() and split != "train"
    instances = _read(require_file(instances_path, "COCO instances")) if with_objects else None

    coco = _read(captions_path)
    ids = sorted(i for i in coco.imgs if coco.imgToAnns.get(i))
    if not ids:
        raise DataError(f"{captions_path}: no images with captions")
    if max_images is not None:
        ids = ids[: int(max_images)]

    def items():
        for image_id in ids:
            info = coco.imgs[image_id]
            captions = [ann["caption"].strip() for ann in coco.imgToAnns[image_id]]
            objects = _objects(instances, image_id) if instances is not None else ()
            yield image_id, images / info["file_name"], captions, objects

    return file_records("coco", split, items(), check_images=check_images)
