"""The JAX trainer: the loss falls for both families, the run directory is laid out as the
TensorFlow trainer's, and a resumed run ends with the weights of an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.jax.conftest import load_state, requires_jax, run_worker

pytestmark = [requires_jax, pytest.mark.slow]


def test_transformer_loss_falls_without_tensorflow(single_device_run):
    from common.training.run_dir import RunDir

    result = single_device_run["result"]
    assert result["tensorflow"] is False  # the worker blocks it: nothing asked for it
    first, last = result["records"][0], result["records"][-1]
    assert last["loss"] < first["loss"] - 0.3
    run = RunDir(single_device_run["run_dir"])
    assert run.read_status()["state"] == "finished"
    history = run.read_history()
    assert [r["step"] for r in history if r["kind"] == "epoch"] == [r["step"] for r in
                                                                   result["records"]]
    for name in ("config.json", "vocab.source.txt", "vocab.target.txt", "model.weights.h5"):
        assert (run.path / name).is_file(), name
    assert json.loads((run.path / "config.json").read_text())["family"] == "seq2seq"


def test_captioner_loss_falls(caption_folder, tmp_path):
    result = run_worker("train", {"prepared": str(caption_folder), "run_dir": str(tmp_path / "run"),
                                  "state": str(tmp_path / "state.npz"), "training": {}})
    losses = [r["loss"] for r in result["records"]]
    assert losses[-1] < losses[0]
    assert all(np.isfinite(r["val_loss"]) for r in result["records"])  # shapes has a valid split
    assert result["tensorflow"] is False


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(
        translation_folder, single_device_run, tmp_path):
    """One epoch, a new trainer (as after a kill), then `resume` to the second epoch: the same
    batches, random numbers and updates as the uninterrupted two epochs, bit for bit."""
    result = run_worker("train", {
        "prepared": str(translation_folder), "run_dir": str(tmp_path / "run"),
        "state": str(tmp_path / "state.npz"), "training": {},
        "stages": [[1, False], [2, True]]})
    reference = load_state(single_device_run["state"])
    resumed = load_state(tmp_path / "state.npz")
    assert sorted(resumed) == sorted(reference)
    for key, value in reference.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert result["records"][-1]["step"] == single_device_run["result"]["records"][-1]["step"]


def test_each_checkpoint_is_written_once_and_a_kill_while_validating_loses_no_record(
        caption_folder, tmp_path):
    """A checkpoint due on a pass's last step is the epoch-end one, written once (a kill
    between two writes of it resumed past every batch); validation runs before it, so a run
    killed while validating resumes within the epoch and still writes that epoch's record."""
    result = run_worker("save_order", {"prepared": str(caption_folder),
                                       "run_dir": str(tmp_path / "run")})
    steps = result["steps_per_pass"]
    assert result["killed_at"] == {"step": steps, "epoch": 0, "step_in_epoch": steps}
    written = [(p["step"], p["epoch"], p["step_in_epoch"]) for p in result["saved"]]
    # Nothing from the killed run (it had not reached epoch 0's checkpoint), then one write
    # per epoch end from the resumed one: no mid-epoch write at a pass's end.
    assert written == [(steps, 1, 0), (2 * steps, 2, 0)], written
    epochs = [(r["epoch"], r["step"]) for r in result["epochs"]]
    assert epochs == [(0, steps), (1, 2 * steps)], epochs
    assert all("val_loss" in r and r["loss"] > 0 for r in result["epochs"])


def test_resume_trains_at_the_learning_rate_it_is_given(caption_folder, tmp_path):
    """A constant rate (the captioner's) is optimizer state that the checkpoint brings back:
    `--resume --learning-rate X` trains at X, as on TensorFlow, and a later resume at the
    folder's rate goes back to it."""
    stages = [[1, False], [2, True, {"learning_rate": 0.002}]]
    result = run_worker("train", {"prepared": str(caption_folder),
                                  "run_dir": str(tmp_path / "run"),
                                  "state": str(tmp_path / "state.npz"), "training": {},
                                  "stages": stages})
    assert result["learning_rate"] == pytest.approx(0.002)
    assert len(result["records"]) == 2 and np.isfinite(result["records"][-1]["loss"])
    again = run_worker("train", {"prepared": str(caption_folder),
                                 "run_dir": str(tmp_path / "run"),
                                 "state": str(tmp_path / "state2.npz"), "training": {},
                                 "stages": [[3, True]]})
    assert again["learning_rate"] == pytest.approx(0.01)


