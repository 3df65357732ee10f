"""A new run refused after it wrote its config and vocabularies takes them back, so the
corrected command runs into the same directory (`common.runner.taken_back_on_failure`)."""

import json
import shutil

import pytest

from captioner.cli import main as captioner_main
from common.runner import taken_back_on_failure
from common.training.run_dir import RunDir
from seq2seq.cli import main as seq2seq_main

TINY = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
        "--verbose", "0"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def tsv(tmp_path):
    """One file of pairs: no validation split."""
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"go {i}\tve {i}\n" for i in range(40)), encoding="utf-8")
    return path


def test_a_refusal_after_the_vocabularies_leaves_no_directory(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    command = ["train", "--dataset", "tsv", "--data", str(tsv), "--arch", "transformer",
               "--preset", "tiny", "--verbose", "0", "--out", str(out)]
    assert seq2seq_main([*command, "--early-stopping", "2"]) == 2
    assert "needs validation" in _one_line_error(capsys)
    assert not out.exists()
    # A directory that was there stays, empty (one holding other things is not a run
    # directory: refused before anything, `tests/robustness/test_run_directories.py`).
    out.mkdir()
    assert seq2seq_main([*command, "--early-stopping", "2"]) == 2
    assert "needs validation" in _one_line_error(capsys)
    assert out.is_dir() and not any(out.iterdir())
    # The corrected command runs there.
    assert seq2seq_main([*command, "--epochs", "1", "--steps-per-epoch", "1"]) == 0
    assert (out / "config.json").is_file() and RunDir(out).run_entries()


def test_a_warm_start_of_other_vocabularies_leaves_nothing(tmp_path, capsys):
    source = tmp_path / "source"
    assert seq2seq_main([*TINY, "--out", str(source), "--epochs", "1",
                         "--steps-per-epoch", "1"]) == 0
    out = tmp_path / "warm"
    assert seq2seq_main([*TINY, "--out", str(out), "--max-vocab", "20",
                         "--init-from", str(source)]) == 2
    assert "differs from this run's" in _one_line_error(capsys)
    assert not out.exists()
    # RUN:PATH is the run's own checkpoint: its vocabularies are the ones compared.
    other = tmp_path / "other"
    shutil.copytree(source, other)
    checkpoint = sorted((source / "checkpoints").glob("ckpt-*.index"))[0].with_suffix("")
    assert seq2seq_main([*TINY, "--out", str(out), "--init-from", f"{other}:{checkpoint}"]) == 2
    assert f"is not a checkpoint of {other}" in _one_line_error(capsys)
    assert not out.exists()


def test_an_unknown_best_metric_is_refused_before_anything_is_read(tmp_path, capsys):
    out = tmp_path / "run"
    assert seq2seq_main([*TINY, "--out", str(out), "--best-metric", "blue"]) == 2
    err = _one_line_error(capsys)
    assert "--best-metric 'blue'" in err and "bleu, chrf, exact_match" in err
    assert captioner_main(["train", "--preset", "tiny", "--out", str(out), "--verbose", "0",
                           "--best-metric", "bleu"]) == 2
    assert "cider, bleu_4" in _one_line_error(capsys)
    assert not out.exists()


def test_what_was_there_before_and_a_started_run_are_kept(tmp_path):
    run = RunDir(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt), taken_back_on_failure(run, resume=False):
        run.path.mkdir()
        (run.path / "vocab.model").write_text("x")
        run.checkpoints.mkdir()
        raise KeyboardInterrupt
    assert not run.path.exists()
    # Once the trainer wrote an entry, the run is kept whole.
    with pytest.raises(RuntimeError), taken_back_on_failure(run, resume=False):
        run.path.mkdir()
        run.config.write_text("{}")
        run.write_status("training", epoch=0, step=0)
        raise RuntimeError
    assert run.config.is_file() and run.status.is_file()
    shutil.rmtree(run.path)
    # A resumed run, and a process that does not write the run, take nothing back.
    run.path.mkdir()
    for resume, writer in ((True, lambda: True), (False, lambda: False)):
        with pytest.raises(RuntimeError), taken_back_on_failure(run, resume, writer=writer):
            run.config.write_text("{}")
            raise RuntimeError
        assert run.config.is_file()
        run.config.unlink()


def test_a_fresh_run_refuses_a_stray_subword_model(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "vocab.model").write_bytes(b"not ours")
    assert seq2seq_main([*TINY, "--out", str(out)]) == 2
    assert "holds vocab.model of no run" in _one_line_error(capsys)
    assert (out / "vocab.model").read_bytes() == b"not ours"


@pytest.mark.parametrize("what", ["vocabulary", "config"])
def test_a_full_disk_before_training_is_one_line_and_leaves_nothing(what, tmp_path, capsys,
                                                                     monkeypatch):
    import errno

    import captioner.train
    from common.text import Vocabulary

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        if what == "vocabulary":
            patch.setattr(Vocabulary, "save", full_disk)
        else:
            patch.setattr(captioner.train, "save_json", full_disk)
        assert captioner_main(["train", "--preset", "tiny", "--out", str(out),
                               "--verbose", "0"]) == 2
    err = _one_line_error(capsys)
    assert "No space left on device" in err and str(out) in err
    assert not out.exists()


def test_a_folder_without_a_validation_split_says_validation_is_off(tsv, tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.tsv").write_bytes(tsv.read_bytes())
    command = ["train", "--dataset", "tsv", "--arch", "transformer", "--preset", "tiny",
               "--epochs", "1", "--steps-per-epoch", "1", "--verbose", "0"]
    assert seq2seq_main([*command, "--data", str(folder), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "warning: validation is off" in err and "valid.tsv" in err
    # A single file has no validation split by design: nothing to say.
    assert seq2seq_main([*command, "--data", str(tsv), "--out", str(tmp_path / "b")]) == 0
    assert "validation" not in capsys.readouterr().err


@pytest.mark.parametrize("options, needle", [
    (["--image-size", "2"], "the small-cnn encoder takes sides of at least 4 pixels"),
    (["--encoder", "inception_v3", "--weights", "none", "--image-size", "64"],
     "the inception_v3 encoder takes sides of at least 75 pixels"),
])
def test_an_image_size_the_encoder_cannot_take_is_refused(options, needle, tmp_path, capsys):
    """Keras's own error came from deep inside the model (a pooling of size zero), after the
    run's files were written."""
    out = tmp_path / "run"
    assert captioner_main(["train", "--preset", "tiny", "--out", str(out), "--verbose", "0",
                           *options]) == 2
    assert needle in _one_line_error(capsys)
    assert not out.exists()


def test_the_jax_dropout_generator_on_tensorflow_is_refused_before_the_data(tmp_path, capsys,
                                                                          monkeypatch):
    """`dropout_rng: rbg` (a config file's) is the JAX trainer's: `train` on TensorFlow
    refuses it in one line, before it reads any data (the family's `train` is never reached),
    and leaves no run."""
    from seq2seq import family

    def reached(*args, **kwargs):
        raise AssertionError("train reached with a generator the TensorFlow trainer lacks")

    monkeypatch.setattr(family.FAMILY, "train", reached)
    out = tmp_path / "run"
    lab = tmp_path / "rbg.json"
    lab.write_text(json.dumps({"training": {"dropout_rng": "rbg"}}))
    assert seq2seq_main([*TINY, "--config", str(lab), "--out", str(out)]) == 2
    assert "dropout_rng 'rbg' is the JAX trainer's" in _one_line_error(capsys)
    assert not out.exists()
