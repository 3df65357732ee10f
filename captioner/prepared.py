"""The captioner's prepared folder (`common.training.prepare`): images and their captions.

`prepare_captions(config, out_dir)` writes it; `CaptionLayout` is how a split lies in its
`.npz` and is served (NumPy only: this module imports neither TensorFlow nor Keras; the
writing imports them when it runs).

A split (`N` images, `C` captions): `images` `(N, H, W, 3)` uint8, resized to the encoder's
`image_size` by `captioner.datasets.make_image_dataset` and rounded; `owner` `(C,)` int32 the
image of each caption; `caption_in` and `caption_out` `(C, max_length)` int32, as
`captioner.datasets.make_dataset(pad_to_max_length=True)` gives them. Features are not cached:
a frozen encoder (`cache_features`) runs forward on the images at every step.

Beside `valid.npz`, `valid.references.json` holds what the validation scores against
(`captioner.validation`): `{"image_ids": [...], "references": [[caption, ...], ...]}`, one
entry per image of `valid.npz`, in its order, the captions as the dataset wrote them (the ids
would have lost the words outside the vocabulary). The other files are as they were without it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from common.config import atomic_write_text
from common.errors import DataError, UserError
from common.training.prepare import PreparedLayout, check_ids, damaged, write_folder, writing
from common.training.run_dir import RunDir


class CaptionLayout(PreparedLayout):
    """Images and the captions that belong to them (see the module docstring).

    Training on JAX drops each pass's last `< batch_size` captions (other ones each pass):
    hard attention moves its baseline by the batch's mean reward, which padding rows would
    pull towards zero.
    """

    vocabularies = {"words": RunDir.vocab}
    target = "caption_out"
    train_remainder = "drop"

    def num_examples(self, arrays: dict[str, np.ndarray]) -> int:
        return len(arrays["owner"])

    def one_pass(self, arrays: dict[str, np.ndarray], rng: np.random.Generator,
                 chunks: Callable[[np.ndarray], list[np.ndarray]]
                 ) -> Iterator[dict[str, np.ndarray]]:
        """The captions in a random order, each with its image as float32 in [0, 255]."""
        for rows in chunks(rng.permutation(len(arrays["owner"]))):
            yield {"image": arrays["images"][arrays["owner"][rows]].astype(np.float32),
                   "caption_in": arrays["caption_in"][rows],
                   "caption_out": arrays["caption_out"][rows]}

    def check_split(self, file: Path, arrays: dict[str, np.ndarray],
                    sizes: dict[str, int]) -> None:
        images, owner = arrays.get("images"), arrays.get("owner")
        if images is None or owner is None or images.ndim != 4 or owner.ndim != 1:
            raise damaged(file, "expected images (N, H, W, 3) and owner (C,)")
        if owner.size and (owner.min() < 0 or owner.max() >= len(images)):
            raise damaged(file, f"owner names images up to {owner.max()}; it has {len(images)}")
        for key in ("caption_in", "caption_out"):
            check_ids(file, arrays, key, sizes["words"], len(owner))


LAYOUT = CaptionLayout()
#: The reference captions of a split's images (`valid` only), beside its `.npz`.
REFERENCES = "{split}.references.json"


def prepare_captions(config: Any, out_dir: str | os.PathLike, batch_size: int = 64,
                     verbose: int = 1) -> Path:
    """Write the prepared folder of a captioner run config (`captioner.config.CaptionerRunConfig`).

    The split comes from `captioner.datasets.load_split`, the vocabulary from
    `build_vocabulary`, the caption ids from `encode_captions` and the resized images from
    `make_image_dataset` (images it cannot decode are left out with their captions).

    Returns:
        The folder.
    """
    from captioner.datasets import load_split
    from captioner.datasets.pipeline import build_vocabulary
    from captioner.train import check_config

    check_config(config)
    data = config.data
    train = load_split(data.dataset, "train", data.data_dir, **data.options)
    vocab = build_vocabulary(train, min_count=data.min_count)
    splits = {"train": train}
    try:
        valid = load_split(data.dataset, "valid", data.data_dir, **data.options)
    except UserError:
        valid = None
    if valid is not None and len(valid) and valid.num_captions:
        splits["valid"] = valid

    def split_arrays(out: Path):
        for name, split in splits.items():
            arrays, kept = _caption_arrays(split, vocab, config.encoder.image_size,
                                           data.max_length, batch_size)
            if name == "valid":
                _save_references(out / REFERENCES.format(split=name), split, kept)
            yield name, arrays, {"examples": int(len(arrays["owner"])),
                                 "images": int(len(arrays["images"]))}

    out, summary = write_folder(out_dir, config, LAYOUT, {"words": vocab}, split_arrays,
                                bucket_width=None)
    if verbose:
        print(f"prepared {out}: " + ", ".join(
            f"{k} {v['images']} images, {v['examples']} captions" for k, v in summary.items())
            + f"; vocabulary {len(vocab)} tokens", flush=True)
    return out


def _save_references(path: Path, split: Any, kept: list[int]) -> None:
    """Write the reference captions of the images `kept` (indices into `split`), whole or not
    at all."""
    records = [split[index] for index in kept]
    data = {"image_ids": [r.image_id for r in records],
            "references": [list(r.captions) for r in records]}
    with writing(path.parent):
        atomic_write_text(path, json.dumps(data, ensure_ascii=False) + "\n")


def load_references(folder: str | os.PathLike, split: str,
                    images: int) -> tuple[list[Any], dict[Any, list[str]]]:
    """The image ids of `split`'s `images` images, in order, and `{image_id: [caption, ...]}`
    (`common.metrics.caption_scores`'s references), from `SPLIT.references.json`.

    Raises:
        UserError: no such file (a folder prepared before it was written).
        DataError: it cannot be read, or does not hold one entry per image.
    """
    path = Path(folder) / REFERENCES.format(split=split)
    if not path.is_file():
        raise UserError(f"{folder}: no reference captions for validation ({path.name}; the "
                        "folder was prepared before they were written); run `prepare` again, "
                        "or train with --validation-examples 0")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ids, references = data["image_ids"], data["references"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise damaged(path, f"cannot be read ({reason})") from None
    if (not isinstance(ids, list) or not isinstance(references, list)
            or len(ids) != images or len(references) != images
            or not all(isinstance(r, list) and r and all(isinstance(c, str) for c in r)
                       for r in references)):
        raise damaged(path, f"expected image_ids and references for each of the {images} "
                            f"images of {split}.npz, each with at least one caption")
    return ids, dict(zip(ids, references))


def _caption_arrays(split: Any, vocab: Any, image_size: Any, max_length: int,
                    batch_size: int) -> tuple[dict[str, np.ndarray], list[int]]:
    from captioner.datasets.pipeline import encode_captions, make_image_dataset

    images, kept = [], []
    for batch in make_image_dataset(split, image_size, batch_size):
        images.append(np.clip(np.round(batch["image"].numpy()), 0, 255).astype(np.uint8))
        kept.extend(int(i) for i in batch["index"].numpy())
    if not kept:
        raise DataError(f"{split.name}/{split.split}: no image could be read")
    position = {index: i for i, index in enumerate(kept)}
    owner, captions = [], []
    for index in kept:
        for caption in split[index].captions:
            owner.append(position[index])
            captions.append(caption)
    ids = encode_captions(captions, vocab).to_list()
    caption_in = np.zeros((len(ids), max_length), np.int32)
    caption_out = np.zeros((len(ids), max_length), np.int32)
    for i, row in enumerate(ids):
        row = row[: max_length - 1]
        caption_in[i, : len(row) + 1] = [vocab.start_id] + row
        caption_out[i, : len(row) + 1] = row + [vocab.end_id]
    return {"images": np.concatenate(images), "owner": np.asarray(owner, np.int32),
            "caption_in": caption_in, "caption_out": caption_out}, kept