def test_train_jax_changes_only_the_settings_it_is_given(translation_folder, tmp_path):
    """The library call with a few settings keeps the prepared folder's others (its learning
    rate, seed, checkpoint interval), as the command line does, rather than the defaults."""
    result = run_worker("train_jax", {"prepared": str(translation_folder),
                                      "run_dir": str(tmp_path / "run"),
                                      "training": {"epochs": 1}})
    training = result["training"]
    assert result["records"] == 1 and training["epochs"] == 1
    assert (training["learning_rate"], training["seed"], training["checkpoint_every"],
            training["batch_size"]) == (0.01, 7, 10, 8)


def test_average_checkpoints_is_the_mean_of_the_newest(translation_folder, single_device_run,
                                                      tmp_path):
    """Floating model values: the float64 mean over the newest checkpoints; integer ones
    (random-generator states) and the optimizer's: the newest's."""
    from pathlib import Path

    from common.training.jax_trainer import STATE_FILE, complete_jax_checkpoints

    run_dir = Path(single_device_run["run_dir"])
    result = run_worker("average", {"prepared": str(translation_folder), "run_dir": str(run_dir),
                                    "state": str(tmp_path / "avg.npz"), "training": {},
                                    "last": 2})
    newest = complete_jax_checkpoints(run_dir / "jax")[:2]
    assert [Path(f) for f in result["folders"]] == newest and len(newest) == 2
    states = [load_state(folder / STATE_FILE) for folder in newest]
    averaged = load_state(tmp_path / "avg.npz")
    assert sorted(averaged) == sorted(states[0])
    moved = 0
    for key, value in averaged.items():
        if key[0] in "tn" and np.issubdtype(value.dtype, np.floating):
            mean = np.mean([s[key].astype(np.float64) for s in states], axis=0)
            np.testing.assert_allclose(value, mean, rtol=1e-6, atol=1e-7, err_msg=key)
            moved += not np.array_equal(value, states[0][key])
        else:
            np.testing.assert_array_equal(value, states[0][key], err_msg=key)
    assert moved > 0  # the two checkpoints differ, so the mean is neither of them


def test_a_diverging_run_stops_without_a_non_finite_checkpoint(translation_folder, tmp_path):
    """The trainer reads each step's loss one step late; a checkpoint step is read first, so
    a step whose loss or weights are not finite is never saved."""
    result = run_worker("diverge", {
        "prepared": str(translation_folder), "run_dir": str(tmp_path / "run"),
        "training": {"learning_rate": 1e12, "clip_norm": None, "checkpoint_every": 1}})
    assert result["error"] is not None and "diverged" in result["error"]
    assert all(result["finite"])


def test_weights_gone_non_finite_at_an_epoch_end_leave_no_record_of_the_epoch(
        translation_folder, tmp_path):
    """The epoch's record was written before the epoch-end save found the weights non-finite:
    a record of an epoch whose checkpoint never existed (TensorFlow checks first)."""
    result = run_worker("weights_diverge_at_epoch_end", {
        "prepared": str(translation_folder), "run_dir": str(tmp_path / "run"),
        "training": {"epochs": 1, "checkpoint_every": 0}})
    assert result["error"] is not None and "NaN or infinite" in result["error"]
    assert result["epoch_records"] == 0 and result["checkpoints"] == []


