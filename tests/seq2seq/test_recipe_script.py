"""`scripts/translator_recipe.py`: one recipe trained per seed with the package's commands, its
checkpoints (best, last, the average of the last N) scored at each length penalty, and a
summary line per (checkpoint, penalty) whose spread is that of the seeds' lines.

The recipe of two seeds runs in this process, its `seq2seq` commands too (`seq2seq.cli.main`
with the arguments it gives `python -m seq2seq`); the recipe of one seed runs as a user runs
it, every command a process of its own."""

import contextlib
import io
import json
import os
import subprocess
import sys
from operator import itemgetter
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.benchmarks import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "translator_recipe.py"
SPA_ENG = REPO.parent / "shared" / "data" / "spa-eng"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=900, env=ENV, cwd=REPO)


def _seq2seq_in_process(*args: str, quiet: bool = False) -> subprocess.CompletedProcess:
    """What the recipe's `_seq2seq` gives for `python -m seq2seq ARGS`, from `main(ARGS)`."""
    from seq2seq.cli import main

    if not quiet:
        return subprocess.CompletedProcess(args, main(list(args)))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def _run_in_process(monkeypatch, capsys, *args: str) -> subprocess.CompletedProcess:
    """The recipe's `main(ARGS)` here, its `seq2seq` commands in this process too."""
    recipe = load_script("translator_recipe")
    monkeypatch.setattr(recipe, "_seq2seq", _seq2seq_in_process)
    capsys.readouterr()
    status = recipe.main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, out, err)


