"""Scoring a trained captioner on a dataset split: `captioner evaluate` without the parsing.

`evaluate(run_dir, dataset, split)` captions every image of the split with beam search and
reports, on a 0–100 scale: BLEU-1..4, METEOR, ROUGE-L and CIDEr (pycocoevalcap, through
`common.metrics.caption_scores`, with the tokenizer that ran), attention correctness and its
uniform-attention baseline (for datasets with object boxes: `shapes`, COCO instances), and on
`shapes` the object and relation accuracy of the captions and how many name an object twice.

Attention correctness is given twice (`common.metrics.attention_correctness`): on the
generated captions, where only the objects the model chose to name are scored, and as Liu et
al. (2017) define it, on the reference captions read under teacher forcing (`teacher_forced`),
where every reference word that names an object of the image is scored. Each comes with the
number of words scored and of object words skipped (naming no object of the image the matcher
could single out: on generated captions, mostly objects that are not there).

Dimensions: `B` images, `N` captions, `T` caption steps, `L` image regions.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

from captioner.config import BEAM_SIZE
from captioner.inference import CaptionerRun

logger = logging.getLogger(__name__)

MATCHERS = {"shapes": "shapes", "coco": "coco", "karpathy": "coco"}


def generate(run: CaptionerRun, split, beam_size: int = BEAM_SIZE, batch_size: int = 32,
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


def teacher_forced(run: CaptionerRun, split, batch_size: int = 32
                   ) -> list[tuple[Any, list[str], np.ndarray]]:
    """The attention of `run` reading every reference caption of `split` under teacher forcing.

    Each caption is tokenized as training tokenizes it (lowercased, `common.text`), and the
    decoder reads `<start> w_1 ... w_{n-1}` (a word missing from the vocabulary as `<unk>`),
    so that step `t` is the one asked for `w_t`; no word is cut off, however long the caption.
    The image's annotations are computed once for all its captions.

    Returns:
        `[(record, words, alpha (n, L)), ...]`, one per non-empty caption, in split order:
        `alpha[t]` is the attention of the step that outputs `words[t]`.
    """
    import tensorflow as tf

    from captioner.datasets.pipeline import make_image_dataset
    from common.text import tokenize_texts

    vocab = run.vocab
    model = run.model
    decode = tf.function(lambda annotations, caption_in: model.decoder(
        annotations, caption_in, training=False)["alpha"], reduce_retracing=True)
    words = tokenize_texts([c for r in split for c in r.captions], lowercase=True)
    first = np.cumsum([0] + [len(r.captions) for r in split])  # captions of record i start here
    longest = max((len(w) for w in words), default=0)
    forced = []
    for batch in make_image_dataset(split, run.image_size, batch_size):
        indices = [int(i) for i in batch["index"].numpy()]
        owners, rows = [], []
        for b, index in enumerate(indices):
            for k in range(first[index], first[index + 1]):
                if words[k]:
                    owners.append(b)
                    rows.append(words[k])
        if not rows:
            continue
        caption_in = np.zeros((len(rows), longest), np.int32)  # one length: one trace
        for n, row in enumerate(rows):
            caption_in[n, :len(row)] = [vocab.start_id] + vocab.encode(row[:-1])
        annotations = model.annotations({"image": batch["image"]}, training=False)
        alpha = decode(tf.gather(annotations, owners), caption_in).numpy()
        for n, (b, row) in enumerate(zip(owners, rows)):
            forced.append((split[indices[b]], row, alpha[n, :len(row)]))
    return forced


def evaluate(run_dir: str | os.PathLike | CaptionerRun, dataset: str | None = None,
             split: str = "test", data_dir: str | None = None, beam_size: int = BEAM_SIZE,
             batch_size: int = 32, options: dict[str, Any] | None = None,
             metrics: tuple[str, ...] = ("bleu", "meteor", "rouge", "cider"),
             no_repeat_ngram: int = 0) -> dict[str, Any]:
    """Scores of a run on `dataset`/`split` (the run's own dataset by default), its captions
    decoded with `beam_size` and `no_repeat_ngram` (`CaptionerRun.caption_batch`).

    Returns:
        `{"images", "skipped_images", "BLEU-1", ..., "CIDEr", "tokenizer",
        "attention_correctness",
        "attention_uniform_baseline", "attention_words", "attention_words_skipped",
        "attention_correctness_references", "attention_uniform_baseline_references",
        "attention_words_references", "attention_words_skipped_references",
        ["object_accuracy", "relation_accuracy", "relations_stated", "objects_named_twice",
        "objects_named_twice_rate"]}` (on `shapes`: `shapes_metrics.shapes_scores`); scores on
        the 0–100 scale, except the counts and `relations_stated` (per caption); `tokenizer` says which tokenizer the caption metrics used (`"ptb"`, or
        `"simple"` without Java). The `attention_*` entries are on the generated captions,
        the `*_references` ones on the references under teacher forcing (see the module
        docstring); they are there for datasets with object boxes. A metric that cannot be
        computed is left out, a mean over no words is None. `images` counts the images
        scored; `skipped_images` those of the split left out, each named in a warning: files
        the loader could not read, and files whose pixels could not be decoded.
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
    captions = generate(run, records, beam_size, batch_size, no_repeat_ngram=no_repeat_ngram)
    # A file PIL's header check passed but TensorFlow cannot decode (a truncated JPEG, say)
    # is left out of the batches; name it, as the loader names the files it skipped.
    undecoded = [record.path for record in records if record.image_id not in captions]
    for path in undecoded:
        logger.warning("skipping %s: its pixels cannot be decoded", path)
    if undecoded:
        logger.warning("%s/%s: %d image(s) left out of the scores", records.name,
                       records.split, len(undecoded))
    hypotheses = {image_id: c.text for image_id, c in captions.items()}
    results: dict[str, Any] = {"images": len(hypotheses),
                               "skipped_images": records.skipped + len(undecoded)}
    results.update(caption_scores(records.references(), hypotheses, metrics=metrics))

    if dataset in MATCHERS and any(r.objects for r in records):
        generated = [(caption.words, caption.attention, record.objects,
                      (record.height, record.width))
                     for record, caption in ((records.by_id(i), c) for i, c in captions.items())]
        references = [(words, alpha, record.objects, (record.height, record.width))
                      for record, words, alpha in teacher_forced(run, records, batch_size)]
        for suffix, items in (("", generated), ("_references", references)):
            correctness = corpus_attention_correctness(items, MATCHERS[dataset], run.grid_shape)
            results[f"attention_correctness{suffix}"] = 100 * correctness.correctness
            results[f"attention_uniform_baseline{suffix}"] = 100 * correctness.baseline
            results[f"attention_words{suffix}"] = correctness.count
            results[f"attention_words_skipped{suffix}"] = correctness.skipped
    if dataset == "shapes":
        from captioner.datasets.shapes_metrics import shapes_scores

        results.update(shapes_scores(hypotheses, records))  # already 0–100
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in results.items()}


def format_results(results: dict[str, Any]) -> str:
    """One `name  value` line per score, values on the 0–100 scale with two decimals."""
    width = max([28] + [len(name) + 2 for name in results])
    lines = []
    for name, value in results.items():
        if isinstance(value, float | np.floating):
            lines.append(f"{name:<{width}}{value:8.2f}")
        else:
            lines.append(f"{name:<{width}}{value!s:>8}")
    return "\n".join(lines)
