"""`coco-captions`: MS-COCO captions and images from images.cocodataset.org, as `coco` reads them.

Sizes and SHA-256s are those recorded for these addresses by TensorFlow Datasets
(`tensorflow_datasets/url_checksums/coco.txt`); cocodataset.org publishes none itself.
Annotations are CC-BY 4.0; each image has its own Flickr licence (the `license` field of its
entry, listed under `licenses` in the same file).

`prepare` writes, for each `split` (`train`, `val`) of `year` (2014 or 2017):
```
OUT/annotations/captions_{split}{year}.json     (+ instances_{split}{year}.json with instances)
OUT/{split}{year}/*.jpg
```
the layout `captioner train --dataset coco --data-dir OUT` reads (2014 needs
`--data-option year=train2014`, and `year=val2014` for `evaluate`). The annotations come from
`annotations_trainval{year}.zip` (253 MB). The images come from `{split}{year}.zip` (val2017:
816 MB, train2017: 19 GB), or, with `max_images=N`, one by one from each image's own address
(`coco_url`), for the first N images with captions by id; the annotation files then hold only
those images. Single images have no recorded checksum: each must open as an image of the width
and height its entry gives.
"""

from __future__ import annotations

import json
import math
import shutil
import zipfile
from pathlib import Path
from typing import Any

from PIL import Image

from common.datasets.download import Fetcher, RemoteFile
from common.errors import DataError

HOST = "http://images.cocodataset.org"
YEARS = ("2014", "2017")
SPLITS = ("train", "val")

# url -> (size in bytes, SHA-256), as recorded by TensorFlow Datasets.
_RECORDED = {
    "annotations/annotations_trainval2014.zip": (
        252_872_794, "031296bbc80c45a1d1f76bf9a90ead27e94e99ec629208449507a4917a3bf009"),
    "annotations/annotations_trainval2017.zip": (
        252_907_541, "113a836d90195ee1f884e704da6304dfaaecff1f023f49b6ca93c4aaae470268"),
    "zips/train2014.zip": (
        13_510_573_713, "ede4087e640bddba550e090eae701092534b554b42b05ac33f0300b984b31775"),
    "zips/val2014.zip": (
        6_645_013_297, "fe9be816052049c34717e077d9e34aa60814a55679f804cd043e3cbee3b9fde0"),
    "zips/train2017.zip": (
        19_336_861_798, "69a8bb58ea5f8f99d24875f21416de2e9ded3178e903f1f7603e283b9e06d929"),
    "zips/val2017.zip": (
        815_585_330, "4f7e2ccb2866ec5041993c9cf2a952bbed69647b115d0f74da7ce8f4bef82f05"),
}
FILES = {path: RemoteFile(f"{HOST}/{path}", *recorded) for path, recorded in _RECORDED.items()}


def annotations_archive(year: str) -> RemoteFile:
    return FILES[f"annotations/annotations_trainval{year}.zip"]


def images_archive(split: str, year: str) -> RemoteFile:
    return FILES[f"zips/{split}{year}.zip"]


KINDS = {"captions": "caption", "instances": "bbox"}  # kind -> what its annotations have