@pytest.fixture
def data(tmp_path):
    if not SPA_ENG.is_dir():
        pytest.skip("needs ../shared/data/spa-eng")
    folder = tmp_path / "data"
    folder.mkdir()
    for split, rows in (("train", 400), ("valid", 24), ("test", 24)):
        lines = (SPA_ENG / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[:rows]
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.mark.slow
def test_a_recipe_is_trained_per_seed_scored_and_summarized(tmp_path, data, monkeypatch,
                                                            capsys):
    # Runs that keep no best checkpoint (`--best-metric none`): their last and their average
    # are scored, and each epoch decodes no validation sentences.
    out = tmp_path / "runs"
    done = _run_in_process(monkeypatch, capsys, "r", "--data", str(data), "--seeds", "1,2",
                           "--average", "2", "--length-penalties", "0.6,1.5", "--beam-size",
                           "2", "--out-dir", str(out), "--", "--arch", "transformer",
                           "--preset", "tiny", "--epochs", "2", "--best-metric", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines == [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    runs = [line for line in lines if line.get("kind") != "summary"]
    summaries = [line for line in lines if line.get("kind") == "summary"]
    labels = {r["checkpoint"] for r in runs}
    assert labels == {"last", "average-2"}
    assert len(runs) == 2 * len(labels) * 2 and len(summaries) == len(labels) * 2
    for seed in (1, 2):
        config = json.loads((out / f"r-seed{seed}" / "config.json").read_text())
        assert config["training"]["seed"] == seed and config["training"]["epochs"] == 2
        assert (out / f"r-seed{seed}-avg2" / "checkpoints").is_dir()

    # The last checkpoint's score is what `seq2seq evaluate` gives for it.
    from seq2seq.evaluate import evaluate

    row = next(r for r in runs if r["seed"] == 1 and r["checkpoint"] == "last"
               and r["length_penalty"] == 1.5)
    direct = evaluate(out / "r-seed1", data=str(data / "valid.tsv"), beam_size=2,
                      length_penalty=1.5, checkpoint="last", progress=False)
    assert row["bleu"] == pytest.approx(direct["bleu"], abs=0.01)
    assert row["chrf"] == pytest.approx(direct["chrf"], abs=0.01)

    # The training's curve and rate are the run's history.
    for seed in (1, 2):
        history = [json.loads(line) for line in
                   (out / f"r-seed{seed}" / "history.jsonl").read_text().splitlines()]
        epochs = [h for h in history if h["kind"] == "epoch"]
        row = next(r for r in runs if r["seed"] == seed)
        assert row["epoch_loss"] == pytest.approx([e["loss"] for e in epochs], abs=0.01)
        assert row["train_loss"] == row["epoch_loss"][-1] and len(row["epoch_loss"]) == 2
        assert row["examples_per_s"] == pytest.approx(
            np.median([e["examples_per_s"] for e in epochs]), abs=0.01)

    for summary in summaries:
        same = [r for r in runs if r["checkpoint"] == summary["checkpoint"]
                and r["length_penalty"] == summary["length_penalty"]]
        values = [r["bleu"] for r in same]
        assert summary["runs"] == 2
        assert summary["bleu"]["mean"] == pytest.approx(np.mean(values), abs=0.01)
        assert summary["bleu"]["std"] == pytest.approx(np.std(values, ddof=1), abs=0.01)
        curves = np.array([r["epoch_loss"] for r in same])
        assert summary["epoch_loss"]["mean"] == pytest.approx(list(curves.mean(axis=0)),
                                                              abs=0.01)

    # Summarizing the recorded seeds afterwards (as for seeds trained by separate commands)
    # gives the lines the training command wrote, up to the rounding of the recorded lines
    # it reads, and appends them.
    again = _run("r", "--summarize", "--seeds", "1,2", "--beam-size", "2", "--out-dir", str(out))
    assert again.returncode == 0, again.stderr[-2000:]
    resummarized = [json.loads(line) for line in again.stdout.splitlines()]
    key = itemgetter("checkpoint", "length_penalty")
    for new, old in zip(sorted(resummarized, key=key), sorted(summaries, key=key), strict=True):
        assert new.keys() == old.keys()
        for field, value in old.items():
            if isinstance(value, dict):
                for stat in value:
                    assert new[field][stat] == pytest.approx(value[stat], abs=0.02), field
            else:
                assert new[field] == value
    assert len((out / "results.jsonl").read_text().splitlines()) == len(lines) + len(summaries)

    # The candidate chosen on valid, scored on test: one checkpoint at one penalty, once.
    recipe = ["r", "--data", str(data), "--seeds", "1", "--average", "2", "--beam-size", "2",
              "--out-dir", str(out), "--split", "test", "--checkpoint", "average-2",
              "--length-penalties", "1.5", "--", "--arch", "transformer", "--preset", "tiny",
              "--epochs", "2", "--best-metric", "none"]
    done = _run_in_process(monkeypatch, capsys, *recipe)
    assert done.returncode == 0, done.stderr[-2000:]
    (test, summary) = [json.loads(line) for line in done.stdout.splitlines()
                       if line.startswith("{")]
    assert (test["split"], test["checkpoint"], test["length_penalty"]) == (
        "test", "average-2", 1.5)
    assert (test["chosen_on"], test["test_scored"], test["seed"]) == ("valid", 1, 1)
    assert summary["chosen_on"] == "valid" and "test_scored" not in summary
    recorded = (out / "results.jsonl").read_text()
    again = _run_in_process(monkeypatch, capsys, *recipe)
    assert again.returncode == 2 and "holds test lines of r for seed 1 already" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert (out / "results.jsonl").read_text() == recorded


@pytest.mark.slow
def test_without_length_penalties_each_checkpoint_is_scored_at_the_runs_own(tmp_path, data):
    # From the command line, each `seq2seq` command a process of its own; the run keeps a best
    # checkpoint by validation (the preset's), which is scored beside the last.
    out = tmp_path / "runs"
    done = _run("r", "--data", str(data), "--seeds", "3", "--beam-size", "2", "--out-dir",
                str(out), "--", "--arch", "transformer", "--preset", "tiny",
                "--length-penalty", "1.3")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    runs = [line for line in lines if line.get("kind") != "summary"]
    assert [r["checkpoint"] for r in runs] == ["best", "last"]
    assert len(lines) == 2 * len(runs)  # one summary per row: one seed
    assert {line["length_penalty"] for line in lines} == {1.3}


def _line(seed, bleu, checkpoint="last", penalty=1.0, train_args=("--preset", "x"), **more):
    return {"name": "r", "seed": seed, "checkpoint": checkpoint, "length_penalty": penalty,
            "beam_size": 4, "split": "valid", "bleu": bleu, "epoch_loss": [5.0 + seed, bleu],
            "train_args": list(train_args), **more}


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_summarize_takes_each_seeds_latest_line_and_only_this_recipes(tmp_path):
    _write(tmp_path / "results.jsonl", [
        _line(1, 10.0), _line(2, 99.0), _line(2, 14.0),  # seed 2 was rerun: 14.0 counts
        _line(3, 50.0),  # a seed not asked for
        _line(1, 70.0, beam_size=1), _line(1, 70.0, split="test"), {**_line(1, 70.0), "name": "o"},
        {"name": "r", "kind": "summary", "checkpoint": "last", "length_penalty": 1.0}])
    done = _run("r", "--summarize", "--seeds", "1,2", "--out-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    (summary,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert summary["kind"] == "summary" and summary["seeds"] == [1, 2] and summary["runs"] == 2
    assert summary["bleu"]["mean"] == pytest.approx(np.mean([10.0, 14.0]), abs=0.01)
    assert summary["bleu"]["std"] == pytest.approx(np.std([10.0, 14.0], ddof=1), abs=0.01)
    assert summary["epoch_loss"]["mean"] == pytest.approx([6.5, 12.0])
    assert summary["train_args"] == ["--preset", "x"]
    assert json.loads((tmp_path / "results.jsonl").read_text().splitlines()[-1]) == summary


@pytest.mark.parametrize("lines, message", [
    ([], "no line for r"),
    ([_line(1, 10.0), _line(2, 12.0), _line(1, 11.0, checkpoint="best")],
     "seed 2 has no best line at length penalty 1.0"),
    ([_line(1, 10.0), _line(2, 12.0, train_args=("--preset", "y"))],
     "trained with different options")])
def test_summarize_refuses_what_does_not_match(tmp_path, lines, message):
    _write(tmp_path / "results.jsonl", lines)
    done = _run("r", "--summarize", "--seeds", "1,2", "--out-dir", str(tmp_path))
    assert done.returncode == 2 and message in done.stderr, done.stderr[-500:]
    assert "Traceback" not in done.stderr
    assert (tmp_path / "results.jsonl").read_text().count("\n") == len(lines)


def test_summarize_names_a_corrupt_line(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(_line(1, 10.0)) + '\n{"name": "r"\n')
    done = _run("r", "--summarize", "--seeds", "1", "--out-dir", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "results.jsonl, line 2: not JSON" in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [
    ["--seeds", "1,1"], ["--split", "nope"], ["--", "--out", "x"], ["--beam-size", "0"],
    ["--length-penalties", "0.6,-1"], ["--summarize", "--", "--epochs", "2"]])
def test_bad_options_are_one_line_errors(tmp_path, data, args):
    done = _run("bad", "--data", str(data), "--out-dir", str(tmp_path), *args)
    assert done.returncode == 2, done.stderr[-500:]
    assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith(
        "translator_recipe.py: error:")