def test_evaluation_covers_every_example_whatever_the_batch_size(two_bucket_folder, tmp_path):
    """The validation loss of 8-row batches (each bucket's last rows padded) equals that of
    one batch per bucket holding all of it: no example is dropped, and the padding rows add
    nothing."""
    from common.training.prepare import load_prepared

    prepared = load_prepared(two_bucket_folder)
    sizes = sorted(len(v) for k, v in prepared.splits["train"].items() if k.startswith("source."))
    assert len(sizes) == 2 and all(n % 8 for n in sizes)
    results = run_worker("evaluate", {"prepared": str(two_bucket_folder), "split": "train",
                                      "run_dir": str(tmp_path / "run"),
                                      "batch_sizes": [8, max(sizes)]})
    small, whole = results
    assert small["rows"] == whole["rows"] == prepared.num_examples() == 60
    assert small["batches"] == sum(-(-n // 8) for n in sizes)
    assert small["metrics"]["loss"] == pytest.approx(whole["metrics"]["loss"], rel=1e-5)
    assert small["metrics"]["accuracy"] == pytest.approx(whole["metrics"]["accuracy"], rel=1e-5)


def test_captioner_evaluation_pads_without_a_penalty_for_the_padding(caption_folder, tmp_path):
    """The captioner's padding rows (a zero image, no caption) add no doubly stochastic
    penalty, with a fixed tau too (an empty caption used to cost L tau^2)."""
    from common.training.prepare import load_prepared

    captions = load_prepared(caption_folder).num_examples()
    assert captions % 7
    results = run_worker("evaluate", {"prepared": str(caption_folder), "split": "train",
                                      "run_dir": str(tmp_path / "run"),
                                      "patch": {"decoder": {"penalty_tau": 1.0,
                                                            "penalty_weight": 1.0}},
                                      "batch_sizes": [7, captions]})
    small, whole = results
    assert small["rows"] == whole["rows"] == captions
    assert whole["metrics"]["penalty"] > 0
    for key in ("loss", "penalty", "xent"):
        assert small["metrics"][key] == pytest.approx(whole["metrics"][key], rel=1e-5), key


def test_compile_steps_leaves_no_compilation_to_the_timed_epochs(two_bucket_folder, tmp_path):
    result = run_worker("compile_steps", {"prepared": str(two_bucket_folder),
                                          "run_dir": str(tmp_path / "run")})
    assert result["shapes"] == [8, 16]
    assert result["compiled"] == 2  # one per bucket; the folder has no valid split
    assert result["unchanged"]
    assert result["fit_compiles"] == []


def test_a_jax_run_records_the_digests_of_its_vocabularies(single_device_run):
    """The TensorFlow side refuses a run's vocabulary changed since training
    (`RunDir.check_vocabularies`); a JAX run records the digests of the copies it made."""
    import hashlib

    from common.training.run_dir import RunDir

    run = Path(single_device_run["run_dir"])
    listed = (run / "vocab.sha256").read_text().split()
    assert listed[1::2] == ["vocab.source.txt", "vocab.target.txt"]
    for digest, name in zip(listed[::2], listed[1::2]):
        assert digest == hashlib.sha256((run / name).read_bytes()).hexdigest()
    RunDir(run).check_vocabularies()


def test_rbg_dropout_trains_another_stream_of_masks_reproducibly(
        translation_folder, single_device_run, tmp_path):
    """`dropout_rng="rbg"` (XLA's RngBitGenerator, `common.layers.dropout_rng`): the loss
    falls, the weights are not those of Keras's generator (the masks do differ), a run resumed
    after its first epoch ends with the uninterrupted run's weights bit for bit, and the run's
    config.json records the generator."""
    runs = {}
    for name, stages in (("whole", [[2, False]]), ("resumed", [[1, False], [2, True]])):
        runs[name] = run_worker("train", {
            "prepared": str(translation_folder), "run_dir": str(tmp_path / name),
            "state": str(tmp_path / f"{name}.npz"), "training": {"dropout_rng": "rbg"},
            "stages": stages})
    losses = [r["loss"] for r in runs["whole"]["records"]]
    assert losses[-1] < losses[0]
    whole, resumed = load_state(tmp_path / "whole.npz"), load_state(tmp_path / "resumed.npz")
    keras_masks = load_state(single_device_run["state"])
    assert sorted(whole) == sorted(keras_masks) == sorted(resumed)
    for key in whole:
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)
    trainable = [key for key in whole if key.startswith("t")]  # t00000, ...: the weights
    assert trainable and any(not np.array_equal(whole[k], keras_masks[k]) for k in trainable)
    config = json.loads((tmp_path / "whole" / "config.json").read_text(encoding="utf-8"))
    assert config["training"]["dropout_rng"] == "rbg"