def check_annotations(data: Any, where: str, kind: str = "captions") -> dict:
    """`data` if it has the shape of a COCO annotation file of `kind`, else a DataError naming
    `where` and the first entry that does not fit.

    Both kinds hold `images` (each an `id` and a `file_name`) and `annotations` (each an `id`
    and an `image_id`). A `"captions"` annotation has a `caption`; an `"instances"` one a
    `bbox` `[x, y, width, height]` and a `category_id` listed in `categories` (each an `id`
    and a `name`). Other keys are not looked at.
    """
    lists = ("images", "annotations") + (("categories",) if kind == "instances" else ())
    if not isinstance(data, dict):
        raise DataError(f"{where}: expected a COCO {kind} file, a JSON object with "
                        f"{' and '.join(map(repr, lists))} lists; got {data!r:.60}")
    other_kind = "instances" if kind == "captions" else "captions"
    wanted, other = KINDS[kind], KINDS[other_kind]
    annotations = data.get("annotations")
    first = annotations[0] if isinstance(annotations, list) and annotations else None
    if isinstance(first, dict) and other in first and wanted not in first:
        raise DataError(f"{where}: its annotations have a {other!r} and no {wanted!r}, as in a "
                        f"COCO {other_kind} file; expected a COCO {kind} file")
    for key in lists:
        if key not in data:
            raise DataError(f"{where}: no {key!r} list; expected a COCO {kind} file")
        if not isinstance(data[key], list):
            raise DataError(f"{where}: expected {key!r} as a list (a COCO {kind} file), got "
                            f"{data[key]!r:.60}")
    for index, image in enumerate(data["images"]):
        _check_entry(where, "images", index, image, ints=("id",), texts=("file_name",))
    image_ids = {image["id"] for image in data["images"]}
    if kind == "captions":
        for index, ann in enumerate(annotations):
            _check_entry(where, "annotations", index, ann, ints=("id", "image_id"),
                         texts=("caption",))
            _check_image_id(where, index, ann, image_ids)
        return data
    for index, category in enumerate(data["categories"]):
        _check_entry(where, "categories", index, category, ints=("id",), texts=("name",))
    categories = {category["id"] for category in data["categories"]}
    for index, ann in enumerate(annotations):
        _check_entry(where, "annotations", index, ann, ints=("id", "image_id", "category_id"))
        _check_image_id(where, index, ann, image_ids)
        box = ann.get("bbox")
        if (not isinstance(box, list) or len(box) != 4
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           and math.isfinite(v) for v in box)):
            raise DataError(f"{where}: annotations[{index}]: expected 'bbox' as [x, y, width, "
                            f"height], four numbers, got {box!r:.60}")
        if ann["category_id"] not in categories:
            raise DataError(f"{where}: annotations[{index}]: its category_id "
                            f"{ann['category_id']} is not among the 'categories'")
    return data


def _check_image_id(where: str, index: int, ann: dict, image_ids: set[int]) -> None:
    """A DataError unless annotation `index` belongs to one of the file's images (it would be
    dropped without a word: nothing reads an annotation of no image)."""
    if ann["image_id"] not in image_ids:
        raise DataError(f"{where}: annotations[{index}]: its image_id {ann['image_id']} is not "
                        "among the 'images'; expected every annotation to belong to an image "
                        "of the file")


def _check_entry(where: str, key: str, index: int, entry: Any, ints: tuple[str, ...] = (),
                 texts: tuple[str, ...] = ()) -> None:
    """A DataError unless `entry` (`key[index]`) is an object whose `ints` are integers and
    whose `texts` are non-empty text."""
    if not isinstance(entry, dict):
        raise DataError(f"{where}: {key}[{index}]: expected an object, got {entry!r:.60}")
    for name in ints:
        value = entry.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise DataError(f"{where}: {key}[{index}]: expected {name!r} as an integer, got "
                            f"{value!r:.60}")
    for name in texts:
        value = entry.get(name)
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{where}: {key}[{index}]: expected {name!r} as non-empty text, "
                            f"got {value!r:.60}")


def _read_json(archive: zipfile.ZipFile, member: str) -> dict:
    try:
        data = json.loads(archive.read(member))
    except KeyError:
        raise DataError(f"{archive.filename}: no {member} in the archive") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{archive.filename}: {member} is not JSON ({exc})") from None
    except RecursionError:  # Python's parser recurses once per bracket
        raise DataError(f"{archive.filename}: {member} is JSON nested too deeply to "
                        "read") from None
    except ValueError as exc:  # a number of thousands of digits
        raise DataError(f"{archive.filename}: {member} is not readable JSON "
                        f"({str(exc).split(';')[0]})") from None
    kind = "instances" if Path(member).name.startswith("instances") else "captions"
    return check_annotations(data, f"{archive.filename}: {member}", kind)


