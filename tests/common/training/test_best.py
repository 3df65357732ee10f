"""The best checkpoint by a validation metric, and early stopping (common.training.best)."""

import math

import keras
import numpy as np
import pytest

from common.errors import UserError
from common.training import Trainer, TrainingConfig, restore_model
from common.training.best import best_checkpoint, best_record
from common.training.checkpoints import latest_checkpoint
from tests.common.training.conftest import TinyRegressor, dataset_maker


def _scripted(scores):
    """A validation that reports `scores[epoch]` as "score"."""
    return lambda model, epoch: {"score": scores[epoch]}


def _train(run_dir, scores, epochs, resume=False, **training):
    config = TrainingConfig(epochs=epochs, batch_size=16, keep_checkpoints=10,
                            best_metric="score", **training)
    trainer = Trainer(run_dir, config, TinyRegressor)
    return trainer, trainer.fit(dataset_maker(16), resume=resume, validate=_scripted(scores),
                                verbose=0)


def _weights(checkpoint):
    model = TinyRegressor()
    model(np.zeros((1, 3), "float32"))
    restore_model(model, checkpoint)
    return [keras.ops.convert_to_numpy(v.value) for v in model.trainable_variables]


def test_best_weights_are_those_of_the_best_epoch_and_early_stopping_ends_the_run(run_dir):
    scores = [1.0, 3.0, 2.0, 2.0, 2.0, 5.0]  # best at epoch 2, then 3 epochs without better
    trainer, history = _train(run_dir, scores, epochs=6, early_stopping=3)

    # Epochs numbered from 1, as the log prints them; epoch 6 (score 5) never runs.
    assert [r["epoch"] for r in history] == [1, 2, 3, 4, 5]
    assert [r["best_epoch"] for r in history] == [1, 2, 2, 2, 2]
    record = best_record(run_dir)
    assert (record["value"], record["epoch"], record["step"]) == (3.0, 2, history[1]["step"])
    # The rotation's checkpoint of the end of epoch 2 holds the same weights.
    end_of_epoch_1 = str(run_dir / "checkpoints" / f"ckpt-{history[1]['step']}")
    for best, rotated in zip(_weights(best_checkpoint(run_dir)), _weights(end_of_epoch_1),
                             strict=True):
        np.testing.assert_array_equal(best, rotated)
    final = [keras.ops.convert_to_numpy(v.value) for v in trainer.model.trainable_variables]
    assert not np.array_equal(final[0], _weights(best_checkpoint(run_dir))[0])
    assert sorted(p.name for p in (run_dir / "best").iterdir() if p.suffix == ".index") == [
        f"ckpt-{history[1]['step']}.index"]  # the earlier best was deleted


def test_best_and_patience_survive_a_resume(run_dir):
    scores = [1.0, 3.0, 2.0, 2.0, 2.0, 5.0]
    _train(run_dir, scores, epochs=3, early_stopping=3)  # epochs 1-3: best at 2
    assert best_record(run_dir)["epoch"] == 2
    _, history = _train(run_dir, scores, epochs=6, resume=True, early_stopping=3)
    assert [r["epoch"] for r in history] == [4, 5]
    assert best_record(run_dir)["epoch"] == 2
    # Stopped early: resuming again has nothing to do.
    _, again = _train(run_dir, scores, epochs=6, resume=True, early_stopping=3)
    assert again == []


def test_a_run_written_when_epochs_counted_from_0_resumes_and_stops_as_a_new_one(run_dir):
    """best.json without "version" and a history.jsonl whose first record is of epoch 0
    (written before epochs were numbered from 1) are read from 1, and the resume rewrites the
    history so: one numbering in the file, the early stop at the same epoch."""
    import json

    from common.training import RunDir

    scores = [1.0, 3.0, 2.0, 2.0, 2.0, 5.0]
    _train(run_dir, scores, epochs=3, early_stopping=3)  # epochs 1-3: best at 2
    best_file = run_dir / "best" / "best.json"
    old = json.loads(best_file.read_text())
    assert old.pop("version") == 2 and old["epoch"] == 2
    best_file.write_text(json.dumps({**old, "epoch": 1}))  # as the old trainer wrote it
    lines = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    (run_dir / "history.jsonl").write_text("".join(
        json.dumps({**r, "epoch": r["epoch"] - 1,
                    **({"best_epoch": r["best_epoch"] - 1} if "best_epoch" in r else {})})
        + "\n" for r in lines))

    assert best_record(run_dir)["epoch"] == 2  # read as numbered from 1
    assert [r["epoch"] for r in RunDir(run_dir).read_history() if r["kind"] == "epoch"] == [
        1, 2, 3]
    _, history = _train(run_dir, scores, epochs=6, resume=True, early_stopping=3)
    assert [r["epoch"] for r in history] == [4, 5]  # stopped 3 epochs after the best, as new
    assert best_record(run_dir)["epoch"] == 2
    rewritten = [json.loads(line)
                 for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rewritten if r["kind"] == "epoch"] == [1, 2, 3, 4, 5]
    assert [r["best_epoch"] for r in rewritten if r["kind"] == "epoch"] == [1, 2, 2, 2, 2]


