"""The JAX trainer: the loss falls for both families, the run directory is laid out as the
TensorFlow trainer's, and a resumed run ends with the weights of an uninterrupted one.

The runs that the tests check (the module fixture `runs`) are made in one JAX subprocess, one
after the other, each in its own run directory; each test checks its own claim on its own
run. The run that counts what compiles in its process comes first in it; the uninterrupted
run that the resumed ones are compared with is made in another process (`reference`). Both
processes compile with XLA's CPU backend at -O0 (`_env`): these tiny programs run a few dozen
steps, and compiling them is most of the file's time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.jax.conftest import finish_worker, load_state, requires_jax, start_worker, worker_env

pytestmark = [requires_jax, pytest.mark.slow]


def _env() -> dict[str, str]:
    """`worker_env()` with LLVM at -O0 behind XLA's CPU backend: the same programs, about 40%
    less CPU for this file's runs than the default -O2 (measured). Every run that a test
    compares with another is made under it."""
    env = worker_env()
    env["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
    return env


def _result(runs: dict, name: str):
    """The result of task `name` of a batch; a task that crashed fails with its traceback."""
    result = runs[name]
    assert not (isinstance(result, dict) and "crashed" in result), result["crashed"]
    return result


@pytest.fixture(scope="module")
def reference(tmp_path_factory, translation_folder) -> dict:
    """The tiny Transformer trained 2 epochs on one JAX device, in a process of its own: the
    uninterrupted run of the resumed ones. `run_dir`, `state` (its final `.npz`) and
    `result`."""
    root = tmp_path_factory.mktemp("reference")
    args = {"prepared": str(translation_folder), "run_dir": str(root / "run"),
            "state": str(root / "state.npz"), "training": {}}
    return {**args, "result": finish_worker(start_worker("train", args, _env()))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, translation_folder, two_bucket_folder, caption_folder,
         reference) -> dict:
    """The runs that the tests below check, made in one JAX process, by name, each under
    `root/NAME`; `root` too. `compile_steps` first: what compiles in the process after it is
    what its test counts, as in a process of its own. Then the tiny Transformer's runs, the
    tiny captioner's (`lr_again` resumes `lr`'s run, after it), and the rbg ones last: every
    other run uses Keras's generator."""
    root = tmp_path_factory.mktemp("runs")
    translations, captions = str(translation_folder), str(caption_folder)

    def run(name: str, folder: str = translations, directory: str | None = None,
            **extra) -> dict:
        return {"prepared": folder, "run_dir": str(root / (directory or name) / "run"),
                "state": str(root / name / "state.npz"), "training": {}, **extra}

    tasks = {
        "compile_steps": ["compile_steps", {"prepared": str(two_bucket_folder),
                                            "run_dir": str(root / "compile_steps" / "run")}],
        "resumed": ["train", run("resumed", stages=[[1, False], [2, True]])],
        "train_jax": ["train_jax", run("train_jax", training={"epochs": 1})],
        "average": ["average", {**run("average"), "run_dir": reference["run_dir"],
                                "last": 2}],
        "diverge": ["diverge", run("diverge", training={
            "learning_rate": 1e12, "clip_norm": None, "checkpoint_every": 1})],
        "weights_diverge": ["weights_diverge_at_epoch_end", run(
            "weights_diverge", training={"epochs": 1, "checkpoint_every": 0})],
        "evaluate": ["evaluate", {"prepared": str(two_bucket_folder), "split": "train",
                                  "run_dir": str(root / "evaluate" / "run"),
                                  "batch_sizes": [8, _bucket_sizes(two_bucket_folder)[-1]]}],
        "caption_loss_falls": ["train", run("caption_loss_falls", captions)],
        "caption_lr": ["train", run("caption_lr", captions, stages=[
            [1, False], [2, True, {"learning_rate": 0.002}]])],
        "caption_lr_again": ["train", run("caption_lr_again", captions,
                                          directory="caption_lr", stages=[[3, True]])],
        "caption_evaluate": ["evaluate", {**run("caption_evaluate", captions),
                                          "split": "train",
                                          "patch": {"decoder": {"penalty_tau": 1.0,
                                                                "penalty_weight": 1.0}},
                                          "batch_sizes": [7, _num_examples(caption_folder)]}],
        "caption_save_order": ["save_order", run("caption_save_order", captions)],
        "rbg_whole": ["train", run("rbg_whole", training={"dropout_rng": "rbg"},
                                   stages=[[2, False]])],
        "rbg_resumed": ["train", run("rbg_resumed", training={"dropout_rng": "rbg"},
                                     stages=[[1, False], [2, True]])],
    }
    for name in tasks:
        (root / name).mkdir()
    return {**finish_worker(start_worker("batch", {"tasks": tasks}, _env()), timeout=1800),
            "root": root}