def _subset(annotations: dict, image_ids: set[int]) -> dict:
    """The annotation file restricted to `image_ids` (other keys kept as they are)."""
    subset = dict(annotations)
    subset["images"] = [image for image in annotations["images"] if image["id"] in image_ids]
    subset["annotations"] = [ann for ann in annotations["annotations"]
                             if ann["image_id"] in image_ids]
    return subset


def _write_json(path: Path, data: dict) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data), encoding="utf-8")
    part.replace(path)


def _check_image(path: Path, width: int | None, height: int | None) -> None:
    """A DataError (the file removed) unless `path` opens as an image of `width` x `height`
    (when its entry gives them)."""
    try:
        with Image.open(path) as image:
            size = image.size
            image.verify()
    except Exception as exc:  # PIL raises many kinds for a damaged file
        path.unlink(missing_ok=True)
        raise DataError(f"{path}: not a readable image ({exc}); removed, run again") from None
    if (width, height) != (None, None) and size != (width, height):
        path.unlink(missing_ok=True)
        raise DataError(f"{path}: {size[0]}x{size[1]} pixels, expected {width}x{height} as its "
                        "COCO entry says; removed, run again")


def _extract_images(archive: Path, folder: str, out: Path, keep: set[str] | None) -> int:
    """Extract `folder/*.jpg` (only the names in `keep`, when given) under `out`."""
    count = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith(f"{folder}/"):
                    continue
                base = name[len(folder) + 1:]
                if "/" in base or (keep is not None and base not in keep):
                    continue
                target = out / folder / base
                if not (target.is_file() and target.stat().st_size == info.file_size):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as source, open(target, "wb") as sink:
                        shutil.copyfileobj(source, sink)
                count += 1
    except zipfile.BadZipFile:
        raise DataError(f"{archive}: not a zip archive") from None
    return count


def prepare(fetcher: Fetcher, out: Path, year: str = "2017",
            splits: tuple[str, ...] = SPLITS, max_images: int | None = None,
            instances: bool = False) -> dict:
    """Fetch the annotations and images of `splits` and lay them out under `out`."""
    if year not in YEARS:
        raise DataError(f"COCO year {year!r}; choose one of: {', '.join(YEARS)}")
    if max_images is not None and max_images < 1:
        raise DataError(f"--max-images must be at least 1, got {max_images}")
    kinds = ("captions", "instances") if instances else ("captions",)
    summary: dict = {"year": year, "max_images": max_images, "splits": {}}
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(fetcher.get(annotations_archive(year))) as annotations_zip:
        for split in dict.fromkeys(splits):
            if split not in SPLITS:
                raise DataError(f"COCO split {split!r}; choose from: {', '.join(SPLITS)}")
            folder = f"{split}{year}"
            captions = _read_json(annotations_zip, f"annotations/captions_{folder}.json")
            captioned = {ann["image_id"] for ann in captions["annotations"]}
            images = sorted((i for i in captions["images"] if i["id"] in captioned),
                            key=lambda image: image["id"])[:max_images]
            ids = {image["id"] for image in images}
            for kind in kinds:
                data = captions if kind == "captions" else _read_json(
                    annotations_zip, f"annotations/{kind}_{folder}.json")
                _write_json(out / "annotations" / f"{kind}_{folder}.json",
                            data if max_images is None else _subset(data, ids))
            if max_images is None:
                count = _extract_images(fetcher.get(images_archive(split, year)), folder, out,
                                        keep=None)
            else:
                for image in images:
                    url = image.get("coco_url") or f"{HOST}/{folder}/{image['file_name']}"
                    path = fetcher.get(RemoteFile(url), into=out / folder, checked=False)
                    _check_image(path, image.get("width"), image.get("height"))
                count = len(images)
            summary["splits"][folder] = {
                "images": count,
                "captions": sum(ann["image_id"] in ids for ann in captions["annotations"]),
            }
    return summary
