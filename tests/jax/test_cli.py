"""The JAX path from the command line: `prepare`, `KERAS_BACKEND=jax train --prepared`, then
the TensorFlow commands read the run (its `model.weights.h5`) and export it."""

import subprocess
import sys

import pytest

from seq2seq.cli import main
from tests.jax.conftest import REPO, requires_jax, worker_env


def _run(*argv, backend="jax"):
    result = subprocess.run([sys.executable, "-m", "seq2seq", *argv], env=worker_env(backend),
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


@requires_jax
@pytest.mark.slow
def test_prepare_train_on_jax_then_translate_and_export_with_tensorflow(tmp_path, capsys):
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    status, out, err = _run("prepare", "--dataset", "dates", "--arch", "transformer", "--preset",
                            "tiny", "--out", str(prepared))
    assert status == 0, err[-2000:]
    status, out, err = _run("train", "--prepared", str(prepared), "--out", str(run),
                            "--epochs", "2", "--distribute", "data-parallel")
    assert status == 0, err[-2000:]
    assert (run / "model.weights.h5").is_file() and not (run / "checkpoints").exists()

    capsys.readouterr()
    assert main(["translate", str(run), "Nov 3, 1999", "12 May 2020"]) == 0
    in_process = capsys.readouterr().out
    assert main(["export", str(run), str(tmp_path / "export"), "--beam-sizes", "1"]) == 0
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "export"), "Nov 3, 1999", "12 May 2020"]) == 0
    assert capsys.readouterr().out == in_process


@requires_jax
@pytest.mark.slow
def test_jax_training_without_a_prepared_folder_or_with_model_options_is_one_line(tmp_path):
    status, _, err = _run("train", "--dataset", "dates", "--arch", "transformer", "--out",
                          str(tmp_path / "r"))
    assert status == 2 and "training on JAX reads a prepared folder" in err
    status, _, err = _run("train", "--prepared", str(tmp_path / "nothing"), "--out",
                          str(tmp_path / "r"), backend="tensorflow")
    assert status == 2 and "training on JAX reads a prepared folder" in err
