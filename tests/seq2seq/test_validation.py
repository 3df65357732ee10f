"""The translators validate while they train: BLEU, chrF and exact match with the chosen beam,
the best checkpoint kept by BLEU, sample translations in TensorBoard."""

import json

import numpy as np
import pytest

from seq2seq.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "validated"
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--epochs", "3", "--validation-examples", "12", "--validation-beam-size", "2",
                   "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


@pytest.mark.slow
def test_validation_is_the_score_of_the_beam_it_names_and_the_best_bleu_is_kept(run_dir):
    from common.training.best import best_record
    from seq2seq.config import RunConfig
    from seq2seq.evaluate import score_translations
    from seq2seq.inference import Translator
    from seq2seq.train import load_split

    epochs = [r for r in map(json.loads, (run_dir / "history.jsonl").open())
              if r["kind"] == "epoch"]
    assert [set(r) >= {"val_bleu", "val_chrf", "val_exact_match"} for r in epochs] == [True] * 3
    # What the family declares (`--best-metric` is checked against it before a run starts).
    from seq2seq.family import FAMILY

    assert [k[4:] for k in epochs[0] if k.startswith("val_")] == list(FAMILY.validation_metrics)
    best = best_record(run_dir)
    bleus = [r["val_bleu"] for r in epochs]
    assert best["metric"] == "bleu" and best["epoch"] == int(np.argmax(bleus)) + 1  # from 1

    translator = Translator.from_run_dir(run_dir)  # the best checkpoint by default
    config = translator.config
    assert isinstance(config, RunConfig)
    valid = load_split(config, "valid", size=12)
    outputs = translator.translate_tokens(valid.source_tokens, beam_size=2)
    scores = score_translations([o.text for o in outputs], list(valid.targets))
    assert scores["bleu"] == pytest.approx(best["value"], abs=1e-9)
    assert scores["chrf"] == pytest.approx(epochs[best["epoch"] - 1]["val_chrf"], abs=1e-9)


@pytest.mark.slow
def test_sample_translations_reach_tensorboard(run_dir):
    import tensorflow as tf

    texts = []
    for event_file in (run_dir / "logs").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            texts += [tf.make_ndarray(v.tensor).item().decode() for v in event.summary.value
                      if v.tag == "val/samples"]
    assert len(texts) == 3 and all("→" in t and "(reference: " in t for t in texts)
