"""`seq2seq train / evaluate / translate` on odd input: refused in one line (exit 2) where an
option would be ignored or a file could not be what it claims, read right where the text is
odd but good (NEL in SentencePiece text, a UTF-8 byte order mark)."""

import codecs
import io
import json

import pytest

from seq2seq.cli import main

EN = ["i am here", "you are there", "we go home", "they eat bread", "he is tall"]
ES = ["estoy aquí", "estás allí", "vamos a casa", "comen pan", "él es alto"]
LINES = [f"{EN[i % 5]}\t{ES[i % 5]}" for i in range(30)]
TINY = ["--arch", "bahdanau", "--preset", "tiny", "--epochs", "1", "--steps-per-epoch", "2",
        "--verbose", "0"]


def _tsv(path, lines, bom=b""):
    path.write_bytes(bom + ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def bahdanau_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    out = folder / "bahdanau"
    data = _tsv(folder / "pairs.tsv", LINES)
    assert main(["train", "--dataset", "tsv", "--data", str(data), *TINY, "--out", str(out)]) == 0
    return out


def test_sentencepiece_trains_on_text_with_a_next_line_character(tmp_path):
    data = _tsv(tmp_path / "pairs.tsv", [*LINES, "wait\u0085 what\tespera\u0085 qué"])
    out = tmp_path / "run"
    assert main(["train", "--dataset", "tsv", "--data", str(data), "--vocab", "sentencepiece",
                 "--vocab-size", "28", *TINY, "--out", str(out)]) == 0
    assert (out / "vocab.source.model").is_file()


def test_a_utf16_file_is_refused_before_a_run_is_made(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_bytes(("\n".join(LINES) + "\n").encode("utf-16"))
    status = main(["train", "--dataset", "tsv", "--data", str(data), *TINY,
                   "--out", str(tmp_path / "run")])
    assert status == 2
    assert "UTF-16" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_dates_with_a_data_file_is_refused(tmp_path, capsys):
    data = _tsv(tmp_path / "pairs.tsv", LINES)
    status = main(["train", "--dataset", "dates", "--data", str(data), *TINY,
                   "--out", str(tmp_path / "run")])
    assert status == 2
    assert "reads no file" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("options", [["--attention-head", "5"], ["--attention-layer", "7"],
                                     ["--attention-layer", "0", "--attention-head", "0"]])
def test_attention_options_are_refused_for_a_model_without_heads(bahdanau_run, capsys,
                                                                 options):
    status = main(["translate", str(bahdanau_run), "i am here", *options])
    assert status == 2
    err = _one_line_error(capsys)
    assert options[0] in err and "bahdanau" in err and "transformer" in err
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_evaluate_and_export_refuse_attention_options_for_a_model_without_heads(
        bahdanau_run, tmp_path, capsys, command):
    """They were ignored: an evaluation or export "of head 3" was the model's one attention."""
    data = _tsv(tmp_path / "test.tsv", LINES[:5])
    where = (["--data", str(data), "--json", str(tmp_path / "s.json")] if command == "evaluate"
             else [str(tmp_path / "export")])
    status = main([command, str(bahdanau_run), *where, "--attention-head", "3"])
    assert status == 2
    err = _one_line_error(capsys)
    assert "--attention-head" in err and "bahdanau" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.tsv"]


def test_no_input_lines_with_figures_is_refused(bahdanau_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    status = main(["translate", str(bahdanau_run), "--plot", str(tmp_path / "p.png"),
                   "--html", str(tmp_path / "p.html")])
    assert status == 2
    assert "nothing to translate" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_no_input_lines_without_figures_is_an_empty_output(bahdanau_run, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["translate", str(bahdanau_run)]) == 0  # a filter given nothing
    assert capsys.readouterr().out == ""


def test_evaluate_a_folder_says_it_is_a_folder(bahdanau_run, tmp_path, capsys):
    status = main(["evaluate", str(bahdanau_run), "--data", str(tmp_path)])
    assert status == 2
    err = _one_line_error(capsys)
    assert "is a folder" in err and "no such file" not in err


def test_a_byte_order_mark_does_not_split_a_source_from_its_copies(bahdanau_run, tmp_path,
                                                                   capsys):
    data = _tsv(tmp_path / "refs.tsv", LINES, bom=codecs.BOM_UTF8)
    out = tmp_path / "scores.json"
    assert main(["evaluate", str(bahdanau_run), "--data", str(data), "--references", "grouped",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["sentences"] == len(EN)
