"""Scoring a trained translator: sacreBLEU BLEU and chrF, exact match, and the signatures.

The model's output is detokenized (`common.text.detokenize`, rare words copied from the
source) and compared with the reference sentences untokenized, as sacreBLEU expects: BLEU with
its default `13a` tokenization, so the figures compare with published ones. The references are
read as the training text is, in Unicode NFKC form (`common.text.normalize`: compatibility
characters such as `²` or `º` become `2` and `o`, which is all the model can write); no line of
the spa-eng valid or test splits changes under it. A run trained on
lowercased text (`data.lowercase`) is scored case-insensitively (sacreBLEU's `lowercase=True`;
the signatures say `case:lc`), since it cannot write the references' capitals.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from common.config import save_json
from common.decoding.defaults import BEAM_SIZE
from common.errors import DataError, UserError
from common.outputs import check_output_file, reported_write

#: How references are matched to translations (`evaluate(references=...)`).
REFERENCE_MODES = ("line", "grouped")

# The keys every `--json` result holds: an existing file without them is not replaced.
RESULT_KEYS = ("run_dir", "data", "sentences", "checkpoint", "beam_size")


def load_references(translator: Any, data: str | None, dataset: str | None,
                    limit: int | None = None) -> Any:
    """The pairs to score: a TSV file (`--data`) or the held-out split of `dataset`."""
    from seq2seq.datasets import load_pairs

    config = translator.config.data
    if data is not None:
        path = Path(data)
        if path.is_dir():
            raise DataError(f"{data}: is a folder; expected a TSV file of source<TAB>reference "
                            f"lines (such as {path / 'test.tsv'})")
        if not path.is_file():
            raise DataError(f"{data}: no such file; expected a TSV of source<TAB>reference")
        return load_pairs("tsv", path=str(path), split="test", reverse=config.reverse,
                          size=limit, lowercase=config.lowercase)
    if dataset is None:
        raise UserError("give --data FILE.tsv or --dataset dates")
    if dataset != "dates":
        raise UserError(f"--dataset {dataset!r} has no built-in test split; expected 'dates'")
    return load_pairs("dates", split="test", seed=0, size=limit)


def score_translations(hypotheses: list[str], references: list[str],
                       lowercase: bool = False) -> dict[str, Any]:
    """BLEU, chrF (sacreBLEU), exact match (%) and the sacreBLEU signatures
    (`common.metrics.translation.translation_scores`); `lowercase` for a run that lowercases
    its text."""
    from common.metrics.translation import translation_scores

    return dict(translation_scores(hypotheses, references, lowercase=lowercase))


#: Where an export's relative `checkpoint` is from (exports made before they recorded it
#: absolute wrote it as the `export` command was given it).
EXPORT_DIRECTORY = "the directory `seq2seq export` ran in"


def scored_model(run_dir: str | Path, translator: Any) -> dict[str, Any]:
    """What `evaluate` scores, for its printout and JSON: `format` (`run`, `savedmodel` or
    `ctranslate2`), `quantization` (the weights' type: an export's, as its `export_info.json`
    says; a run's are float32) and `checkpoint`, the path of the weights, absolute (None for
    an export that does not say). An export made before exports recorded it absolute gives it
    as recorded, with `checkpoint_relative_to` saying from where (`EXPORT_DIRECTORY`).
    """
    import os

    from common.export.ctranslate2 import is_ctranslate2

    checkpoint = translator.checkpoint
    info = getattr(translator, "info", None)
    if info is None:  # a run directory: its checkpoint's path, from here
        return {"format": "run", "quantization": "float32",
                "checkpoint": None if checkpoint is None else os.path.abspath(checkpoint)}
    described = {"format": "ctranslate2" if is_ctranslate2(run_dir) else "savedmodel",
                 "quantization": info.get("quantization", "float32"),
                 "checkpoint": checkpoint}
    if checkpoint is not None and not os.path.isabs(checkpoint):
        described["checkpoint_relative_to"] = EXPORT_DIRECTORY
    return described


def _open_translator(run_dir: str | Path, attention_layer: int, attention_head: int | None,
                     checkpoint: str | None) -> Any:
    """The translator of a run directory or an export, its attention choice checked before
    any data loads (a model with one attention refuses a layer or head; a Transformer, one it
    does not have; an export chose at export time)."""
    from common.export.ctranslate2 import is_ctranslate2
    from common.export.savedmodel import is_saved_model
    from seq2seq.inference import Translator, open_model

    if is_ctranslate2(run_dir) or is_saved_model(run_dir):
        return open_model(run_dir, attention_layer, attention_head, checkpoint)
    translator = Translator.from_run_dir(run_dir, checkpoint)
    model = getattr(translator, "model", None)
    if model is not None:
        model.make_step(attention_layer=attention_layer, attention_head=attention_head)
    return translator


def _outcomes(results: list) -> dict[str, int]:
    """How many lines failed, ended unfinished, and how many unknown words were copied."""
    return {"failed": sum(r.error is not None for r in results),
            "unfinished": sum(not r.finished for r in results if r.error is None),
            "copied_unknown": sum(len(r.copied) for r in results)}


def evaluate(
    run_dir: str | Path,
    data: str | None = None,
    dataset: str | None = None,
    beam_size: int = BEAM_SIZE,
    batch_size: int = 64,
    max_length: int | None = None,
    limit: int | None = None,
    json_path: str | Path | None = None,
    progress: bool = True,
    attention_layer: int = -1,
    attention_head: int | None = None,
    checkpoint: str | None = None,
    length_penalty: float | None = None,
    references: str = "line",
    no_repeat_ngram: int = 0,
) -> dict[str, Any]:
    """Translates the references' sources with `run_dir` and scores the output.

    Args:
        run_dir: a translator run directory, or a SavedModel or CTranslate2 export of one
            (scored as the run, with its config; the length penalty and attention chosen at
            export).
        data: a TSV of source<TAB>reference pairs (the run's `reverse` applies).
        dataset: `"dates"`: the held-out dates split.
        beam_size: 1 for greedy decoding.
        batch_size: sentences per decoding batch.
        max_length: the longest output (default: the run's).
        limit: score only the first `limit` pairs.
        json_path: also write the scores there; checked first (`common.outputs`): an existing
            file other than an earlier result (`RESULT_KEYS`), or `data` itself, is refused.
        progress: show a progress bar while decoding.
        attention_layer: the Transformer decoder layer whose attention is returned.
        attention_head: the head returned (None: the average).
        checkpoint: which checkpoint of the run: best, last, a number or a path (None: the
            best when the run keeps one, else the last).
        length_penalty: beam search's length penalty (None: the run's).
        references: `"line"`: each line scored against its own reference (the usual corpus
            BLEU of a test file); `"grouped"`: the lines of one source as one sentence
            translated once, scored against all their references
            (`common.metrics.translation.group_references`).
        no_repeat_ngram: n >= 1: no translation repeats an n-gram of its tokens (0: off).

    Returns:
        A dict: `bleu`, `chrf`, `exact_match`, signatures, `lowercase` (case-insensitive
        scores, for a run that lowercases), `sentences`, `unfinished`, `copied_unknown`,
        `references` (the mode), `lines_with_several_references`, what was scored
        (`scored_model`: `format`, `quantization`, `checkpoint`), `beam_size`,
        `length_penalty` (None
        for greedy decoding, which has none), `no_repeat_ngram`, `max_decode_length`,
        `decode_seconds`.
    """
    from common.metrics.translation import group_references, several_references

    if references not in REFERENCE_MODES:
        raise UserError(f"references {references!r}; expected one of: "
                        f"{', '.join(REFERENCE_MODES)}")
    if json_path is not None:
        # Before the model loads: an existing file is replaced only when it is an earlier
        # result, and never the `data` being scored.
        check_output_file(json_path, "--json", inputs=[data], result_keys=RESULT_KEYS)
    translator = _open_translator(run_dir, attention_layer, attention_head, checkpoint)
    if length_penalty is None:
        length_penalty = translator.config.model.length_penalty
    pairs = load_references(translator, data, dataset, limit)
    if not pairs.sources:
        raise DataError(f"no sentence pairs to score in {data or dataset}")
    sources, targets = list(pairs.sources), list(pairs.targets)
    several = several_references(sources, targets)
    if references == "grouped":
        sources, targets = group_references(sources, targets)
    start = time.perf_counter()
    results = translator.translate(sources, beam_size=beam_size, batch_size=batch_size,
                                   max_length=max_length, progress=progress,
                                   attention_layer=attention_layer,
                                   attention_head=attention_head,
                                   length_penalty=length_penalty,
                                   no_repeat_ngram=no_repeat_ngram)
    seconds = time.perf_counter() - start
    hypotheses = [r.text for r in results]
    scores = score_translations(hypotheses, targets, lowercase=translator.config.data.lowercase)
    scores.update({
        "sentences": len(results),
        "references": references,
        # Lines whose source other lines translate differently: line by line, no system
        # matches them all (docs/metrics.md).
        "lines_with_several_references": several,
        **_outcomes(results),
        **scored_model(run_dir, translator),
        "beam_size": beam_size,
        # Greedy decoding (beam 1) has no length penalty: None says none applied.
        "length_penalty": length_penalty if beam_size > 1 else None,
        "no_repeat_ngram": no_repeat_ngram,
        "max_decode_length": max_length or translator.config.model.max_decode_length,
        "decode_seconds": round(seconds, 2),
    })
    if json_path is not None:
        with reported_write(json_path, "--json"):
            save_json(json_path, {"run_dir": str(run_dir), "data": data or dataset, **scores})
    return scores
