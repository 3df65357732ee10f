"""Caption datasets: the embedded `shapes` set, real-data loaders and the tf.data pipeline.

Every dataset is loaded by name into a `CaptionSplit`, a list of per-image `ImageRecord`s;
`make_dataset` turns a split into batches for training. Dimensions: `B` batch, `T` caption
steps, `H`, `W` image height and width.

Loading (NumPy and Pillow only; no TensorFlow needed):

```python
DATASETS: Registry                  # "shapes", "coco", "karpathy", "flickr8k", "csv"
SPLITS = ("train", "valid", "test")  # "val"/"dev" are accepted as "valid"

load_split(name: str, split: str, data_dir: str | None = None, **options) -> CaptionSplit
# shapes:   options num_images=None (defaults: train 8000, valid 500, test 500), image_size=64,
#           seed=0, with_masks=True; data_dir is ignored (generated in memory, cached)
# coco:     data_dir holds annotations/captions_{year}.json (+ instances_{year}.json for boxes)
#           and the image folder {year}/; options year="train2017" (default: train -> train2017,
#           valid/test -> val2017), captions_file=None, images_dir=None, check_images=True
# karpathy: data_dir holds dataset_coco.json (or dataset_flickr8k.json ...) and the images;
#           options file="dataset_coco.json", images_dir=None (default: data_dir); "train" is
#           train + restval
# flickr8k: data_dir holds Flickr8k.token.txt, Flickr_8k.{train,dev,test}Images.txt and
#           Flicker8k_Dataset/ (or images_dir=...)
# csv:      options file (default f"{split}.csv"), image_column="image",
#           caption_column="caption", images_dir=None (paths relative to the CSV's folder);
#           several rows with the same image give several captions
# An option the loader does not take raises UserError naming it and the loader's options
# (`records.dataset_options(name)`); a value it cannot take (max_images=-1, check_images=maybe)
# raises UserError naming the option, the value and what it takes (`records.int_option`,
# `bool_option`, `str_option`). A missing folder or file, or one that is not what the loader
# reads (not UTF-8, JSON of the wrong shape, a malformed line), raises DataError naming it.
# Unreadable images are skipped with a warning and counted in `CaptionSplit.skipped` (checked
# cheaply with PIL at load time: `records.check_image`, which also catches a PNG or JPEG cut
# short).

@dataclass(frozen=True)
class ObjectAnnotation:
    category: str                 # shapes: "red circle"; coco: "dog"
    box: tuple[float, float, float, float]  # (x0, y0, x1, y1) pixels of the original image,
                                  # x1/y1 exclusive
    mask: np.ndarray | None = None          # (H, W) bool, or None
    attributes: dict[str, str] = {}         # shapes: {"shape", "colour", "size"}

@dataclass(frozen=True)
class ImageRecord:
    image_id: str | int
    captions: tuple[str, ...]
    height: int
    width: int
    image: np.ndarray | None = None    # (H, W, 3) uint8 in memory (shapes) ...
    path: str | None = None            # ... or a file on disk (real data)
    objects: tuple[ObjectAnnotation, ...] = ()

@dataclass
class CaptionSplit:
    name: str; split: str; records: list[ImageRecord]; skipped: int = 0
    len(split), split[i], iter(split)  # over records
    num_captions: int
    references() -> dict[image_id, list[str]]   # for common.metrics.caption_scores
    by_id(image_id) -> ImageRecord
```

Pipeline (TensorFlow; imported lazily from `captioner.datasets.pipeline`):

```python
build_vocabulary(split, min_count=1, max_size=None, lowercase=True) -> common.text.Vocabulary

make_dataset(split, vocab, image_size=None, batch_size=32, shuffle=False, seed=None,
             max_length=None, repeat=False, lowercase=True, drop_remainder=False,
             pad_to_max_length=False, num_parallel_calls=tf.data.AUTOTUNE) -> tf.data.Dataset
# One element per (image, caption) pair, padded batches of dicts:
#   "image":       (B, H, W, 3) float32 in [0, 255] (resized bilinearly, antialiased, to
#                  image_size, an int or (H, W); None keeps in-memory images at their native
#                  size; file images need a size)
#   "caption_in":  (B, T) int32, <start> w1 ... wn, then 0 (<pad>)
#   "caption_out": (B, T) int32, w1 ... wn <end>, then 0 (<pad>)
# Captions are NFKC-normalized, tokenized with common.text.tokenize (lowercase) and cut to
# max_length - 1 words, so T <= max_length (the steps a decoder generates, <end> included).
# T is the longest caption in the batch (or max_length with pad_to_max_length=True).
# Deterministic for a fixed seed; shuffle=True without a seed shuffles differently each run.
# A file that the load check passed but TensorFlow cannot decode is dropped with a warning.

make_image_dataset(split, image_size=None, batch_size=32, num_parallel_calls=AUTOTUNE)
    -> tf.data.Dataset
# One element per image, in split order, for captioning / evaluation:
#   {"image": (B, H, W, 3) float32 in [0, 255], "index": (B,) int32 index into split.records}
```

Shapes metrics (`captioner.datasets.shapes_metrics`; no TensorFlow):

```python
parse_caption(caption: str) -> ParsedCaption  # .objects (NamedObject(colour, shape, size|None),)
                                              # .relations ((i, "left"|"right"|"above"|"below", j),)
object_accuracy(captions: Sequence[str], objects: Sequence[Sequence[ObjectAnnotation]]) -> float
relation_accuracy(captions, objects) -> float  # fraction of stated relations that hold (nan: none)
shapes_scores(hypotheses: dict[image_id, str], split: CaptionSplit) -> dict[str, float]
# {"object_accuracy": 0-100, "relation_accuracy": 0-100 or nan, "relations_stated": per caption,
#  "objects_named_twice": captions, "objects_named_twice_rate": 0-100}
```

Caption metrics live in `common.metrics.caption_metrics.caption_scores(references,
hypotheses)` (BLEU-1..4, METEOR, ROUGE-L, CIDEr, 0-100) and
`common.metrics.attention_correctness` (`attention_correctness`, `corpus_attention_correctness`
with the `"shapes"` and `"coco"` word matchers).
"""

from __future__ import annotations

from typing import Any

# Importing these registers the loaders; they import nothing heavy at module level.
from captioner.datasets import coco, csv_captions, flickr8k, karpathy, shapes  # noqa: E402,F401,I001
from captioner.datasets.records import (
    DATASETS,
    SPLITS,
    CaptionSplit,
    ImageRecord,
    ObjectAnnotation,
    load_split,
)

_PIPELINE = ("make_dataset", "make_image_dataset", "build_vocabulary")


def __getattr__(name: str) -> Any:
    # The pipeline imports TensorFlow: load it only when asked for.
    if name in _PIPELINE:
        from captioner.datasets import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATASETS",
    "SPLITS",
    "CaptionSplit",
    "ImageRecord",
    "ObjectAnnotation",
    "load_split",
    *_PIPELINE,
]
