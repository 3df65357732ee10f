"""Where a run or an export goes, and files given to read: an export, a folder of the user's
files, a damaged export, a folder given as a JSON file, a stopped pipe. Each is one line and
exit status 2 (or a quiet stop), and nothing is written over."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from seq2seq.cli import main as seq2seq_main
from tests.robustness.conftest import cli_env
from tests.robustness.test_cli_failures import TINY, one_line_error


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_run_is_not_trained_into_an_export(models, tmp_path, capsys):
    """An export given as --out would take the run's files, and `export --overwrite` of that
    folder would then empty the run: refused before anything is written."""
    export = tmp_path / "export"
    shutil.copytree(models["SavedModel"], export)
    before = _files(export)
    assert seq2seq_main([*TINY, "--out", str(export)]) == 2
    assert "holds a SavedModel export; expected another directory" in one_line_error(capsys)
    assert _files(export) == before


def test_a_folder_of_the_users_files_is_not_written_over(tmp_path, capsys):
    """A folder that holds a config.json or vocabulary of no run (here the very file given
    to --config): the run would overwrite them."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"training": {"epochs": 1}}')
    (folder / "vocab.source.txt").write_text("mine\n")
    before = _files(folder)
    assert seq2seq_main([*TINY, "--config", str(folder / "config.json"),
                         "--out", str(folder)]) == 2
    error = one_line_error(capsys)
    assert f"run directory {folder} holds config.json, vocab.source.txt of no run" in error
    assert _files(folder) == before


@pytest.mark.parametrize("damage", ["saved_model.pb", "variables"])
def test_a_damaged_export_is_one_line(models, tmp_path, capsys, damage):
    export = tmp_path / "export"
    shutil.copytree(models["SavedModel"], export)
    for path in ([export / damage] if damage == "saved_model.pb"
                 else sorted((export / "variables").glob("variables.data-*"))):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    assert seq2seq_main(["translate", str(export), "March 3, 1999"]) == 2
    assert f"{export}: corrupt or incomplete SavedModel" in one_line_error(capsys)


def test_a_folder_given_as_the_config_file_is_one_line(tmp_path, capsys):
    assert seq2seq_main([*TINY, "--config", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert f"{tmp_path}: a folder; expected a JSON file" in one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_fetch_into_a_file_is_one_line(tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    assert seq2seq_main(["fetch", "spa-eng", "--out", str(a_file)]) == 2
    assert f"--out {a_file} is a file; expected a folder" in one_line_error(capsys)
    assert a_file.read_text() == "mine"


def test_a_reader_that_stops_early_is_no_traceback(models):
    """`translate ... | head -1`: the pipe closes while translations are still written."""
    lines = "\n".join(["March 3, 1999"] * 3000) + "\n"
    command = (f"{sys.executable} -m seq2seq translate {models['run directory']} "
               "--beam-size 1 | head -1")
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], input=lines,
                            capture_output=True, text=True, env=cli_env(), timeout=600)
    assert len(result.stdout.splitlines()) == 1
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
    assert result.returncode == 141  # the command's own status: stopped by the pipe
