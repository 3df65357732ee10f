"""The translators' prepared folder (`common.training.prepare`): pairs as bucketed token ids.

`prepare_translation(config, out_dir)` writes it; `TranslationLayout` is how a split lies in
its `.npz` and is served (NumPy only: this module imports neither TensorFlow nor Keras; the
writing imports them when it runs).

A split (`B` pairs of a bucket, `W` its padded length, a multiple of `bucket_width`): for each
bucket, `source.W`, `target_in.W`, `target_out.W` (and `source_copy.W` for a copying
translator), `(B, W)` int32 padded with 0 — exactly the ids `seq2seq.datasets.make_dataset`
batches (`<start>` + target; target + `<end>`). A pair goes to the bucket of
`max(len(source), len(target_in))` rounded up to the width. The manifest adds
`"bucket_width"`. Beside `valid.npz`, `valid.examples.json` holds the validation pairs as the
validation decodes and scores them, in the split's order (`seq2seq.validation`): sources,
their tokens and the raw references.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import DataError, UserError
from common.training.prepare import PreparedLayout, check_ids, damaged, write_folder, writing
from common.training.run_dir import RunDir

BUCKET_WIDTH = 8
FIELDS = ("source", "target_in", "target_out", "source_copy")


class TranslationLayout(PreparedLayout):
    """Pairs in buckets of one padded width each (see the module docstring)."""

    vocabularies = {"source": RunDir.source_vocab, "target": RunDir.target_vocab}
    target = "target_out"

    def num_examples(self, arrays: dict[str, np.ndarray]) -> int:
        return sum(len(v) for k, v in arrays.items() if k.startswith("source."))

    def one_pass(self, arrays: dict[str, np.ndarray], rng: np.random.Generator,
                 chunks: Callable[[np.ndarray], list[np.ndarray]]
                 ) -> Iterator[dict[str, np.ndarray]]:
        """Each bucket's rows cut into batches, the batches of all buckets in a random
        order."""
        plan = []
        for bound in sorted(int(k.split(".")[1]) for k in arrays if k.startswith("source.")):
            order = rng.permutation(len(arrays[f"source.{bound}"]))
            plan += [(bound, rows) for rows in chunks(order)]
        for j in rng.permutation(len(plan)):
            bound, rows = plan[j]
            yield {field: arrays[f"{field}.{bound}"][rows]
                   for field in FIELDS if f"{field}.{bound}" in arrays}

    def check_split(self, file: Path, arrays: dict[str, np.ndarray],
                    sizes: dict[str, int]) -> None:
        buckets = sorted(int(key.split(".")[1]) for key in arrays
                         if key.startswith("source.") and key.split(".")[1].isdigit())
        if not buckets:
            raise damaged(file, "no source.W arrays")
        for width in buckets:
            rows = len(arrays[f"source.{width}"])
            copying = f"source_copy.{width}" in arrays
            extended = sizes["target"] + width  # a copy id: V + its first source position
            check_ids(file, arrays, f"source.{width}", sizes["source"], rows, width)
            check_ids(file, arrays, f"target_in.{width}", sizes["target"], rows, width)
            check_ids(file, arrays, f"target_out.{width}",
                      extended if copying else sizes["target"], rows, width)
            if copying:
                check_ids(file, arrays, f"source_copy.{width}", extended, rows, width)


LAYOUT = TranslationLayout()


def prepare_translation(config: Any, out_dir: str | os.PathLike,
                        bucket_width: int = BUCKET_WIDTH, verbose: int = 1) -> Path:
    """Write the prepared folder of a translator run config (`seq2seq.config.RunConfig`).

    The pairs come from `seq2seq.datasets.load_pairs` (training pairs longer than
    `config.length_limit` tokens dropped, as `seq2seq train` does) and the vocabularies from
    `build_vocabularies`. A `valid` split is written when the dataset has one.

    Returns:
        The folder.
    """
    from seq2seq.datasets import build_vocabularies, load_pairs

    data = config.data
    if data.dataset == "tsv" and not data.data:
        raise UserError("--dataset tsv needs --data PATH (a .tsv file or a folder of them)")
    if getattr(data, "vocab", "word") != "word":
        raise UserError(f"--vocab {data.vocab}: the prepared folder holds word vocabularies "
                        "only for now; prepare with --vocab word")

    def pairs_of(split: str):
        return load_pairs(data.dataset, path=data.data, split=split, reverse=data.reverse,
                          max_length=config.length_limit, seed=0, lowercase=data.lowercase)

    train = pairs_of("train")
    if not train.sources:
        raise DataError(f"no training pairs in {data.data or data.dataset}")
    source_vocab, target_vocab = build_vocabularies(train, min_count=data.min_count,
                                                    max_size=data.max_vocab)
    splits = {"train": train}
    if data.dataset != "tsv" or Path(data.data).is_dir():
        try:
            valid = pairs_of("valid")
        except UserError:
            valid = None
        if valid is not None and valid.sources:
            splits["valid"] = valid

    def split_arrays(out: Path):
        for name, pairs in splits.items():
            if name == "valid":  # what the validation decodes, on either backend
                from seq2seq.validation import pairs_from_data, write_pairs

                with writing(out):
                    write_pairs(pairs_from_data(config, None, None), out)
            arrays = _translation_arrays(pairs, source_vocab, target_vocab, config.model.copy)
            yield name, _bucketed(arrays, bucket_width), {"examples": len(pairs.sources),
                                                          "dropped": pairs.dropped}

    out, summary = write_folder(out_dir, config, LAYOUT,
                                {"source": source_vocab, "target": target_vocab}, split_arrays,
                                bucket_width=bucket_width)
    if verbose:
        print(f"prepared {out}: " + ", ".join(f"{k} {v['examples']} pairs"
                                              for k, v in summary.items())
              + f"; vocabularies {len(source_vocab)} source, {len(target_vocab)} target tokens",
              flush=True)
    return out


def _translation_arrays(pairs: Any, source_vocab: Any, target_vocab: Any,
                        copy: bool) -> dict[str, list[list[int]]]:
    """The id rows of `seq2seq.datasets.make_dataset`, unpadded."""
    start, end = target_vocab.start_id, target_vocab.end_id
    targets = [target_vocab.encode(tokens) for tokens in pairs.target_tokens]
    rows = {"source": [source_vocab.encode(t) for t in pairs.source_tokens],
            "target_in": [[start] + ids for ids in targets]}
    if copy:
        from seq2seq.copying import copy_ids, extend_target_ids

        targets = [extend_target_ids(target, source, target_vocab)
                   for source, target in zip(pairs.source_tokens, pairs.target_tokens)]
        rows["source_copy"] = [copy_ids(t, target_vocab) for t in pairs.source_tokens]
    rows["target_out"] = [ids + [end] for ids in targets]
    return rows


def _bucketed(rows: dict[str, list[list[int]]], width: int) -> dict[str, np.ndarray]:
    """`{f"{field}.{W}": (B_W, W) int32}`: each pair padded to its bucket's length `W`."""
    lengths = [max(len(s), len(t)) for s, t in zip(rows["source"], rows["target_in"])]
    bounds = np.array([width * max(1, math.ceil(n / width)) for n in lengths])
    arrays = {}
    for bound in sorted(set(bounds.tolist())):
        members = np.flatnonzero(bounds == bound)
        for field, field_rows in rows.items():
            padded = np.zeros((len(members), bound), np.int32)
            for i, index in enumerate(members):
                padded[i, : len(field_rows[index])] = field_rows[index]
            arrays[f"{field}.{bound}"] = padded
    return arrays
