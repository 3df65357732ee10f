"""The captioner validates while it trains: CIDEr and BLEU-4 on the validation split, the best
checkpoint kept by CIDEr, samples and attention in TensorBoard, `--checkpoint` to choose."""

import json

import numpy as np
import pytest

from captioner.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "validated"
    status = main(["train", "--preset", "tiny", "--epochs", "3", "--validation-examples", "6",
                   "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


def _epochs(run_dir):
    records = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    return [r for r in records if r["kind"] == "epoch"]


@pytest.mark.slow
def test_each_epoch_is_scored_and_the_best_cider_is_kept(run_dir):
    from common.training.best import best_record

    epochs = _epochs(run_dir)
    assert len(epochs) == 3
    # What the family declares (`--best-metric` is checked against it before a run starts).
    from captioner.family import FAMILY

    # On shapes also what the captions say; relation accuracy only once a caption states a
    # relation (the tiny run's may state none).
    reported = [k[4:] for k in epochs[0] if k.startswith("val_")]
    assert reported == [m for m in FAMILY.validation_metrics if m in reported]
    assert {"cider", "bleu_4", "object_accuracy", "facts"} <= set(reported)
    for record in epochs:
        assert 0.0 <= record["val_bleu_4"] <= 100.0 and record["val_cider"] >= 0.0
    best = best_record(run_dir)
    assert best["metric"] == "cider"
    ciders = [r["val_cider"] for r in epochs]
    assert best["value"] == max(ciders) and best["epoch"] == int(np.argmax(ciders)) + 1


@pytest.mark.slow
def test_validation_scores_are_the_metric_of_the_captions_it_makes(run_dir):
    """Re-caption the same six validation images (as 8-bit pixels, what the validation decodes
    on either backend) with the best checkpoint: same CIDEr."""
    from captioner.datasets import load_split
    from captioner.datasets.pipeline import make_image_dataset
    from captioner.inference import load_run
    from common.metrics.caption_metrics import caption_scores
    from common.training.best import best_record

    run = load_run(run_dir)  # the best, by default
    assert run.checkpoint.endswith(best_record(run_dir)["checkpoint"])
    split = load_split("shapes", "valid", None, num_images=48)
    batch = next(iter(make_image_dataset(split, run.image_size, batch_size=6)))
    pixels = np.clip(np.round(batch["image"].numpy()), 0, 255).astype(np.uint8)
    captions = run.caption_batch(pixels, beam_size=1)
    ids = [split[int(i)].image_id for i in batch["index"].numpy()]
    scores = caption_scores(split.references(), {i: c.text for i, c in zip(ids, captions)},
                            metrics=("cider",), tokenizer="simple")
    assert scores["CIDEr"] == pytest.approx(best_record(run_dir)["value"], abs=1e-6)


@pytest.mark.slow
def test_checkpoint_option_picks_last_best_or_a_number(run_dir, capsys):
    from common.training.best import best_record

    first_step = min(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*.index"))
    for which in ("last", "best", str(first_step)):
        status = main(["caption", str(run_dir), "assets/samples/shapes_1.png",
                       "--checkpoint", which, "--beam-size", "1"])
        assert status == 0, capsys.readouterr().err
    assert main(["caption", str(run_dir), "assets/samples/shapes_1.png", "--checkpoint",
                 "7"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint number 7" in err and best_record(run_dir)["checkpoint"].split("/")[-1] in err


@pytest.mark.slow
def test_samples_and_attention_reach_tensorboard(run_dir):
    import tensorflow as tf

    tags = set()
    for event_file in (run_dir / "logs").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags.update(value.tag for value in event.summary.value)
    assert {"epoch/val_cider", "epoch/val_bleu_4", "val/samples", "val/attention"} <= tags


@pytest.mark.slow
def test_validation_traces_its_decoder_once_over_epochs_and_batch_sizes(monkeypatch):
    """Three validations of 70 images, decoded in batches of 64 (the second padded to 64):
    one trace of the decoding function, not one a batch or an epoch, and no retracing
    warning from TensorFlow."""
    from captioner.config import CaptionerRunConfig
    from captioner.datasets import load_split
    from captioner.datasets.pipeline import build_vocabulary
    from captioner.model import ShowAttendTell
    from captioner.presets import get_preset
    from captioner.train import _make_validate, apply_overrides, build_model
    from common.config import from_dict
    from common.training import TrainingConfig
    from tests.helpers.tracing import calls, retracing_warnings

    config = apply_overrides(CaptionerRunConfig(), get_preset("tiny"))
    config = apply_overrides(config, {"data": {"options": {"num_images": 70}},
                                      "training": {"validation_examples": 70,
                                                   "validation_beam_size": 1}})
    training = from_dict(TrainingConfig, config.training)
    vocab = build_vocabulary(load_split("shapes", "train", None, num_images=70), min_count=1)
    model = build_model(config, len(vocab))
    validate = _make_validate(config, training, vocab)
    # The search's body builds the decoding state: it runs only while the search is traced.
    traces = calls(monkeypatch, ShowAttendTell, "initial_decoding_state")
    with retracing_warnings() as warnings:
        scores = [validate(model, epoch)["cider"] for epoch in range(3)]
    assert [args[1].shape[0] for args in traces] == [64]  # (B, H, W, 3)
    assert warnings == []
    assert scores[0] == scores[1] == scores[2]  # the same weights caption the same
