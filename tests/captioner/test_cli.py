"""The `captioner` command line: train, evaluate and caption end to end, and its errors."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioner.cli import main
from captioner.datasets import load_split


def _one_line_error(capsys, argv):
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(f"captioner {argv[0]}: error:"), err
    return err


@pytest.mark.parametrize("argv, needle", [
    (["train", "--dataset", "nope", "--out", "{tmp}/r"], "Unknown dataset 'nope'"),
    (["train", "--dataset", "shapes", "--encoder", "alexnet", "--out", "{tmp}/r"],
     "Unknown encoder 'alexnet'"),
    (["train", "--dataset", "shapes", "--score", "psychic", "--out", "{tmp}/r"],
     "Unknown attention score 'psychic'"),
    (["train", "--preset", "huge", "--out", "{tmp}/r"], "Unknown preset 'huge'"),
    (["train", "--dataset", "coco", "--data-dir", "{tmp}/missing", "--out", "{tmp}/r"],
     "missing"),
    (["train", "--out", "{tmp}/r"], "--dataset is required"),
    (["evaluate", "{tmp}"], "not a captioner run directory"),
    (["evaluate", "{tmp}/nothing-here"], "no such run directory"),
    (["caption", "{tmp}", "x.png"], "not a captioner run directory"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert needle in _one_line_error(capsys, argv)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--preset", "tiny", "--out", str(run), "--seed", "3"]) == 0
    return run


@pytest.mark.slow
def test_train_writes_a_finished_run_directory(trained_run):
    for name in ("config.json", "vocab.txt", "history.jsonl", "status.json"):
        assert (trained_run / name).is_file(), name
    assert list((trained_run / "checkpoints").glob("ckpt-*.index"))
    status = json.loads((trained_run / "status.json").read_text())
    assert status["state"] == "finished"
    config = json.loads((trained_run / "config.json").read_text())
    assert config["family"] == "captioner" and config["training"]["seed"] == 3
    assert config["encoder"]["name"] == "small-cnn"  # from the preset


@pytest.mark.slow
def test_train_refuses_to_overwrite_a_run_and_resumes_it(capsys, trained_run):
    assert "already holds a run" in _one_line_error(
        capsys, ["train", "--preset", "tiny", "--out", str(trained_run)])
    assert main(["train", "--out", str(trained_run), "--resume", "--epochs", "2"]) == 0
    status = json.loads((trained_run / "status.json").read_text())
    assert status["state"] == "finished" and status["epoch"] == 2 and status["step"] == 6


@pytest.mark.slow
def test_evaluate_prints_and_writes_the_scores(capsys, trained_run, tmp_path):
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(trained_run), "--dataset", "shapes", "--beam-size", "2",
                 "--json", str(out), "--data-option", "num_images=6"]) == 0
    printed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
    scores = json.loads(out.read_text())
    for name in ("BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr", "attention_correctness",
                 "attention_uniform_baseline", "object_accuracy", "relation_accuracy"):
        assert name in scores, name
        assert name in printed, name  # each score has its own printed line
    assert scores["images"] == 6 and scores["run_state"] == "finished"
    assert 0 <= scores["BLEU-1"] <= 100


@pytest.mark.slow
def test_caption_answers_good_images_and_names_the_bad_one(capsys, trained_run, tmp_path):
    paths = []
    for i, record in enumerate(load_split("shapes", "test", num_images=2)):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(record.image).save(paths[-1])
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    argv = ["caption", str(trained_run), str(paths[0]), str(bad), str(paths[1]), "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    answers = json.loads(captured.out)
    assert [a["image"] for a in answers] == [str(paths[0]), str(paths[1])]
    for answer in answers:
        attention = np.asarray(answer["attention"])
        assert attention.shape == (len(answer["words"]) + answer["finished"], 64)
        assert answer["grid"] == [8, 8]
    assert captured.err.count("\n") == 1 and "broken.png" in captured.err


@pytest.mark.slow
def test_a_coco_folder_without_a_validation_split_says_validation_is_off(
        capsys, tmp_path, shared_data):
    # coco-mini has train2017 alone: training goes on without validation and says so, and an
    # explicit --best-metric, which cannot be honoured, is refused in one line before training.
    coco = str(shared_data / "coco-mini")
    base = ["train", "--dataset", "coco", "--data-dir", coco, "--preset", "tiny",
            "--verbose", "0"]
    err = _one_line_error(capsys, [*base, "--best-metric", "cider", "--out",
                                   str(tmp_path / "best")])
    assert "--best-metric cider needs the validation split" in err and "val2017" in err
    assert not (tmp_path / "best" / "checkpoints").exists()
    assert main([*base, "--out", str(tmp_path / "run")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "validation" in line]
    assert len(warnings) == 1 and "validation is off" in warnings[0]
    assert "val2017" in warnings[0]


def _repeats(words, n):
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) < len(grams)


@pytest.mark.slow
def test_no_repeat_ngram_reaches_caption_and_evaluate(capsys, trained_captioner, tmp_path):
    # The conftest's 200-step run repeats words ("a picture of a yellow square") but not
    # bigrams: --no-repeat-ngram 2 leaves its captions without a bigram twice, and 1 changes
    # them, so that no word comes twice.
    samples = Path(__file__).resolve().parents[2] / "assets" / "samples"
    images = [str(p) for p in sorted(samples.glob("shapes_*.png"))]
    words = {}
    for n in (0, 1, 2):
        for beam in ("1", "3"):
            assert main(["caption", str(trained_captioner), *images, "--json",
                         "--beam-size", beam, "--no-repeat-ngram", str(n)]) == 0
            words[n, beam] = [a["words"] for a in json.loads(capsys.readouterr().out)]
    for beam in ("1", "3"):
        assert any(_repeats(w, 1) for w in words[0, beam])
        assert not any(_repeats(w, 1) for w in words[1, beam])
        assert not any(_repeats(w, 2) for w in words[2, beam])
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(trained_captioner), "--dataset", "shapes", "--json", str(out),
                 "--data-option", "num_images=4", "--no-repeat-ngram", "2"]) == 0
    assert json.loads(out.read_text())["no_repeat_ngram"] == 2


@pytest.mark.parametrize("command", ["caption", "evaluate"])
@pytest.mark.parametrize("value", ["-1", "2.5", "two"])
def test_a_bad_no_repeat_ngram_is_a_one_line_error_naming_it(capsys, tmp_path, command, value):
    argv = [command, str(tmp_path), *(["x.png"] if command == "caption" else []),
            "--no-repeat-ngram", value]
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "argument --no-repeat-ngram: expected an integer >= 0" in err and value in err
