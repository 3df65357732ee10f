"""`vocab.sha256` ties a run's vocabularies to its weights: a vocabulary reordered or swapped
since training keeps its size, so no weight shape tells, and every token came out as another
without a word. Whatever reads a run's vocabularies refuses a changed one in one line."""

import hashlib
import shutil
from pathlib import Path

import pytest

from common.errors import UserError
from common.training.run_dir import RunDir


def _swap_two_lines(path, first=5, second=6):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[first], lines[second] = lines[second], lines[first]
    path.write_text("".join(lines), encoding="utf-8")


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_recorded_digests_are_those_of_sha256sum(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "vocab.txt").write_text("<pad>\nthe\n", encoding="utf-8")
    run.record_vocabularies(["vocab.txt"])
    expected = hashlib.sha256(b"<pad>\nthe\n").hexdigest()
    assert (tmp_path / "vocab.sha256").read_text() == f"{expected}  vocab.txt\n"
    run.check_vocabularies()  # unchanged: nothing to say


def test_a_changed_missing_or_unreadable_record_is_one_line(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "vocab.txt").write_text("<pad>\nthe\na\n", encoding="utf-8")
    run.record_vocabularies(["vocab.txt"])
    (tmp_path / "vocab.txt").write_text("<pad>\na\nthe\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab.txt: changed since the run was trained"):
        run.check_vocabularies()
    (tmp_path / "vocab.txt").unlink()
    with pytest.raises(UserError, match=r"vocab.txt: missing; expected the run's vocabulary"):
        run.check_vocabularies()
    (tmp_path / "vocab.sha256").write_text("not a digest\n")
    with pytest.raises(UserError, match=r"line 1 is not `SHA256  FILE`"):
        run.check_vocabularies()


def test_a_run_without_digests_is_read_as_it_is(tmp_path):
    (tmp_path / "vocab.txt").write_text("<pad>\n", encoding="utf-8")
    RunDir(tmp_path).check_vocabularies()  # a run made before digests: no error


@pytest.fixture(scope="module")
def translator_run(tmp_path_factory):
    from seq2seq.cli import main

    out = tmp_path_factory.mktemp("runs") / "dates"
    assert main(["train", "--dataset", "dates", "--arch", "bahdanau", "--preset", "tiny",
                 "--epochs", "1", "--steps-per-epoch", "2", "--validation-examples", "0",
                 "--out", str(out), "--verbose", "0"]) == 0
    return out


def test_a_translator_run_records_both_vocabularies(translator_run):
    listed = (translator_run / "vocab.sha256").read_text().split()
    assert listed[1::2] == ["vocab.source.txt", "vocab.target.txt"]
    for digest, name in zip(listed[::2], listed[1::2]):
        assert digest == hashlib.sha256((translator_run / name).read_bytes()).hexdigest()


def test_translate_evaluate_resume_and_warm_start_refuse_a_reordered_vocabulary(
        translator_run, tmp_path, capsys):
    from seq2seq.cli import main

    changed = tmp_path / "changed"
    changed.mkdir()
    for entry in translator_run.iterdir():  # a copy of the run, its target vocabulary edited
        if entry.is_file():
            (changed / entry.name).write_bytes(entry.read_bytes())
    shutil.copytree(translator_run / "checkpoints", changed / "checkpoints")
    _swap_two_lines(changed / "vocab.target.txt")
    commands = [
        ["translate", str(changed), "12 May 2020"],
        ["evaluate", str(changed), "--dataset", "dates", "--limit", "4"],
        ["export", str(changed), str(tmp_path / "export")],
        ["train", "--resume", "--out", str(changed), "--epochs", "2", "--verbose", "0"],
        ["train", "--dataset", "dates", "--arch", "bahdanau", "--preset", "tiny",
         "--init-from", str(changed), "--out", str(tmp_path / "warm"), "--verbose", "0"],
    ]
    for command in commands:
        assert main(command) == 2, command
        err = _one_line_error(capsys)
        assert "vocab.target.txt: changed since the run was trained" in err, (command, err)
    assert not (tmp_path / "export").exists() and not (tmp_path / "warm").exists()


def test_an_averaged_run_carries_the_digests(translator_run, tmp_path, capsys):
    from seq2seq.cli import main

    out = tmp_path / "averaged"
    assert main(["average", str(translator_run), "--last", "1", "--out", str(out)]) == 0
    assert ((out / "vocab.sha256").read_text()
            == (translator_run / "vocab.sha256").read_text())


@pytest.fixture(scope="module")
def tiny_captioner_run(tmp_path_factory):
    from captioner.cli import main

    out = tmp_path_factory.mktemp("runs") / "captioner"
    assert main(["train", "--preset", "tiny", "--out", str(out), "--epochs", "1",
                 "--steps-per-epoch", "2", "--data-option", "num_images=20",
                 "--validation-examples", "0", "--verbose", "0"]) == 0
    return out


def test_a_captioner_run_refuses_a_reordered_vocabulary(tiny_captioner_run, tmp_path, capsys):
    from captioner.cli import main

    listed = (tiny_captioner_run / "vocab.sha256").read_text().split()
    assert listed[1::2] == ["vocab.txt"]
    changed = tmp_path / "changed"
    shutil.copytree(tiny_captioner_run, changed)
    _swap_two_lines(changed / "vocab.txt")
    image = sorted((Path(__file__).parents[1] / "assets" / "samples").glob("*.png"))[0]
    assert main(["caption", str(changed), str(image)]) == 2
    assert "vocab.txt: changed since the run was trained" in _one_line_error(capsys)


def test_resume_refuses_a_vocabulary_lost_since_training(translator_run, tmp_path, capsys):
    """Without the file, `--resume` built a new vocabulary from the data: weights of one token
    order read with another, unless the sizes happened to differ."""
    from seq2seq.cli import main

    changed = tmp_path / "lost"
    shutil.copytree(translator_run, changed)
    (changed / "vocab.target.txt").unlink()
    assert main(["train", "--resume", "--out", str(changed), "--epochs", "2",
                 "--verbose", "0"]) == 2
    assert "vocab.target.txt: missing; expected the run's vocabulary" in _one_line_error(capsys)
    assert not (changed / "vocab.target.txt").exists()
