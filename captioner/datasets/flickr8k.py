"""`flickr8k`: Flickr8k (Hodosh et al. 2013) in its original distribution.

Layout of `data_dir`:
```
Flickr8k.token.txt              "<image>.jpg#<n>\\t<caption>", five captions per image
Flickr_8k.trainImages.txt       6000 image file names, one a line
Flickr_8k.devImages.txt         1000
Flickr_8k.testImages.txt        1000
Flicker8k_Dataset/*.jpg         the images (the archive's spelling; Flickr8k_Dataset/ works too)
```
"""

from __future__ import annotations

from pathlib import Path

from captioner.datasets.records import (
    CaptionSplit,
    bool_option,
    file_records,
    int_option,
    read_text,
    register_loader,
    require_file,
    str_option,
)
from common.errors import DataError

LISTS = {"train": "Flickr_8k.trainImages.txt", "valid": "Flickr_8k.devImages.txt",
         "test": "Flickr_8k.testImages.txt"}
IMAGE_DIRS = ("Flicker8k_Dataset", "Flickr8k_Dataset", "images")


def read_tokens(path: Path) -> dict[str, list[str]]:
    """`{image file name: [caption, ...]}` from a `Flickr8k.token.txt` file."""
    captions: dict[str, list[str]] = {}
    # Split at "\n" only: a caption may hold other characters Python counts as line breaks.
    for line_number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name, hash_, _ = key.partition("#")
        if not tab or not hash_ or not name.strip() or not caption.strip():
            raise DataError(f"{path}:{line_number}: expected '<image>#<n><TAB><caption>', "
                            f"got {line.strip()[:80]!r}")
        captions.setdefault(name.strip(), []).append(caption.strip())
    if not captions:
        raise DataError(f"{path}: no captions; expected lines '<image>#<n><TAB><caption>'")
    return captions


@register_loader("flickr8k")
def load_flickr8k(split: str, data_dir: Path, images_dir: str | None = None,
                  token_file: str = "Flickr8k.token.txt", max_images: int | None = None,
                  check_images: bool = True) -> CaptionSplit:
    """Load one split of Flickr8k.

    Args:
        split: `"train"`, `"valid"` (the dev list) or `"test"`.
        data_dir: the Flickr8k folder (see the module docstring).
        images_dir: the image folder (default: the first of `Flicker8k_Dataset/`,
            `Flickr8k_Dataset/`, `images/` in `data_dir` that exists, else `data_dir`).
        token_file: the captions file, relative to `data_dir`.
        max_images: keep only the first images of the split list.
        check_images: skip images that do not decode, checked cheaply at load time
            (`records.check_image`; counted in `skipped`).

    Returns:
        A `CaptionSplit` of file images in list order; `image_id` is the file name.
    """
    images_dir = str_option("flickr8k", "images_dir", images_dir, optional=True)
    token_file = str_option("flickr8k", "token_file", token_file)
    max_images = int_option("flickr8k", "max_images", max_images, minimum=1, optional=True)
    check_images = bool_option("flickr8k", "check_images", check_images)
    captions = read_tokens(require_file(data_dir / token_file, "Flickr8k captions"))
    list_path = require_file(data_dir / LISTS[split], f"the Flickr8k {split} image list")
    names = [n.strip() for n in read_text(list_path).split("\n") if n.strip()]
    if not names:
        raise DataError(f"{list_path}: no image names; expected one file name a line")
    missing = [n for n in names if n not in captions]
    if missing:
        raise DataError(f"{list_path}: {len(missing)} image(s) without captions in "
                        f"{token_file}, e.g. {missing[0]!r}")
    if max_images is not None:
        names = names[:max_images]
    if images_dir is not None:
        root = Path(images_dir)
    else:
        root = next((data_dir / d for d in IMAGE_DIRS if (data_dir / d).is_dir()), data_dir)
    items = ((name, root / name, captions[name], None) for name in names)
    return file_records("flickr8k", split, items, check_images=check_images)
