"""The captioner's validation on the JAX backend: full-pass greedy captions of the prepared
folder's first `valid` images, scored as `captioner.train._make_validate` scores them.

`full_pass_validation(config, prepared, examples)` (the family's `full_pass_validation` hook)
takes the first `examples` images of `valid.npz` (the order of the TensorFlow validation's
`make_image_dataset`, which prepare kept), decodes each with the model's teacher-forced
`call` on `{"image", "caption_in": the prefix}` (`training=False`: soft attention's weights,
hard attention's most likely location, as the cached greedy step attends), and scores the
captions against the images' reference captions (`valid.references.json`, written by
`captioner.prepared.prepare_captions`) with pycocoevalcap's CIDEr and BLEU-4 on the simple
tokenizer: the numbers, in that order, of the TensorFlow captioner's validation. The caption
text is what `CaptionerRun` gives: the words without `<pad>`, `<start>`, `<end>` (an `<unk>`
kept), joined by `common.text.detokenizer.detokenize`. It imports no TensorFlow.

Dimensions: `N` images, `B` a batch of them, `T` the caption length (`decoder.max_length`).
"""

from __future__ import annotations

from typing import Any

from common.config import from_dict
from common.decoding.full_pass import FullPassValidation
from common.text.detokenizer import detokenize
from common.text.specials import END_ID, PAD_ID, START_ID


def caption_text(ids: list[int], vocabulary: list[str]) -> str:
    """The caption of `ids` as the TensorFlow captioner writes it (specials but `<unk>`
    dropped, `detokenize`d)."""
    return detokenize([vocabulary[int(i)] for i in ids
                       if int(i) not in (PAD_ID, START_ID, END_ID)])


def full_pass_validation(config: dict[str, Any], prepared: Any,
                         examples: int) -> FullPassValidation | None:
    """The first `examples` validation images of `prepared` (a `common.training.prepare.
    Prepared`) as a `FullPassValidation` (None: the folder has no `valid` split).

    Raises:
        UserError: the folder has a `valid` split but no reference captions (prepared before
            they were written: run `prepare` again, or train with `validation_examples` 0).
        DataError: its reference file cannot be read or does not match its images.
    """
    from captioner.config import CaptionerRunConfig
    from captioner.prepared import load_references
    from common.metrics.caption_metrics import caption_scores

    if not examples or "valid" not in prepared.splits:
        return None
    run = from_dict(CaptionerRunConfig, config)
    images = prepared.splits["valid"]["images"][:examples]
    image_ids, references = load_references(prepared.path, "valid", len(
        prepared.splits["valid"]["images"]))
    image_ids = image_ids[: len(images)]
    vocabulary = prepared.vocabularies["words"]

    def model_inputs(batch: dict[str, Any], prefix: Any) -> dict[str, Any]:
        from keras import ops

        return {"image": ops.cast(batch["image"], "float32"), "caption_in": prefix}

    def score(decoded: list[list[int]]) -> dict[str, float]:
        captions = {i: caption_text(ids, vocabulary) for i, ids in zip(image_ids, decoded)}
        scores = caption_scores(references, captions, metrics=("bleu", "cider"),
                                tokenizer="simple")
        return {"cider": scores["CIDEr"], "bleu_4": scores["BLEU-4"]}

    return FullPassValidation({"image": images}, model_inputs, start_id=START_ID,
                              end_id=END_ID, max_length=run.decoder.max_length, score=score,
                              logits=lambda outputs: outputs["logits"])