def _bucket_sizes(folder: Path) -> list[int]:
    """The rows of each bucket of `folder`'s train split, smallest first."""
    from common.training.prepare import load_prepared

    prepared = load_prepared(folder)
    return sorted(len(v) for k, v in prepared.splits["train"].items() if k.startswith("source."))


def _num_examples(folder: Path) -> int:
    from common.training.prepare import load_prepared

    return load_prepared(folder).num_examples()


def test_transformer_loss_falls_without_tensorflow(reference):
    from common.training.run_dir import RunDir

    result = reference["result"]
    assert result["tensorflow"] is False  # the worker blocks it: nothing asked for it
    first, last = result["records"][0], result["records"][-1]
    assert last["loss"] < first["loss"] - 0.3
    run = RunDir(reference["run_dir"])
    assert run.read_status()["state"] == "finished"
    history = run.read_history()
    assert [r["step"] for r in history if r["kind"] == "epoch"] == [r["step"] for r in
                                                                   result["records"]]
    for name in ("config.json", "vocab.source.txt", "vocab.target.txt", "model.weights.h5"):
        assert (run.path / name).is_file(), name
    assert json.loads((run.path / "config.json").read_text())["family"] == "seq2seq"


def test_captioner_loss_falls(runs):
    result = _result(runs, "caption_loss_falls")
    losses = [r["loss"] for r in result["records"]]
    assert losses[-1] < losses[0]
    assert all(np.isfinite(r["val_loss"]) for r in result["records"])  # shapes has a valid split
    assert result["tensorflow"] is False


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(
        runs, reference):
    """One epoch, a new trainer (as after a kill), then `resume` to the second epoch: the same
    batches, random numbers and updates as the uninterrupted two epochs (made in another
    process), bit for bit."""
    result = _result(runs, "resumed")
    uninterrupted = load_state(reference["state"])
    resumed = load_state(runs["root"] / "resumed" / "state.npz")
    assert sorted(resumed) == sorted(uninterrupted)
    for key, value in uninterrupted.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert result["records"][-1]["step"] == reference["result"]["records"][-1]["step"]


def test_each_checkpoint_is_written_once_and_a_kill_while_validating_loses_no_record(
        runs):
    """A checkpoint due on a pass's last step is the epoch-end one, written once (a kill
    between two writes of it resumed past every batch); validation runs before it, so a run
    killed while validating resumes within the epoch and still writes that epoch's record."""
    result = _result(runs, "caption_save_order")
    steps = result["steps_per_pass"]
    assert result["killed_at"] == {"step": steps, "epoch": 0, "step_in_epoch": steps}
    written = [(p["step"], p["epoch"], p["step_in_epoch"]) for p in result["saved"]]
    # Nothing from the killed run (it had not reached epoch 0's checkpoint), then one write
    # per epoch end from the resumed one: no mid-epoch write at a pass's end.
    assert written == [(steps, 1, 0), (2 * steps, 2, 0)], written
    epochs = [(r["epoch"], r["step"]) for r in result["epochs"]]
    assert epochs == [(1, steps), (2, 2 * steps)], epochs  # records count epochs from 1
    assert all("val_loss" in r and r["loss"] > 0 for r in result["epochs"])


def test_resume_trains_at_the_learning_rate_it_is_given(runs):
    """A constant rate (the captioner's) is optimizer state that the checkpoint brings back:
    `--resume --learning-rate X` trains at X, as on TensorFlow, and a later resume at the
    folder's rate goes back to it."""
    result = _result(runs, "caption_lr")  # epoch 1, then epoch 2 resumed at 0.002
    assert result["learning_rate"] == pytest.approx(0.002)
    assert len(result["records"]) == 2 and np.isfinite(result["records"][-1]["loss"])
    again = _result(runs, "caption_lr_again")  # the same run resumed to epoch 3
    assert again["learning_rate"] == pytest.approx(0.01)


def test_train_jax_changes_only_the_settings_it_is_given(runs):
    """The library call with a few settings keeps the prepared folder's others (its learning
    rate, seed, checkpoint interval), as the command line does, rather than the defaults."""
    result = _result(runs, "train_jax")
    training = result["training"]
    assert result["records"] == 1 and training["epochs"] == 1
    assert (training["learning_rate"], training["seed"], training["checkpoint_every"],
            training["batch_size"]) == (0.01, 7, 10, 8)


def test_average_checkpoints_is_the_mean_of_the_newest(runs, reference):
    """Floating model values: the float64 mean over the newest checkpoints; integer ones
    (random-generator states) and the optimizer's: the newest's."""
    from common.training.jax_trainer import STATE_FILE, complete_jax_checkpoints

    run_dir = Path(reference["run_dir"])
    result = _result(runs, "average")  # of `reference`'s checkpoints
    newest = complete_jax_checkpoints(run_dir / "jax")[:2]
    assert [Path(f) for f in result["folders"]] == newest and len(newest) == 2
    states = [load_state(folder / STATE_FILE) for folder in newest]
    averaged = load_state(runs["root"] / "average" / "state.npz")
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


