"""The JAX path from the command line: `prepare`, `KERAS_BACKEND=jax train --prepared`, then
the TensorFlow commands read the run (its `model.weights.h5`) and export it.

A command under KERAS_BACKEND=jax runs in a subprocess (`_run`); a TensorFlow one runs
in-process (`_main`: this process has the TensorFlow backend), its file descriptors captured,
so that a message is still one line of all it writes."""

import shutil
import subprocess
import sys

import pytest

from seq2seq.cli import main
from tests.jax.conftest import REPO, requires_jax, worker_env


def _run(*argv, backend="jax"):
    result = subprocess.run([sys.executable, "-m", "seq2seq", *argv], env=worker_env(backend),
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


def _main(capfd, *argv):
    """`seq2seq ARGV` in this process, on TensorFlow: (status, stdout, stderr)."""
    capfd.readouterr()
    status = main(list(argv))
    out, err = capfd.readouterr()
    return status, out, err


@requires_jax
@pytest.mark.slow
def test_prepare_train_on_jax_then_translate_and_export_with_tensorflow(dates_run, tmp_path,
                                                                        capsys):
    """`dates_folders` ran `prepare` and `dates_run` `train --distribute data-parallel` on the
    command line (under KERAS_BACKEND=jax); this process reads the run on TensorFlow."""
    run = dates_run
    assert (run / "model.weights.h5").is_file() and not (run / "checkpoints").exists()

    capsys.readouterr()
    assert main(["translate", str(run), "Nov 3, 1999", "12 May 2020"]) == 0
    in_process = capsys.readouterr().out
    assert main(["export", str(run), str(tmp_path / "export"), "--beam-sizes", "1"]) == 0
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "export"), "Nov 3, 1999", "12 May 2020"]) == 0
    assert capsys.readouterr().out == in_process
    # `average` reads TensorFlow checkpoints; for a JAX run it says where its own are.
    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "avg")]) == 2
    assert f"this run trained on JAX: its checkpoints are in {run / 'jax'}" in (
        capsys.readouterr().err)


@requires_jax
@pytest.mark.slow
def test_jax_training_without_a_prepared_folder_or_with_model_options_is_one_line(tmp_path,
                                                                                 capfd):
    status, _, err = _run("train", "--dataset", "dates", "--arch", "transformer", "--out",
                          str(tmp_path / "r"))
    assert status == 2 and "training on JAX reads a prepared folder" in err
    status, _, err = _main(capfd, "train", "--prepared", str(tmp_path / "nothing"), "--out",
                           str(tmp_path / "r"))
    assert status == 2 and "training on JAX reads a prepared folder" in err


