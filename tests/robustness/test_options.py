"""Wrong options and wrong files given to `seq2seq`: one line on stderr saying what was
expected, exit status 2, no traceback."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from common.export import savedmodel
from seq2seq.cli import main

TRAIN = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
         "--verbose", "0", "--out", "{tmp}/run"]


def one_line_error(capsys, argv) -> str:
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("seq2seq"), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, needle", [
    (["--preset", "huge"], "Unknown preset 'huge'; choose one of: "),
    (["--score", "psychic", "--arch", "bahdanau"], "Unknown attention score 'psychic'"),
    (["--distribute", "everywhere"], "Unknown distribute 'everywhere'; choose one of: none"),
    (["--cell", "neuron"], "argument --cell: invalid choice: 'neuron'"),
    (["--epochs", "0"], "argument --epochs: expected a positive integer, got 0"),
    (["--batch-size", "-8"], "argument --batch-size: expected a positive integer, got -8"),
    (["--learning-rate", "nan"], "argument --learning-rate: expected a finite number > 0"),
    (["--learning-rate", "inf"], "argument --learning-rate: expected a finite number > 0"),
    (["--learning-rate", "-1"], "argument --learning-rate: expected a finite number > 0, got -1"),
    (["--learning-rate", "0"], "argument --learning-rate: expected a finite number > 0, got 0"),
    (["--dropout", "-0.1"], "argument --dropout: expected a finite number >= 0"),
    (["--seed", "-1"], "seed must be an integer >= 0, got -1"),
    (["--checkpoint-every", "-2"], "checkpoint_every must be an integer >= 0, got -2"),
    (["--steps-per-epoch", "ten"], "argument --steps-per-epoch: expected a positive integer"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate (see seq2seq train --help)"),
])
def test_bad_training_options(extra, needle, tmp_path, capsys):
    argv = [a.format(tmp=tmp_path) for a in TRAIN] + extra
    if "--arch" in extra:
        argv[argv.index("--arch") + 1: argv.index("--arch") + 2] = []
        argv.remove("--arch")
    assert needle in one_line_error(capsys, argv)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("options, needle", [
    (["--beam-size", "0"], "argument --beam-size: expected a positive integer, got 0"),
    (["--batch-size", "0"], "argument --batch-size: expected a positive integer, got 0"),
    (["--max-decode-length", "-1"], "argument --max-decode-length: expected a positive"),
])
def test_bad_translation_options(options, needle, tmp_path, capsys):
    assert needle in one_line_error(capsys, ["translate", str(tmp_path), "x", *options])


def fake_run(path, config=None, vocab=True):
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(config)
    if vocab:
        (path / "vocab.source.txt").write_text("<pad>\n<start>\n<end>\n<unk>\na\n")
        (path / "vocab.target.txt").write_text("<pad>\n<start>\n<end>\n<unk>\nb\n")
    return path


@pytest.mark.parametrize("make, needle", [
    (lambda p: p / "missing", "not a translator run directory"),
    (lambda p: (p / "file").write_text("x") and p / "file", "not a translator run directory"),
    (lambda p: fake_run(p / "r", json.dumps({"family": "captioner"})),
     "holds a 'captioner' run; expected a 'seq2seq' run"),
    (lambda p: fake_run(p / "r", "{not json"), "not valid JSON"),
    (lambda p: fake_run(p / "r", json.dumps({"family": "seq2seq"})),
     "no checkpoint in"),
    (lambda p: fake_run(p / "r", json.dumps({"family": "seq2seq"}), vocab=False),
     "vocab.source.txt: missing; expected the run's vocabulary"),
])
def test_a_run_directory_that_is_not_one(make, needle, tmp_path, capsys):
    path = make(tmp_path)
    assert needle in one_line_error(capsys, ["translate", str(path), "March 3, 1999"])


def savedmodel_of_kind(path, kind):
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x}, input_signature=[tf.TensorSpec([None], tf.string)])
    signatures = {"serving_default": module.f.get_concrete_function()}
    if kind is None:
        tf.saved_model.save(module, str(path), signatures=signatures)
    else:
        savedmodel.save(module, path, signatures, kind)
    return path


@pytest.mark.parametrize("command", ["translate", "serve", "evaluate"])
@pytest.mark.parametrize("kind, needle", [
    ("captioner.captioner", "is a 'captioner.captioner' SavedModel; expected an exported "
                            "translator"),
    (None, "a SavedModel without an export marker; expected an exported translator"),
])
def test_a_savedmodel_of_another_kind(command, kind, needle, tmp_path, capsys):
    path = savedmodel_of_kind(tmp_path / "model", kind)
    extra = {"translate": ["hello"], "serve": [], "evaluate": ["--dataset", "dates"]}[command]
    # (evaluate, as translate and serve, takes an export of a translator)
    assert needle in one_line_error(capsys, [command, str(path), *extra])


@pytest.mark.slow
@pytest.mark.parametrize("options, needle", [
    (["--max-decode-length", "100000"], "max decode length 100000: expected 1..32"),
    (["--attention-layer", "7"], "attention layer 7"),
    (["--attention-head", "9"], "attention head 9"),
    (["--checkpoint", "\u00b2"], "--checkpoint '\u00b2': expected best, last, a step N"),
])
def test_out_of_range_decoding_options_on_a_run(options, needle, models, capsys):
    err = one_line_error(capsys, ["translate", str(models["run directory"]), "March 3",
                                  *options])
    assert needle in err
