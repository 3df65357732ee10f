"""A JAX run validates as the TensorFlow trainer does (`common.training.validation`: the same
examples, the same search, the same metrics), keeps the best weights and stops early by the
same rules (`common.training.best`), also across a resume: on its best weights, its
validation's examples, decodes and scores are those TensorFlow's validation gives."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.jax.conftest import REPO, requires_jax, run_worker, worker_env

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
    """The tiny Transformer on `dates`, trained on JAX with validation on 50 pairs by beam
    search of 2 and early stopping after 2 validations without a better BLEU."""
    root = tmp_path_factory.mktemp("validated")
    prepared, run = root / "prepared", root / "run"
    status, _, err = _run("prepare", "--dataset", "dates", "--arch", "transformer", "--preset",
                          "tiny", "--out", str(prepared))
    assert status == 0, err[-2000:]
    status, out, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                            "--validation-examples", "50", "--validation-beam-size", "2",
                            "--early-stopping", str(PATIENCE),
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
        assert epochs[epoch]["best_epoch"] == best + 1  # records count epochs from 1
        if epoch - best >= PATIENCE:
            stop = epoch
            break
    assert len(epochs) == stop + 1
    assert best == int(np.argmax(values))  # the first maximum
    if stop < epochs_asked - 1:
        assert "Early stopping after epoch" in out
    record = json.loads((run / "best" / "best.json").read_text())
    assert record == {"metric": metric, "mode": "max", "value": values[best], "epoch": best + 1,
                      "step": epochs[best]["step"], "checkpoint": "best/model.weights.h5",
                      "version": 2}
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


def _same_validation(on_jax: dict, tf_inputs: dict, tf_decoded, tf_scores: dict) -> None:
    """The JAX validation (`task_validate`) against TensorFlow's of the same weights: the same
    inputs; every decode the same, or parting at a near tie (the backends round differently);
    and, when every decode is the same, the same scores."""
    for key, value in tf_inputs.items():
        np.testing.assert_array_equal(np.asarray(on_jax["inputs"][key]), value)
    jax_tokens = np.asarray(on_jax["tokens"])[:, 0]
    tf_tokens = tf_decoded.tokens[:, 0]
    parted = [row for row in range(len(tf_tokens))
              if not np.array_equal(jax_tokens[row], tf_tokens[row])]
    assert len(parted) <= len(tf_tokens) // 10, parted  # near ties are rare
    if not parted:
        numbers = {k: v for k, v in tf_scores.items() if isinstance(v, float)}
        assert numbers == pytest.approx(on_jax["scores"], abs=1e-9)


@requires_jax
@pytest.mark.slow
def test_the_jax_validation_is_the_tensorflow_validation(dates_run):
    """On the best weights: the pairs the JAX run validates on (`valid.examples.json`) are
    the ones the TensorFlow trainer reads from the data; its beam-2 decodes and BLEU, chrF
    and exact match are those TensorFlow's validation gives, and what `best.json` holds."""
    from common.training.validation import Validator
    from seq2seq.inference import Translator
    from seq2seq.validation import make_validation, pairs_from_data, pairs_from_prepared

    prepared, run, _ = dates_run
    on_jax = run_worker("validate", {"prepared": str(prepared), "run_dir": str(run),
                                     "examples": 50, "beam_size": 2})
    assert on_jax["keras_backend"] == "jax"
    best = json.loads((run / "best" / "best.json").read_text())
    assert on_jax["scores"]["bleu"] == pytest.approx(best["value"], abs=1e-9)
    translator = Translator.from_run_dir(run)  # the best, by default
    assert translator.checkpoint == str(run / "best" / "model.weights.h5")
    pairs = pairs_from_data(translator.config, None, 50)
    assert pairs == pairs_from_prepared(prepared, 50)
    validation = make_validation(translator.config, pairs, translator.source_vocab.tokens,
                                 translator.target_vocab.tokens)
    validator = Validator(translator.model, validation, beam_size=2)
    decoded = validator.decode()
    _same_validation(on_jax, validation.inputs, decoded, validation.score(decoded))


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
def test_the_captioner_jax_validation_is_the_tensorflow_validation(shapes_run):
    """On the best weights: the 12 images the JAX run validates on are the 8-bit pixels
    TensorFlow's validation reads from the data, with the same references; the greedy
    captions, CIDEr, BLEU-4 and the scene's facts are those TensorFlow's validation gives,
    and what `best.json` holds."""
    from captioner.inference import CaptionerRun
    from captioner.validation import images_from_data, make_validation, read_split
    from common.training.validation import Validator

    prepared, run, _ = shapes_run
    on_jax = run_worker("validate", {"prepared": str(prepared), "run_dir": str(run),
                                     "examples": 12, "beam_size": 1})
    best = json.loads((run / "best" / "best.json").read_text())
    assert on_jax["scores"]["cider"] == pytest.approx(best["value"], abs=1e-9)
    assert {"object_accuracy", "facts"} <= set(on_jax["scores"])  # the scene's facts too
    captioner = CaptionerRun(run)  # the best, by default
    assert captioner.checkpoint == str(run / "best" / "model.weights.h5")
    config = captioner.config
    examples = images_from_data(config, read_split(config), 12)
    validation = make_validation(config, examples, captioner.vocab.tokens)
    decoded = Validator(captioner.model, validation).decode()
    assert any(n > 3 for n in decoded.lengths[:, 0])  # real captions, not empty ones
    _same_validation(on_jax, validation.inputs, decoded, validation.score(decoded))


