"""`csv`: captions listed in a CSV (or TSV) file, one (image path, caption) row each.

Rows that share an image give that image several captions; images keep the order in which
they first appear. Paths are relative to `images_dir` (default: the CSV file's folder).

Example `train.csv`:
```
image,caption
photos/dog.jpg,A dog runs on the grass.
photos/dog.jpg,A brown dog playing outside.
photos/cat.jpg,A cat sleeps on a sofa.
```
"""

from __future__ import annotations

import csv
from pathlib import Path

from captioner.datasets.records import (
    CaptionSplit,
    bool_option,
    file_records,
    option_error,
    register_loader,
    require_file,
    str_option,
)
from common.errors import DataError


@register_loader("csv")
def load_csv(split: str, data_dir: Path, file: str | None = None, image_column: str = "image",
             caption_column: str = "caption", images_dir: str | None = None,
             delimiter: str | None = None, check_images: bool = True) -> CaptionSplit:
    """Load one split from a CSV file of image paths and captions.

    Args:
        split: `"train"`, `"valid"` or `"test"`.
        data_dir: the folder of the CSV files.
        file: the CSV file, relative to `data_dir` (default `f"{split}.csv"`, else
            `f"{split}.tsv"`).
        image_column: the column with image paths.
        caption_column: the column with captions.
        images_dir: the folder image paths are relative to (default: the CSV's folder).
        delimiter: the field separator (default: tab for `.tsv`, else comma).
        check_images: skip images that do not decode, checked cheaply at load time
            (`records.check_image`; counted in `skipped`).

    Returns:
        A `CaptionSplit` of file images without objects.
    """
    file = str_option("csv", "file", file, optional=True)
    image_column = str_option("csv", "image_column", image_column)
    caption_column = str_option("csv", "caption_column", caption_column)
    images_dir = str_option("csv", "images_dir", images_dir, optional=True)
    delimiter = str_option("csv", "delimiter", delimiter, optional=True)
    if delimiter is not None and (len(delimiter) != 1 or delimiter in '"\r\n'):
        raise option_error("csv", "delimiter", delimiter, "one character other than a quote "
                           "mark or a line break (a tab: delimiter='\"\\t\"')")
    check_images = bool_option("csv", "check_images", check_images)
    if file is None:
        file = f"{split}.csv" if not (data_dir / f"{split}.tsv").is_file() else f"{split}.tsv"
    path = require_file(data_dir / file, f"the {split} captions CSV")
    if delimiter is None:
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    root = Path(images_dir) if images_dir is not None else path.parent

    captions: dict[str, list[str]] = {}
    # A tab-separated file has no quoting: a caption that starts with a quote mark is text (read
    # with CSV quoting, it swallowed the rows after it into one caption). "utf-8-sig": the byte
    # order mark a spreadsheet writes before the header is not part of its first column's name.
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f, delimiter=delimiter, quoting=quoting)
            header = reader.fieldnames or []
            for column in (image_column, caption_column):
                if column not in header:
                    raise DataError(f"{path}: no column {column!r}; the columns are "
                                    f"{', '.join(map(repr, header)) or 'none'}")
            for row in reader:
                line = reader.line_num
                if row.get(None):  # more fields than the header: a delimiter in a caption
                    fields = len(header) + len(row[None])
                    holds = "a tab" if delimiter == "\t" else repr(delimiter)
                    raise DataError(f"{path}:{line}: {fields} fields, the header has "
                                    f"{len(header)}; quote a caption that holds {holds}")
                image, caption = row[image_column], row[caption_column]
                if not image or caption is None or not caption.strip():
                    raise DataError(f"{path}:{line}: expected an image path and a caption, got "
                                    f"{image!r}, {caption!r}")
                captions.setdefault(image, []).append(caption.strip())
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"{path}: not a readable CSV ({exc})") from None
    if not captions:
        raise DataError(f"{path}: no caption rows")
    items = ((image, root / image, caps, None) for image, caps in captions.items())
    return file_records("csv", split, items, check_images=check_images)