def test_a_diverging_run_stops_without_a_non_finite_checkpoint(runs):
    """The trainer reads each step's loss one step late; a checkpoint step is read first, so
    a step whose loss or weights are not finite is never saved (learning rate 1e12, no
    clipping, a checkpoint every step)."""
    result = _result(runs, "diverge")
    assert result["error"] is not None and "diverged" in result["error"]
    assert all(result["finite"])


def test_weights_gone_non_finite_at_an_epoch_end_leave_no_record_of_the_epoch(
        runs):
    """The epoch's record was written before the epoch-end save found the weights non-finite:
    a record of an epoch whose checkpoint never existed (TensorFlow checks first)."""
    result = _result(runs, "weights_diverge")
    assert result["error"] is not None and "NaN or infinite" in result["error"]
    assert result["epoch_records"] == 0 and result["checkpoints"] == []


def test_evaluation_covers_every_example_whatever_the_batch_size(runs,
                                                                 two_bucket_folder):
    """The validation loss of 8-row batches (each bucket's last rows padded) equals that of
    one batch per bucket holding all of it: no example is dropped, and the padding rows add
    nothing."""
    sizes = _bucket_sizes(two_bucket_folder)
    assert len(sizes) == 2 and all(n % 8 for n in sizes)
    small, whole = _result(runs, "evaluate")  # at batch sizes 8 and max(sizes)
    assert (small["batch_size"], whole["batch_size"]) == (8, max(sizes))
    assert small["rows"] == whole["rows"] == _num_examples(two_bucket_folder) == 60
    assert small["batches"] == sum(-(-n // 8) for n in sizes)
    assert small["metrics"]["loss"] == pytest.approx(whole["metrics"]["loss"], rel=1e-5)
    assert small["metrics"]["accuracy"] == pytest.approx(whole["metrics"]["accuracy"], rel=1e-5)


def test_captioner_evaluation_pads_without_a_penalty_for_the_padding(runs,
                                                                     caption_folder):
    """The captioner's padding rows (a zero image, no caption) add no doubly stochastic
    penalty, with a fixed tau too (an empty caption used to cost L tau^2)."""
    captions = _num_examples(caption_folder)
    assert captions % 7
    small, whole = _result(runs, "caption_evaluate")  # penalty tau 1 and weight 1
    assert (small["batch_size"], whole["batch_size"]) == (7, captions)
    assert small["rows"] == whole["rows"] == captions
    assert whole["metrics"]["penalty"] > 0
    for key in ("loss", "penalty", "xent"):
        assert small["metrics"][key] == pytest.approx(whole["metrics"][key], rel=1e-5), key


def test_compile_steps_leaves_no_compilation_to_the_timed_epochs(runs):
    """The first run of its process: what compiles there is what this test counts."""
    result = _result(runs, "compile_steps")
    assert result["shapes"] == [8, 16]
    assert result["compiled"] == 2  # one per bucket; the folder has no valid split
    assert result["unchanged"]
    assert result["fit_compiles"] == []


def test_a_jax_run_records_the_digests_of_its_vocabularies(reference):
    """The TensorFlow side refuses a run's vocabulary changed since training
    (`RunDir.check_vocabularies`); a JAX run records the digests of the copies it made."""
    import hashlib

    from common.training.run_dir import RunDir

    run = Path(reference["run_dir"])
    listed = (run / "vocab.sha256").read_text().split()
    assert listed[1::2] == ["vocab.source.txt", "vocab.target.txt"]
    for digest, name in zip(listed[::2], listed[1::2]):
        assert digest == hashlib.sha256((run / name).read_bytes()).hexdigest()
    RunDir(run).check_vocabularies()


def test_rbg_dropout_trains_another_stream_of_masks_reproducibly(
        runs, reference):
    """`dropout_rng="rbg"` (XLA's RngBitGenerator, `common.layers.dropout_rng`): the loss
    falls, the weights are not those of Keras's generator (the masks do differ), a run resumed
    after its first epoch ends with the uninterrupted run's weights bit for bit, and the run's
    config.json records the generator."""
    root = runs["root"]
    losses = [r["loss"] for r in _result(runs, "rbg_whole")["records"]]
    assert losses[-1] < losses[0]
    _result(runs, "rbg_resumed")
    whole = load_state(root / "rbg_whole" / "state.npz")
    resumed = load_state(root / "rbg_resumed" / "state.npz")
    keras_masks = load_state(reference["state"])
    assert sorted(whole) == sorted(keras_masks) == sorted(resumed)
    for key in whole:
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)
    trainable = [key for key in whole if key.startswith("t")]  # t00000, ...: the weights
    assert trainable and any(not np.array_equal(whole[k], keras_masks[k]) for k in trainable)
    config = json.loads((root / "rbg_whole" / "run" / "config.json").read_text(encoding="utf-8"))
    assert config["training"]["dropout_rng"] == "rbg"
