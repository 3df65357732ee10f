"""A JAX run validates by greedy full-pass decoding, keeps the best weights and stops early, by
the rules of the TensorFlow trainer (`common.training.best`), also across a resume; its decodes
are the TensorFlow Translator's and captioner's greedy ones."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.jax.conftest import REPO, requires_jax, worker_env

EPOCHS, PATIENCE = 8, 2


def _run(*argv, backend="jax", family="seq2seq"):
    result = subprocess.run([sys.executable, "-m", family, *argv], env=worker_env(backend),
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


def _weights(path) -> list[np.ndarray]:
    import h5py

    arrays = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.append(np.asarray(item))
                     if isinstance(item, h5py.Dataset) else None)
    return arrays


@pytest.fixture(scope="module")
def dates_run(tmp_path_factory):
    """The tiny Transformer on `dates`, trained on JAX with validation on 50 pairs and early
    stopping after 2 validations without a better BLEU."""
    root = tmp_path_factory.mktemp("validated")
    prepared, run = root / "prepared", root / "run"
    status, _, err = _run("prepare", "--dataset", "dates", "--arch", "transformer", "--preset",
                          "tiny", "--out", str(prepared))
    assert status == 0, err[-2000:]
    status, out, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                            "--validation-examples", "50", "--early-stopping", str(PATIENCE),
                            "--epochs", str(EPOCHS), "--steps-per-epoch", "15",
                            "--keep-checkpoints", "20", "--distribute", "none")
    assert status == 0, err[-2000:]
    return prepared, run, out


def _epochs(run) -> list[dict]:
    records = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "epoch"]


def _check_best_and_stop(run, out: str, metric: str, epochs_asked: int) -> int:
    """Check `run`'s `best_epoch`s, its stop and `best/` against the rules written out (a new
    best only when strictly greater; stop once PATIENCE validations in a row did not beat it);
    returns the best epoch."""
    epochs = _epochs(run)
    values = [r[f"val_{metric}"] for r in epochs]
    best, stop = 0, epochs_asked - 1
    for epoch in range(len(values)):
        if values[epoch] > values[best]:
            best = epoch
        assert epochs[epoch]["best_epoch"] == best
        if epoch - best >= PATIENCE:
            stop = epoch
            break
    assert len(epochs) == stop + 1
    assert best == int(np.argmax(values))  # the first maximum
    if stop < epochs_asked - 1:
        assert "Early stopping after epoch" in out
    record = json.loads((run / "best" / "best.json").read_text())
    assert record == {"metric": metric, "mode": "max", "value": values[best], "epoch": best,
                      "step": epochs[best]["step"], "checkpoint": "best/model.weights.h5"}
    # The best weights are those of the best epoch's end (its epoch-end checkpoint).
    at_best = _weights(run / "jax" / f"ckpt-{epochs[best]['step']}" / "model.weights.h5")
    kept = _weights(run / "best" / "model.weights.h5")
    assert len(kept) == len(at_best) > 0
    assert all(np.array_equal(a, b) for a, b in zip(kept, at_best))
    if best != len(epochs) - 1:  # and not the last ones
        last = _weights(run / "model.weights.h5")
        assert not all(np.array_equal(a, b) for a, b in zip(kept, last))
    return best


@requires_jax
@pytest.mark.slow
def test_best_checkpoint_and_early_stopping_follow_validation_bleu(dates_run):
    _, run, out = dates_run
    assert all({"val_chrf", "val_exact_match", "val_loss"} <= set(r) for r in _epochs(run))
    _check_best_and_stop(run, out, "bleu", EPOCHS)


@requires_jax
@pytest.mark.slow
def test_full_pass_greedy_decodes_equal_the_translators_greedy_ones(dates_run):
    """On the best weights, in this (TensorFlow) process: the full-pass greedy decode of the
    validation sources equals `Translator.translate_tokens(beam_size=1)`, token for token."""
    from common.decoding.full_pass import greedy_full_pass
    from common.training.prepare import load_prepared
    from seq2seq.full_pass import full_pass_validation
    from seq2seq.inference import Translator

    prepared, run, _ = dates_run
    translator = Translator.from_run_dir(run)  # the best, by default
    assert translator.checkpoint == str(run / "best" / "model.weights.h5")
    folder = load_prepared(prepared)
    validation = full_pass_validation(folder.config, folder, 50)
    assert validation.size == 50
    decoded = greedy_full_pass(translator.model, validation, batch_size=25)
    source_words = folder.vocabularies["source"]
    sources = [[source_words[i] for i in row if i > 3] for row in validation.inputs["source"]]
    outputs = translator.translate_tokens(sources, beam_size=1,
                                          max_length=validation.max_length)
    target_words = folder.vocabularies["target"]
    assert [[target_words[i] for i in ids] for ids in decoded] == [o.tokens for o in outputs]


# -- the captioner ------------------------------------------------------------------------------

SHAPES_EPOCHS = 6
SHAPES_TRAIN = ("--validation-examples", "12", "--early-stopping", str(PATIENCE),
                "--steps-per-epoch", "8", "--learning-rate", "0.01", "--keep-checkpoints", "20",
                "--distribute", "none")


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """The `tiny` captioner on `shapes` (48 images a split), trained on JAX with validation on
    12 images and early stopping after 2 validations without a better CIDEr."""
    root = tmp_path_factory.mktemp("captioner-validated")
    prepared, run = root / "prepared", root / "run"
    status, _, err = _run("prepare", "--preset", "tiny", "--out", str(prepared),
                          family="captioner")
    assert status == 0, err[-2000:]
    status, out, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                            "--epochs", str(SHAPES_EPOCHS), *SHAPES_TRAIN, family="captioner")
    assert status == 0, err[-2000:]
    return prepared, run, out


@requires_jax
@pytest.mark.slow
def test_captioner_best_checkpoint_and_early_stopping_follow_validation_cider(shapes_run):
    _, run, out = shapes_run
    epochs = _epochs(run)
    assert all({"val_cider", "val_bleu_4", "val_loss"} <= set(r) for r in epochs)
    assert len({r["val_cider"] for r in epochs}) > 1  # the captions change as it trains
    _check_best_and_stop(run, out, "cider", SHAPES_EPOCHS)


@requires_jax
@pytest.mark.slow
def test_captioner_full_pass_greedy_captions_equal_its_greedy_captions(shapes_run):
    """On the best weights, in this (TensorFlow) process: the full-pass greedy captions of the
    12 validation images equal `CaptionerRun.caption_batch(beam_size=1)`'s, word for word, and
    score as the JAX run's validation scored them at the best epoch."""
    from captioner.full_pass import caption_text, full_pass_validation
    from captioner.inference import CaptionerRun
    from common.decoding.full_pass import greedy_full_pass
    from common.training.prepare import load_prepared

    prepared, run, _ = shapes_run
    captioner = CaptionerRun(run)  # the best, by default
    assert captioner.checkpoint == str(run / "best" / "model.weights.h5")
    folder = load_prepared(prepared)
    validation = full_pass_validation(folder.config, folder, 12)
    assert validation.size == 12
    decoded = greedy_full_pass(captioner.model, validation, batch_size=5)
    captions = captioner.caption_batch(validation.inputs["image"], beam_size=1)
    words = folder.vocabularies["words"]
    assert [[words[i] for i in ids if i > 2] for ids in decoded] == [c.words for c in captions]
    assert [caption_text(ids, words) for ids in decoded] == [c.text for c in captions]
    assert any(len(c.words) > 2 for c in captions)  # real captions, not empty ones
    best = json.loads((run / "best" / "best.json").read_text())
    scores = validation.score(decoded)
    assert list(scores) == ["cider", "bleu_4"]
    assert scores["cider"] == pytest.approx(best["value"], abs=1e-9)