@requires_jax
@pytest.mark.slow
def test_captioner_run_resumed_after_an_epoch_keeps_its_best_and_patience(shapes_run, tmp_path):
    """Stopped after the first epoch that did not beat the best (patience half spent), then
    `--resume`d: the same validations, `best_epoch`s, `best.json` and stop as the
    uninterrupted run."""
    prepared, whole, whole_out = shapes_run
    reference = _epochs(whole)
    best = json.loads((whole / "best" / "best.json").read_text())["epoch"]
    # Epochs run before the stop: up to the one after the best (best.json counts from 1).
    first = max(1, min(best + 1, len(reference) - 1))
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

    from captioner.family import FAMILY
    from common.errors import DataError, UserError
    from common.training.prepare import load_prepared

    copy = tmp_path / "folder"
    shutil.copytree(caption_folder, copy)
    folder = load_prepared(copy)
    references = json.loads((copy / "valid.references.json").read_text())
    assert len(references["image_ids"]) == len(folder.splits["valid"]["images"])
    assert FAMILY.validation(folder.config, folder, 5).size == 5
    assert FAMILY.validation(folder.config, folder, 0) is None
    (copy / "valid.references.json").write_text('{"image_ids": [], "references": []}')
    with pytest.raises(DataError, match="valid.references.json: damaged prepared file"):
        FAMILY.validation(folder.config, folder, 5)
    (copy / "valid.references.json").unlink()
    with pytest.raises(UserError, match="no reference captions for validation"):
        FAMILY.validation(folder.config, folder, 5)


@requires_jax
@pytest.mark.slow
def test_a_translation_folder_without_its_validation_pairs_is_one_line(dates_run, tmp_path):
    """The pairs the JAX trainer validates on are `valid.examples.json`: a folder without
    it, or with it damaged, is one line naming it."""
    import shutil

    from common.errors import DataError, UserError
    from common.training.prepare import load_prepared
    from seq2seq.family import FAMILY

    copy = tmp_path / "folder"
    shutil.copytree(dates_run[0], copy)
    folder = load_prepared(copy)
    assert FAMILY.validation(folder.config, folder, 7).size == 7
    (copy / "valid.examples.json").write_text('{"sources": [1]}')
    with pytest.raises(DataError, match="valid.examples.json: not a file of validation pairs"):
        FAMILY.validation(folder.config, folder, 5)
    (copy / "valid.examples.json").unlink()
    with pytest.raises(UserError, match="no valid.examples.json"):
        FAMILY.validation(folder.config, folder, 5)
