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
    bool_option,
    file_records,
    int_option,
    read_json,
    register_loader,
    require_dir,
    require_file,
    str_option,
)
from common.errors import DataError

DEFAULT_YEARS = {"train": "train2017", "valid": "val2017", "test": "val2017"}


def _read(path: Path, kind: str):
    """A `pycocotools.coco.COCO` of the `kind` (`"captions"`, `"instances"`) annotation file
    `path`, without its prints; a DataError naming the file and what is wrong otherwise.

    The JSON is read and its shape checked here (`coco_captions.check_annotations`), then
    pycocotools indexes it: its own reading asserts, or fails with a bare KeyError or TypeError
    on the first entry it cannot index, or lets one through to fail later in this module.
    """
    from pycocotools.coco import COCO

    from common.datasets.coco_captions import check_annotations

    data = check_annotations(read_json(path, f"a COCO {kind} file"), str(path), kind)
    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def _objects(instances, image_id: int) -> tuple[ObjectAnnotation, ...]:
    objects = []
    for ann in instances.imgToAnns.get(image_id, []):
        if ann.get("iscrowd", 0):
            continue
        x, y, w, h = ann["bbox"]
        category = instances.cats[ann["category_id"]]
        objects.append(ObjectAnnotation(
            category=category["name"], box=(float(x), float(y), float(x + w), float(y + h)),
            attributes={"supercategory": str(category.get("supercategory", ""))}))
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
    year = str_option("coco", "year", year, optional=True) or DEFAULT_YEARS[split]
    captions_file = str_option("coco", "captions_file", captions_file, optional=True)
    instances_file = str_option("coco", "instances_file", instances_file, optional=True)
    images_dir = str_option("coco", "images_dir", images_dir, optional=True)
    with_objects = bool_option("coco", "with_objects", with_objects, optional=True)
    max_images = int_option("coco", "max_images", max_images, minimum=1, optional=True)
    check_images = bool_option("coco", "check_images", check_images)
    captions_path = require_file(
        data_dir / (captions_file or f"annotations/captions_{year}.json"), "COCO captions")
    images = require_dir(Path(images_dir) if images_dir else data_dir / year, "COCO images")
    instances_path = data_dir / (instances_file or f"annotations/instances_{year}.json")
    if with_objects is None:
        with_objects = instances_path.is_file() and split != "train"
    instances = (_read(require_file(instances_path, "COCO instances"), "instances")
                 if with_objects else None)

    coco = _read(captions_path, "captions")
    ids = sorted(i for i in coco.imgs if coco.imgToAnns.get(i))
    if not ids:
        raise DataError(f"{captions_path}: no images with captions")
    if max_images is not None:
        ids = ids[:max_images]

    def items():
        for image_id in ids:
            info = coco.imgs[image_id]
            captions = [ann["caption"].strip() for ann in coco.imgToAnns[image_id]]
            objects = _objects(instances, image_id) if instances is not None else ()
            yield image_id, images / info["file_name"], captions, objects

    return file_records("coco", split, items(), check_images=check_images)
