"""The captioner's validation, the same on both backends: the first `validation_examples`
images of the validation split, captioned (`common.training.validation`) and scored with
pycocoevalcap's CIDEr and BLEU-4 on the simple tokenizer (no Java start each epoch: comparable
from epoch to epoch, not with `captioner evaluate`'s PTB-tokenized figures), and on `shapes`
also against each image's scene (`SHAPES_VALIDATION`: object and relation accuracy, facts).

The images are the 8-bit pixels the prepared folder stores (`make_image_dataset`'s, rounded):
the TensorFlow trainer reads them from the run's data (`images_from_data`), the JAX trainer
from the prepared folder's `valid.npz` and `valid.references.json` (`images_from_prepared`);
a `shapes` split, which is generated, is generated again for its scenes. Ids become captions
in NumPy (`caption_text`, what `CaptionerRun` writes: the words without `<pad>`, `<start>`,
`<end>`, an `<unk>` kept, `detokenize`d).

Dimensions: `N` images, `T` caption steps, `L` attention regions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.decoding.decoded import Decoded
from common.text.detokenizer import detokenize
from common.text.specials import END_ID, PAD_ID, START_ID
from common.training.validation import Validation

#: The shapes validation's scores of what captions state (`shapes_metrics.shapes_scores`).
SHAPES_VALIDATION = ("object_accuracy", "relation_accuracy", "facts")


@dataclass(frozen=True)
class ValidationImages:
    """Validation images as captioned and scored: `images (N, H, W, 3)` uint8, their
    `image_ids`, each id's reference captions, and the split (None when it cannot be read
    here: a scene's facts are then not scored)."""

    images: np.ndarray
    image_ids: list[Any]
    references: dict[Any, list[str]]
    split: Any = None


def caption_text(ids: Any, vocabulary: list[str]) -> str:
    """The caption of `ids` as `CaptionerRun` writes it (specials but `<unk>` dropped,
    `detokenize`d)."""
    return detokenize([vocabulary[int(i)] for i in ids
                       if int(i) not in (PAD_ID, START_ID, END_ID)])


def read_split(config: Any, split: str = "valid") -> Any:
    """The run's `split` (`captioner.datasets.load_split`)."""
    from captioner.datasets import load_split

    data = config.data
    return load_split(data.dataset, split, data.data_dir, **data.options)


def images_from_data(config: Any, split: Any, examples: int) -> ValidationImages | None:
    """The first `examples` images of `split` in `make_image_dataset`'s order, rounded to 8
    bits as the prepared folder holds them (None: no image could be read)."""
    from captioner.datasets.pipeline import make_image_dataset

    images, ids = [], []
    for batch in make_image_dataset(split, config.encoder.image_size, batch_size=64):
        for image, index in zip(batch["image"].numpy(), batch["index"].numpy()):
            if len(images) < examples:
                images.append(np.clip(np.round(image), 0, 255).astype(np.uint8))
                ids.append(split[int(index)].image_id)
        if len(images) >= examples:
            break
    if not images:
        return None
    return ValidationImages(np.stack(images), ids, split.references(), split)


def images_from_prepared(config: Any, prepared: Any, examples: int) -> ValidationImages:
    """The first `examples` images of a prepared folder's `valid` split, with their references
    (`valid.references.json`); a `shapes` split is generated again for its scenes.

    Raises:
        UserError: the folder has a `valid` split but no reference captions (prepared before
            they were written: run `prepare` again, or train with `validation_examples` 0).
        DataError: its reference file cannot be read or does not match its images.
    """
    from captioner.config import FACT_DATASETS
    from captioner.prepared import load_references

    images = prepared.splits["valid"]["images"]
    image_ids, references = load_references(prepared.path, "valid", len(images))
    split = read_split(config) if config.data.dataset in FACT_DATASETS else None
    return ValidationImages(images[:examples], image_ids[:examples], references, split)


def make_validation(config: Any, examples: ValidationImages, vocabulary: list[str],
                    grid_shape: tuple[int, int] | None = None) -> Validation:
    """The `Validation` of `examples` for a run of `config` (`CaptionerRunConfig`); with
    `grid_shape`, the scores carry TensorBoard's strip of the first image's attention."""
    from captioner.config import FACT_DATASETS
    from common.metrics.caption_metrics import caption_scores

    ids = examples.image_ids

    def initial_state(model: Any, batch: dict[str, Any], length: int) -> Any:
        from keras import ops

        return model.initial_decoding_state(ops.cast(batch["image"], "float32"))

    def score(decoded: Decoded) -> dict[str, Any]:
        captions = {}
        for row, image_id in enumerate(ids):
            n = int(decoded.lengths[row, 0])
            captions[image_id] = caption_text(decoded.tokens[row, 0, :n], vocabulary)
        scores = caption_scores(examples.references, captions, metrics=("bleu", "cider"),
                                tokenizer="simple")
        metrics: dict[str, Any] = {"cider": scores["CIDEr"], "bleu_4": scores["BLEU-4"]}
        if config.data.dataset in FACT_DATASETS and examples.split is not None:
            from captioner.datasets.shapes_metrics import shapes_scores

            said = shapes_scores(captions, examples.split)
            metrics.update({name: said[name] for name in SHAPES_VALIDATION
                            if math.isfinite(said[name])})
        metrics["samples"] = "\n\n".join(
            f"{i}: {captions[i]}  \n(reference: {examples.references[i][0]})" for i in ids[:3])
        if grid_shape is not None:
            steps = int(decoded.lengths[0, 0])
            metrics["attention"] = attention_strip(examples.images[0],
                                                   decoded.attention[0, 0, :steps], grid_shape)
        return metrics

    return Validation({"image": examples.images}, initial_state, START_ID, END_ID,
                      config.decoder.max_length, score)


def attention_strip(image: np.ndarray, attention: np.ndarray,
                    grid_shape: tuple[int, int]) -> np.ndarray:
    """`(H, W * (1 + T), 3)` floats in [0, 1]: the image, then each word's attention over it."""
    height, width = image.shape[:2]
    panels = [np.asarray(image, np.float32) / 255.0]
    for weights in attention:
        grid = np.asarray(weights, np.float32).reshape(grid_shape)
        grid = grid / max(float(grid.max()), 1e-9)
        up = np.kron(grid, np.ones((-(-height // grid.shape[0]), -(-width // grid.shape[1]))))
        panels.append(panels[0] * (0.25 + 0.75 * up[:height, :width, None]))
    return np.concatenate(panels, axis=1)