def test_the_epoch_line_marks_the_best_and_the_stop_names_epochs_as_the_log_does(run_dir,
                                                                               capsys):
    config = TrainingConfig(epochs=5, batch_size=16, keep_checkpoints=10,
                            best_metric="score", early_stopping=2)
    Trainer(run_dir, config, TinyRegressor).fit(
        dataset_maker(16), validate=_scripted([1.0, 3.0, 2.0, 2.0, 9.0]), verbose=2)
    said = [line for line in capsys.readouterr().out.splitlines() if ": val_" in line
            or line.startswith("Early")]
    assert said == ["Epoch 1/5: val_score 1 (best)", "Epoch 2/5: val_score 3 (best)",
                    "Epoch 3/5: val_score 2", "Epoch 4/5: val_score 2",
                    "Early stopping after epoch 4: no better score for 2 validations (best 3 "
                    "at epoch 2)"]
    assert best_record(run_dir)["epoch"] == 2


def test_auto_keeps_the_best_by_the_first_number_the_validation_reports(tmp_path):
    config = TrainingConfig(epochs=3, batch_size=16)  # best_metric "auto"

    def validate(model, epoch):
        return {"bleu": [1.0, 5.0, 2.0][epoch], "chrf": 90.0 - epoch}

    Trainer(tmp_path / "a", config, TinyRegressor).fit(dataset_maker(16), validate=validate,
                                                        verbose=0)
    assert (best_record(tmp_path / "a")["metric"], best_record(tmp_path / "a")["epoch"]) == (
        "bleu", 2)
    # Without a validation, or with best_metric None, nothing is kept.
    Trainer(tmp_path / "b", config, TinyRegressor).fit(dataset_maker(16), verbose=0)
    none = TrainingConfig(epochs=3, batch_size=16, best_metric=None)
    Trainer(tmp_path / "c", none, TinyRegressor).fit(dataset_maker(16), validate=validate,
                                                      verbose=0)
    assert best_record(tmp_path / "b") is None and best_record(tmp_path / "c") is None
    assert TrainingConfig(best_metric="none").best_metric is None  # --best-metric none


def test_min_mode_keeps_the_smallest_and_nan_is_never_best(run_dir):
    _train(run_dir, [5.0, 2.0, math.nan, 4.0], epochs=4, best_mode="min")
    assert (best_record(run_dir)["value"], best_record(run_dir)["epoch"]) == (2.0, 2)


def test_a_metric_the_validation_does_not_report_is_a_user_error(run_dir):
    config = TrainingConfig(epochs=1, batch_size=16, best_metric="bleu")
    with pytest.raises(UserError, match="'bleu', which the validation does not report"):
        Trainer(run_dir, config, TinyRegressor).fit(dataset_maker(16), verbose=0,
                                                    validate=_scripted([1.0]))
    with pytest.raises(UserError, match="needs a validation"):
        Trainer(run_dir / "b", config, TinyRegressor).fit(dataset_maker(16), verbose=0)
    with pytest.raises(UserError, match="early_stopping needs best_metric"):
        TrainingConfig(early_stopping=2, best_metric=None)


def test_resolve_checkpoint_names_best_last_a_step_or_a_path(run_dir):
    from common.training.checkpoints import resolve_checkpoint

    # 2 steps an epoch: ckpt-2, ckpt-4, ckpt-6, numbered by step as the best is; the best at 4
    _train(run_dir, [1.0, 3.0, 2.0], epochs=3)
    best = best_checkpoint(run_dir)
    assert resolve_checkpoint(run_dir) == best == str(run_dir / "best" / "ckpt-4")
    assert resolve_checkpoint(run_dir, "best") == best
    assert resolve_checkpoint(run_dir, "last") == str(run_dir / "checkpoints" / "ckpt-6")
    assert resolve_checkpoint(run_dir, "2") == str(run_dir / "checkpoints" / "ckpt-2")
    assert resolve_checkpoint(run_dir, "4") == str(run_dir / "checkpoints" / "ckpt-4")
    assert resolve_checkpoint(run_dir, best) == best
    with pytest.raises(UserError, match="no checkpoint number 7; it has: ckpt-4 \\(best\\), "
                                        "ckpt-6, ckpt-4, ckpt-2"):
        resolve_checkpoint(run_dir, "7")
    # a step the rotation no longer keeps is the best's when the best is of that step
    for file in (run_dir / "checkpoints").glob("ckpt-4.*"):
        file.unlink()
    assert resolve_checkpoint(run_dir, "4") == best
    with pytest.raises(UserError, match="--checkpoint 'newest'"):
        resolve_checkpoint(run_dir, "newest")


