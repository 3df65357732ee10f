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

import json
from pathlib import Path

from captioner.datasets.records import CaptionSplit, file_records, register_loader, require_file
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
    path = require_file(data_dir / file, "a Karpathy split file")
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)["images"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: expected a Karpathy split JSON with an 'images' list "
                        f"({exc!r:.120})") from None
    root = Path(images_dir) if images_dir is not None else data_dir
    wanted = _SPLITS[split]

    chosen = []
    for n, entry in enumerate(entries):
        try:
            if entry["split"] not in wanted:
                continue
            filename = entry["filename"]
            captions = [s["raw"].strip() for s in entry["sentences"]]
        except (KeyError, TypeError):
            raise DataError(f"{path}: image #{n} lacks 'split', 'filename' or "
                            "'sentences'[].'raw'") from None
        image_id = entry.get("cocoid", entry.get("imgid", filename))
        chosen.append((image_id, root / entry.get("filepath", "") / filename, captions, None))
        if max_images is not None and len(chosen) >= int(max_images):
            break
    if not chosen:
        raise DataError(f"{path}: no images in split {'/'.join(wanted)}")
    return file_records("karpathy", split, chosen, check_images=check_images)
