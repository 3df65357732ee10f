"""`karpathy`: the Karpathy & Fei-Fei (2015) split files for COCO, Flickr8k and Flickr30k.

`dataset_coco.json` (or `dataset_flickr8k.json`, `dataset_flickr30k.json`) lists every image
with its file, its split (`train`, `restval`, `val`, `test`) and its sentences:
```
{"images": [{"filepath": "val2014", "filename": "COCO_val2014_000000391895.jpg",
             "split": "test", "cocoid": 391895,
             "sentences": [{"raw": "A man riding a bike.", "tokens": [...]}, ...]}, ...]}
```
`train` is `train` + `restval` (the usual 113k COCO training images), `valid` is `val`.
Images are found at `images_dir / filepath / filename` (`filepath` is absent for Flickr).
"""

from __future__ import annotations

from pathlib import Path

from captioner.datasets.records import (
    CaptionSplit,
    bool_option,
    file_records,
    int_option,
    read_json,
    register_loader,
    require_file,
    str_option,
)
from common.errors import DataError

_SPLITS = {"train": ("train", "restval"), "valid": ("val",), "test": ("test",)}


@register_loader("karpathy")
def load_karpathy(split: str, data_dir: Path, file: str = "dataset_coco.json",
                  images_dir: str | None = None, max_images: int | None = None,
                  check_images: bool = True) -> CaptionSplit:
    """Load one split of a Karpathy split file.

    Args:
        split: `"train"` (train + restval), `"valid"` (val) or `"test"`.
        data_dir: the folder of the split file.
        file: the split file, relative to `data_dir`.
        images_dir: the folder `filepath/filename` is relative to (default: `data_dir`).
        max_images: keep only the first images of the split (quick experiments).
        check_images: skip images that do not decode, checked cheaply at load time
            (`records.check_image`; counted in `skipped`).

    Returns:
        A `CaptionSplit` of file images in file order; `image_id` is `cocoid` when present,
        else `imgid`, else the file name; captions are the `raw` sentences.
    """
    file = str_option("karpathy", "file", file)
    images_dir = str_option("karpathy", "images_dir", images_dir, optional=True)
    max_images = int_option("karpathy", "max_images", max_images, minimum=1, optional=True)
    check_images = bool_option("karpathy", "check_images", check_images)
    path = require_file(data_dir / file, "a Karpathy split file")
    data = read_json(path, "a Karpathy split file, a JSON object with an 'images' list")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        got = f"'images' = {data.get('images')!r:.60}" if isinstance(data, dict) else repr(data)
        raise DataError(f"{path}: expected a Karpathy split file, a JSON object with an "
                        f"'images' list; got {got:.60}")
    entries = data["images"]
    root = Path(images_dir) if images_dir is not None else data_dir
    wanted = _SPLITS[split]

    chosen = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("split"), str):
            raise DataError(f"{path}: images[{n}]: expected an object with a 'split' as text, "
                            f"got {entry!r:.60}")
        if entry["split"] not in wanted:
            continue
        chosen.append(_record(path, n, entry, root))
        if max_images is not None and len(chosen) >= max_images:
            break
    if not chosen:
        raise DataError(f"{path}: no images in split {'/'.join(wanted)}")
    return file_records("karpathy", split, chosen, check_images=check_images)


def _record(path: Path, n: int, entry: dict, root: Path) -> tuple:
    """`(image_id, image path, captions, None)` of the entry `images[n]`, checked."""
    def fail(key: str, expected: str) -> DataError:
        return DataError(f"{path}: images[{n}]: expected {key!r} as {expected}, got "
                         f"{entry.get(key)!r:.60}")

    filename, folder = entry.get("filename"), entry.get("filepath", "")
    if not isinstance(filename, str) or not filename:
        raise fail("filename", "a file name")
    if not isinstance(folder, str):
        raise fail("filepath", "a folder name")
    sentences = entry.get("sentences")
    if not isinstance(sentences, list) or not sentences or not all(
            isinstance(s, dict) and isinstance(s.get("raw"), str) and s["raw"].strip()
            for s in sentences):
        raise fail("sentences", "a non-empty list of objects with a 'raw' text")
    key = "cocoid" if "cocoid" in entry else "imgid"
    image_id = entry.get(key, filename)
    if isinstance(image_id, bool) or not isinstance(image_id, (int, str)):
        raise fail(key, "an integer")
    return image_id, root / folder / filename, [s["raw"].strip() for s in sentences], None