def test_a_checkpoint_number_is_ascii_digits_only(run_dir):
    from common.training.checkpoints import resolve_checkpoint

    _train(run_dir, [1.0, 3.0], epochs=2)  # ckpt-2, ckpt-4
    assert resolve_checkpoint(run_dir, "02") == str(run_dir / "checkpoints" / "ckpt-2")
    # str.isdigit accepts both; int() fails on the first and reads the second as 1.
    for which in ("\u00b2", "\u0661"):
        with pytest.raises(UserError, match=f"--checkpoint '{which}': expected best, last, a "
                                            "step N"):
            resolve_checkpoint(run_dir, which)


def test_without_a_best_the_default_is_the_last(run_dir):
    from common.training.checkpoints import resolve_checkpoint

    config = TrainingConfig(epochs=2, batch_size=16)
    Trainer(run_dir, config, TinyRegressor).fit(dataset_maker(16), verbose=0)
    assert resolve_checkpoint(run_dir) == latest_checkpoint(run_dir / "checkpoints")
    with pytest.raises(UserError, match="keeps no best checkpoint"):
        resolve_checkpoint(run_dir, "best")


def test_validation_scalars_texts_and_images_reach_tensorboard(run_dir):
    import tensorflow as tf

    def validate(model, epoch):
        return {"bleu": 10.0 + epoch, "samples": f"epoch {epoch}: a b c",
                "attention": np.full((2, 4, 5, 3), 0.5, np.float32)}

    config = TrainingConfig(epochs=2, batch_size=16)
    history = Trainer(run_dir, config, TinyRegressor).fit(dataset_maker(16), validate=validate,
                                                          verbose=0)
    assert [r["val_bleu"] for r in history] == [10.0, 11.0]
    assert not any("samples" in k or "attention" in k for r in history for k in r)
    found = {}
    for event_file in (run_dir / "logs").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append(
                    (event.step, value.metadata.plugin_data.plugin_name, value))
    assert [(s, p) for s, p, _ in found["epoch/val_bleu"]] == [(2, "scalars"), (4, "scalars")]
    texts = [tf.make_ndarray(v.tensor).item().decode() for _, p, v in found["val/samples"]]
    assert texts == ["epoch 0: a b c", "epoch 1: a b c"]
    assert {p for _, p, _ in found["val/attention"]} == {"images"}
    assert len(found["val/attention"]) == 2


def test_init_from_starts_a_new_run_from_another_runs_weights(tmp_path):
    first = tmp_path / "first"
    config = TrainingConfig(epochs=2, batch_size=16)
    Trainer(first, config, TinyRegressor).fit(dataset_maker(16), verbose=0)
    source = latest_checkpoint(first / "checkpoints")

    warm = Trainer(tmp_path / "warm", TrainingConfig(epochs=1, batch_size=16), TinyRegressor)
    warm.build(dataset_maker(16))
    before = [keras.ops.convert_to_numpy(v.value) for v in warm.model.trainable_variables]
    seen = []

    def validate(model, epoch):  # after the first epoch: trained on from the source weights
        seen.append([keras.ops.convert_to_numpy(v.value) for v in model.trainable_variables])
        return {}

    history = warm.fit(dataset_maker(16), validate=validate, verbose=0, init_from=source)
    assert warm.state.as_dict()["step"] == 2  # the position starts afresh
    # Same seed and data: without the source's weights the first epoch would equal a cold run's.
    cold = Trainer(tmp_path / "cold", TrainingConfig(epochs=3, batch_size=16), TinyRegressor)
    cold_history = cold.fit(dataset_maker(16), verbose=0)
    assert history[0]["loss"] < cold_history[0]["loss"]
    assert not np.array_equal(before[0], seen[0][0])
    source_weights = _weights(source)
    assert not np.array_equal(source_weights[0], seen[0][0])  # trained on, not just loaded