@requires_jax
@pytest.mark.slow
def test_captioner_run_resumed_after_an_epoch_keeps_its_best_and_patience(shapes_run, tmp_path):
    """Stopped after the first epoch that did not beat the best (patience half spent), then
    `--resume`d: the same validations, `best_epoch`s, `best.json` and stop as the
    uninterrupted run."""
    prepared, whole, whole_out = shapes_run
    reference = _epochs(whole)
    best = json.loads((whole / "best" / "best.json").read_text())["epoch"]
    first = max(1, min(best + 2, len(reference) - 1))  # epochs run before the stop
    run = tmp_path / "run"
    status, _, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                          "--epochs", str(first), *SHAPES_TRAIN, family="captioner")
    assert status == 0, err[-2000:]
    status, out, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                            "--epochs", str(SHAPES_EPOCHS), *SHAPES_TRAIN, "--resume",
                            family="captioner")
    assert status == 0, err[-2000:]
    assert ("Early stopping after epoch" in out) == ("Early stopping after epoch" in whole_out)
    timeless = lambda r: {k: v for k, v in r.items()  # noqa: E731
                          if k not in ("time_s", "examples_per_s")}
    assert [timeless(r) for r in _epochs(run)] == [timeless(r) for r in reference]
    assert (json.loads((run / "best" / "best.json").read_text())
            == json.loads((whole / "best" / "best.json").read_text()))
    _check_best_and_stop(run, out, "cider", SHAPES_EPOCHS)


def test_a_caption_folder_without_its_reference_captions_is_one_line(caption_folder, tmp_path):
    """Validation scores against `valid.references.json`: a folder prepared without it, or
    with it damaged, is one line naming it (before any training)."""
    import shutil

    from captioner.full_pass import full_pass_validation
    from common.errors import DataError, UserError
    from common.training.prepare import load_prepared

    copy = tmp_path / "folder"
    shutil.copytree(caption_folder, copy)
    folder = load_prepared(copy)
    references = json.loads((copy / "valid.references.json").read_text())
    assert len(references["image_ids"]) == len(folder.splits["valid"]["images"])
    assert full_pass_validation(folder.config, folder, 5).size == 5
    assert full_pass_validation(folder.config, folder, 0) is None
    (copy / "valid.references.json").write_text('{"image_ids": [], "references": []}')
    with pytest.raises(DataError, match="valid.references.json: damaged prepared file"):
        full_pass_validation(folder.config, folder, 5)
    (copy / "valid.references.json").unlink()
    with pytest.raises(UserError, match="no reference captions for validation"):
        full_pass_validation(folder.config, folder, 5)
