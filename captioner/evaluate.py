"""Scoring a trained captioner on a dataset split: `captioner evaluate` without the parsing.

`evaluate(run_dir, dataset, split)` captions every image of the split with beam search and
reports, on a 0–100 scale: BLEU-1..4, METEOR, ROUGE-L and CIDEr (pycocoevalcap, through
`common.metrics.caption_scores`), attention correctness and its uniform-attention baseline
(for datasets with object boxes: `shapes`, COCO instances), and on `shapes` the object and
relation accuracy of the captions.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from captioner.inference import CaptionerRun

MATCHERS = {"shapes": "shapes", "coco": "coco", "karpathy": "coco"}


def generate(run: CaptionerRun, split, beam_size: int = 3, batch_size: int = 32,
             **kwargs) -> dict[Any, Any]:
    """Caption every image of `split`: `{image_id: Caption}` in split order."""
    from captioner.datasets.pipeline import make_image_dataset

    captions = {}
    for batch in make_image_dataset(split, run.image_size, batch_size):
        for index, caption in zip(batch["index"].numpy(),
                                  run.caption_batch(batch["image"], beam_size=beam_size,
                                                    **kwargs)):
            captions[split[int(index)].image_id] = caption
    return captions


def evaluate(run_dir: str | os.PathLike | CaptionerRun, dataset: str | None = None,
             split: str = "test", data_dir: str | None = None, beam_size: int = 3,
             batch_size: int = 32, options: dict[str, Any] | None = None,
             metrics: tuple[str, ...] = ("bleu", "meteor", "rouge", "cider")) -> dict[str, Any]:
    """Scores of a run on `dataset`/`split` (the run's own dataset by default).

    Returns:
        `{"BLEU-1", ..., "CIDEr", "attention_correctness", "attention_uniform_baseline",
        "attention_words", ["object_accuracy", "relation_accuracy"], "images"}`; scores on
        the 0–100 scale, except the counts. A metric that cannot be computed is left out.
    """
    from captioner.datasets import load_split
    from common.metrics.attention_correctness import corpus_attention_correctness
    from common.metrics.caption_metrics import caption_scores

    run = run_dir if isinstance(run_dir, CaptionerRun) else CaptionerRun(run_dir)
    data = run.config.data
    dataset = dataset or data.dataset
    if options is None:
        options = dict(data.options) if dataset == data.dataset else {}
    if data_dir is None and dataset == data.dataset:
        data_dir = data.data_dir
    records = load_split(dataset, split, data_dir, **options)
    captions = generate(run, records, beam_size, batch_size)
    hypotheses = {image_id: c.text for image_id, c in captions.items()}
    results: dict[str, Any] = {"images": len(hypotheses)}
    results.update(caption_scores(records.references(), hypotheses, metrics=metrics))

    if dataset in MATCHERS and any(r.objects for r in records):
        items = []
        for image_id, caption in captions.items():
            record = records.by_id(image_id)
            items.append((caption.words, caption.attention, record.objects,
                          (record.height, record.width)))
        correctness = corpus_attention_correctness(items, MATCHERS[dataset], run.grid_shape)
        results["attention_correctness"] = 100 * correctness.correctness
        results["attention_uniform_baseline"] = 100 * correctness.baseline
        results["attention_words"] = correctness.count
    if dataset == "shapes":
        from captioner.datasets.shapes_metrics import shapes_scores

        results.update(shapes_scores(hypotheses, records))  # already 0–100
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in results.items()}


def format_results(results: dict[str, Any]) -> str:
    """One `name  value` line per score, values on the 0–100 scale with two decimals."""
    lines = []
    for name, value in results.items():
        if isinstance(value, float | np.floating):
            lines.append(f"{name:<28}{value:8.2f}")
        else:
            lines.append(f"{name:<28}{value!s:>8}")
    return "\n".join(lines)
