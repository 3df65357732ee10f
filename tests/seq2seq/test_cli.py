"""`seq2seq train / evaluate / translate` end to end on the dates task, and their errors."""

import io
import json

import pytest

from seq2seq.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--out", str(out), "--verbose", "0"])
    assert status == 0
    return out


@pytest.mark.slow
def test_train_writes_a_run_directory(run_dir):
    for name in ("config.json", "vocab.source.txt", "vocab.target.txt", "history.jsonl",
                 "status.json", "checkpoints"):
        assert (run_dir / name).exists(), name
    config = json.loads((run_dir / "config.json").read_text())
    assert config["family"] == "seq2seq"
    assert config["model"]["arch"] == "transformer"
    assert config["training"]["steps_per_epoch"] == 3
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"


@pytest.mark.slow
def test_evaluate_prints_and_writes_scores(run_dir, tmp_path, capsys):
    out = tmp_path / "scores.json"
    status = main(["evaluate", str(run_dir), "--dataset", "dates", "--limit", "20",
                   "--beam-size", "2", "--json", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    for name in ("bleu", "chrf", "exact_match", "bleu_signature"):
        assert name in printed
    scores = json.loads(out.read_text())
    assert scores["sentences"] == 20
    assert 0 <= scores["bleu"] <= 100
    assert "tok:13a" in scores["bleu_signature"]


@pytest.mark.slow
def test_evaluate_on_a_tsv_file(run_dir, tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("March 3, 1999\t1999-03-03\n25/11/2026\t2026-11-25\n", encoding="utf-8")
    assert main(["evaluate", str(run_dir), "--data", str(data)]) == 0
    assert "exact_match" in capsys.readouterr().out


@pytest.mark.slow
def test_translate_reports_bad_lines_and_translates_the_rest(run_dir, monkeypatch, capsys):
    lines = ["March 3, 1999", "   ", "25th of November 2026 🎉 \x07 zzz",
             " ".join(["1"] * 200), ""]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    status = main(["translate", str(run_dir), "--json"])
    captured = capsys.readouterr()
    assert status == 2
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    assert "error" not in records[0] and "error" not in records[2]
    assert records[0]["tokens"] and records[2]["tokens"]
    assert "empty" in records[1]["error"] and "empty" in records[4]["error"]
    assert "at most" in records[3]["error"]
    errors = [line for line in captured.err.splitlines() if "warning" not in line]
    assert len(errors) == 3
    assert all(line.startswith("seq2seq translate: line ") for line in errors)


@pytest.mark.slow
def test_translate_arguments_plain_text(run_dir, capsys):
    assert main(["translate", str(run_dir), "March 3, 1999", "3/3/1999"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_wrong_arch_is_a_one_line_error(tmp_path, capsys):
    status = main(["train", "--dataset", "dates", "--arch", "rnn", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "bahdanau, seq2seq-noattn, transformer" in err


def test_missing_data_file_is_a_one_line_error(tmp_path, capsys):
    status = main(["train", "--dataset", "tsv", "--data", str(tmp_path / "nope.tsv"),
                   "--arch", "bahdanau", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "nope.tsv" in err
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_a_directory_that_is_not_a_run_is_a_one_line_error(command, tmp_path, capsys):
    argv = [command, str(tmp_path)] + (["--dataset", "dates"] if command == "evaluate" else
                                       ["hello"])
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "not a translator run directory" in err


@pytest.mark.slow
def test_training_into_an_existing_run_needs_resume(run_dir, capsys):
    status = main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                   "--out", str(run_dir), "--verbose", "0"])
    assert status == 2
    assert "--resume" in capsys.readouterr().err


def _bigrams(tokens):
    return list(zip(tokens, tokens[1:]))


@pytest.mark.slow
def test_no_repeat_ngram_2_leaves_no_bigram_twice_in_translate_and_evaluate(run_dir, tmp_path,
                                                                           capsys):
    texts = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001"]
    outputs = {}
    for ban in ([], ["--no-repeat-ngram", "2"]):
        for beam in ("1", "2"):
            assert main(["translate", str(run_dir), "--json", "--beam-size", beam, *ban,
                         *texts]) == 0
            lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            outputs[bool(ban), beam] = [line["tokens"] for line in lines]
    for beam in ("1", "2"):
        # The tiny run repeats itself; with the ban no output holds a bigram twice.
        assert any(len(set(_bigrams(t))) < len(_bigrams(t)) for t in outputs[False, beam])
        assert all(len(set(_bigrams(t))) == len(_bigrams(t)) for t in outputs[True, beam])
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(run_dir), "--dataset", "dates", "--limit", "4",
                 "--no-repeat-ngram", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["no_repeat_ngram"] == 2


@pytest.mark.parametrize("command", ["translate", "evaluate"])
@pytest.mark.parametrize("value", ["-1", "2.5", "two"])
def test_a_bad_no_repeat_ngram_is_a_one_line_error_naming_it(command, value, tmp_path, capsys):
    argv = [command, str(tmp_path), "--no-repeat-ngram", value]
    status = main(argv + (["--dataset", "dates"] if command == "evaluate" else ["hello"]))
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and value in err
    assert "argument --no-repeat-ngram: expected an integer >= 0" in err
