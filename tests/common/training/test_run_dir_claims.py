"""What a run may claim as its directory, and what its status says of a run that is gone: a
folder of other things is refused before anything is written, and a "training" status whose
process no longer runs reads as "killed"."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import UserError
from common.training.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[3]


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _training_status_of_a_process_that_ended(folder):
    """`status.json` saying "training", written by a process that then ended without a word
    (as after SIGKILL)."""
    code = ("import sys; from common.training.run_dir import RunDir; "
            "RunDir(sys.argv[1]).write_status('training', epoch=0, step=7)")
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, cwd=ROOT)


@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_of_other_things_is_not_claimed(tmp_path, resume):
    docs = tmp_path / "docs"
    (docs / "records").mkdir(parents=True)
    (docs / "README.md").write_text("mine")
    before = _tree(docs)
    with pytest.raises(UserError) as error:
        RunDir(docs).claim(resume, first=True)
    message = str(error.value)
    assert message.startswith(f"{docs} is not a run directory: it holds README.md, records/ "
                              "and nothing of a run (config.json, status.json")
    assert "\n" not in message
    assert _tree(docs) == before


def test_a_new_empty_or_hidden_only_folder_and_a_run_with_the_users_files_are_claimed(
        tmp_path):
    RunDir(tmp_path / "new").claim(False, first=True)
    (tmp_path / "empty").mkdir()
    RunDir(tmp_path / "empty").claim(False, first=True)
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".gitkeep").write_text("")
    RunDir(tmp_path / "hidden").claim(False, first=True)
    # A run's folder may hold the user's files beside it (`evaluate --json RUN/test.json`).
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_status("training", epoch=0, step=0)
    (run.path / "test.json").write_text("{}")
    run.claim(True, first=True)
    # The trainer's later claim (not `first`) holds nothing against the family's files.
    mine = RunDir(tmp_path / "mine")
    mine.path.mkdir()
    (mine.path / "notes.txt").write_text("mine")
    mine.claim(False)


def test_the_status_names_its_process_and_host(tmp_path):
    run = RunDir(tmp_path)
    run.write_status("training", epoch=0, step=3)
    status = json.loads(run.status.read_text())
    assert (status["pid"], status["host"]) == (os.getpid(), socket.gethostname())
    assert run.read_status()["state"] == "training"  # this process: still running


def test_a_training_status_whose_process_is_gone_reads_as_killed(tmp_path):
    _training_status_of_a_process_that_ended(tmp_path)
    run = RunDir(tmp_path)
    written = json.loads(run.status.read_text())
    assert written["state"] == "training" and written["pid"] != os.getpid()
    assert run.read_status() == {**written, "state": "killed"}
    # Another host's process cannot be looked up: read as written.
    run.status.write_text(json.dumps({**written, "host": "elsewhere"}))
    assert run.read_status()["state"] == "training"
    # Nor is an ended run's status changed.
    run.status.write_text(json.dumps({**written, "state": "finished"}))
    assert run.read_status()["state"] == "finished"


def test_resume_says_the_run_was_killed(tmp_path, capsys):
    _training_status_of_a_process_that_ended(tmp_path)
    RunDir(tmp_path).claim(True, first=True)
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path}: the run was killed at step 7 (process ")
    assert err.count("\n") == 1