@pytest.fixture(scope="module")
def dates_folders(tmp_path_factory):
    """Two prepared `dates` folders of the tiny Transformer, the second 24 wide (another
    model): the first by `prepare` under KERAS_BACKEND=jax, the second in this process."""
    root = tmp_path_factory.mktemp("dates")
    prepare = ["prepare", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny"]
    status, _, err = _run(*prepare, "--out", str(root / "a"))
    assert status == 0, err[-2000:]
    assert main([*prepare, "--out", str(root / "b"), "--hidden-dim", "24"]) == 0
    return root / "a", root / "b"


@pytest.fixture(scope="module")
def dates_run(dates_folders, tmp_path_factory):
    """A JAX run of the first folder from the command line: one epoch of 2 steps of 16 pairs,
    seed 7, data-parallel (tests that train on, or write into, a run take a copy)."""
    run = tmp_path_factory.mktemp("dates-run") / "run"
    status, _, err = _run("train", "--prepared", str(dates_folders[0]), "--out", str(run),
                          "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "16",
                          "--seed", "7", "--distribute", "data-parallel",
                          "--validation-examples", "0")
    assert status == 0, err[-2000:]
    return run


@requires_jax
@pytest.mark.slow
def test_a_resumed_jax_run_keeps_its_settings_and_refuses_another_run_untouched(
        dates_folders, dates_run, tmp_path, capfd):
    """`--resume` continues with the run's own training settings (as on TensorFlow), and a
    run of another model, or a TensorFlow run, is refused in one line before anything of it
    is written."""
    import json

    mine, other = dates_folders
    run = tmp_path / "run"
    shutil.copytree(dates_run, run)  # 1 epoch of 2 steps, batch size 16, seed 7
    status, _, err = _run("train", "--prepared", str(mine), "--out", str(run), "--epochs", "2",
                          "--resume")
    assert status == 0, err[-2000:]
    training = json.loads((run / "config.json").read_text())["training"]
    assert (training["batch_size"], training["seed"], training["epochs"],
            training["steps_per_epoch"]) == (16, 7, 2, 2)
    # The run's validation setting kept, and what the JAX trainer does where it has no
    # choice (`JAX_TRAINING_FACTS`), not the TensorFlow trainer's default `jit_compile` None.
    assert (training["validation_examples"], training["validation_beam_size"],
            training["jit_compile"], training["deterministic"]) == (0, 1, True, False)
    epochs = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    epochs = [r for r in epochs if r["kind"] == "epoch"]
    assert [r["step"] for r in epochs] == [2, 4]

    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    status, _, err = _run("train", "--prepared", str(other), "--out", str(run), "--resume")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"was trained from another prepared folder than {other}" in err
    assert "model.transformer.hidden_dim" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    # The TensorFlow trainer does not resume it either: it trained over it from scratch,
    # history included.
    status, _, err = _main(capfd, "train", "--dataset", "dates", "--arch", "transformer",
                           "--preset", "tiny", "--out", str(run), "--resume")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "is a run of the JAX trainer" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    tf_run = tmp_path / "tf-run"
    shutil.copytree(run, tf_run)
    shutil.rmtree(tf_run / "jax")
    (tf_run / "checkpoints").mkdir()
    (tf_run / "checkpoints" / "ckpt-4.index").write_bytes(b"")
    history = (tf_run / "history.jsonl").read_bytes()
    status, _, err = _run("train", "--prepared", str(mine), "--out", str(tf_run), "--resume")
    assert status == 2 and "is a TensorFlow run (checkpoints/ckpt-N)" in err
    assert (tf_run / "history.jsonl").read_bytes() == history


@requires_jax
@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--early-stopping", "3", "--validation-beam-size", "3"],
     "--validation-beam-size above 1 needs the tensorflow trainer"),
    (["--deterministic"], "--deterministic needs the tensorflow trainer"),
    (["--model-parallel", "2"], "--model-parallel 2 needs --distribute model-parallel"),
    (["--distribute", "model-parallel", "--model-parallel", "3"],
     "model_parallel 3 does not divide the 2 devices"),
    (["--distribute", "model-parallel", "--model-parallel", "4"],  # 4 devices, 2 heads
     "model_parallel 4 does not divide the model: a weight of shape (8, 2, 4) is split"),
])
def test_jax_training_refuses_what_it_would_not_do(dates_folders, tmp_path, args, message):
    devices = 4 if "4" in args else 2
    result = subprocess.run([sys.executable, "-m", "seq2seq", "train", "--prepared",
                             str(dates_folders[0]), "--out", str(tmp_path / "r"), *args],
                            env=worker_env("jax", devices=devices), cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


@requires_jax
@pytest.mark.slow
def test_model_parallel_from_the_command_line_splits_the_model(dates_folders, tmp_path, capfd):
    """`--distribute model-parallel --model-parallel 2` over two devices trains, and on
    TensorFlow `--model-parallel` is refused."""
    import json

    result = subprocess.run([sys.executable, "-m", "seq2seq", "train", "--prepared",
                             str(dates_folders[0]), "--out", str(tmp_path / "r"), "--epochs", "1",
                             "--steps-per-epoch", "2", "--distribute", "model-parallel",
                             "--model-parallel", "2", "--validation-examples", "0"],
                            env=worker_env("jax", devices=2), cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert status["mesh"] == {"batch": 1, "model": 2} and status["state"] == "finished"
    status, _, err = _main(capfd, "train", "--dataset", "dates", "--arch", "transformer", "--out",
                           str(tmp_path / "t"), "--model-parallel", "2")
    assert status == 2 and "--model-parallel splits a model over JAX devices" in err


@requires_jax
@pytest.mark.slow
def test_jax_path_mistakes_are_one_line_and_lose_nothing(dates_folders, tmp_path, capfd):
    """The prepared folder given as the run directory, `prepare` into a path that cannot be
    a folder or with settings the JAX trainer would not honour, a TensorFlow command under
    KERAS_BACKEND=jax, a seed out of range: each one line, exit 2, nothing written."""
    mine = dates_folders[0]
    before = {p.name: p.read_bytes() for p in mine.iterdir() if p.is_file()}
    status, _, err = _run("train", "--prepared", str(mine), "--out", str(mine), "--epochs", "1")
    assert status == 2 and f"{mine} is the prepared folder" in err, err[-2000:]
    assert {p.name: p.read_bytes() for p in mine.iterdir() if p.is_file()} == before

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for args, message in (
            (["--out", str(a_file / "sub")], f"cannot write {a_file / 'sub'}: "),
            (["--out", str(tmp_path / "p"), "--early-stopping", "1", "--deterministic"],
             "--deterministic needs the tensorflow trainer (not the jax one"),
            (["--out", str(tmp_path / "p"), "--seed", str(2**32)],
             "seed must be an integer <= 4294967295")):
        status, _, err = _main(capfd, "prepare", "--dataset", "dates", "--arch", "transformer",
                               "--preset", "tiny", *args)
        assert status == 2 and message in err, err[-2000:]
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()

    status, _, err = _run("translate", str(tmp_path / "run"), "Nov 3, 1999")
    assert status == 2 and "translate runs on the TensorFlow backend; got KERAS_BACKEND=jax" \
        in err
    assert len(err.strip().splitlines()) == 1


@requires_jax
@pytest.mark.slow
def test_a_jax_run_with_imported_checkpoints_is_told_how_to_resume(dates_folders, dates_run,
                                                                  tmp_path):
    """`import_jax_weights` writes TensorFlow checkpoints beside the JAX ones: a JAX resume
    then names them (training on would leave them stale), rather than calling the run a
    TensorFlow run."""
    from common.training.cross_backend import import_jax_weights

    run = tmp_path / "run"
    shutil.copytree(dates_run, run)  # 1 epoch of 2 steps
    import_jax_weights(run)
    status, _, err = _run("train", "--prepared", str(dates_folders[0]), "--out", str(run),
                          "--epochs", "2", "--resume")
    assert status == 2 and "holds TensorFlow checkpoints imported from this JAX run" in err
    assert f"move {run}/checkpoints away to resume on JAX" in err
