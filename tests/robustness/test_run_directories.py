"""What `train --out` becomes: a folder of other things (a repository's `docs/`) is refused in one
line with nothing written; a run stopped from outside says so in its `status.json`: SIGTERM
(`kill`, a scheduler) and SIGINT (Ctrl-C) end it as "failed" with exit status 128 + the
signal, and SIGKILL, which nothing can catch, leaves "training", which reads as "killed" since
its process is gone, and `--resume` says so."""

from __future__ import annotations

import signal

import pytest

from captioner.cli import main as captioner_main
from common.training.run_dir import RunDir
from seq2seq.cli import main as seq2seq_main

from .conftest import finish, read_status, start, wait_for
from .test_cli_failures import TINY, one_line_error

# A translator run, a checkpoint every 5 steps; LONG enough to be stopped while it trains.
RUN = ["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
       "--epochs", "1", "--checkpoint-every", "5", "--validation-examples", "0", "--verbose", "0"]
LONG = [*RUN, "--steps-per-epoch", "100000"]


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() if p.is_file() else None
            for p in folder.rglob("*")}


@pytest.mark.parametrize("main, argv", [
    (seq2seq_main, TINY),
    (captioner_main, ["train", "--preset", "tiny", "--verbose", "0"]),
])
@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_of_other_things_is_refused_with_nothing_written(main, argv, resume, tmp_path,
                                                                  capsys):
    docs = tmp_path / "docs"
    (docs / "records").mkdir(parents=True)
    (docs / "README.md").write_text("# mine\n")
    (docs / "records" / "r.json").write_text("{}")
    before = _tree(docs)
    assert main([*argv, "--out", str(docs), *(["--resume"] if resume else [])]) == 2
    assert one_line_error(capsys).endswith(
        f"error: {docs} is not a run directory: it holds README.md, records/ and nothing of a "
        "run (config.json, status.json, checkpoints/, ...); expected a run directory, a new "
        "folder or an empty one")
    assert _tree(docs) == before


def _training(tmp_path):
    """A translator run in a subprocess, once it has saved a checkpoint."""
    run_dir = tmp_path / "run"
    proc = start("seq2seq", *LONG, "--out", run_dir)
    wait_for(lambda: (read_status(run_dir) or {}).get("checkpoint"), proc)
    return proc, run_dir


@pytest.mark.slow
@pytest.mark.parametrize("signum, error", [
    (signal.SIGTERM, "Terminated: SIGTERM received"),
    (signal.SIGINT, "KeyboardInterrupt: KeyboardInterrupt"),
])
def test_a_run_stopped_by_a_signal_says_failed(tmp_path, signum, error):
    proc, run_dir = _training(tmp_path)
    proc.send_signal(signum)
    code, _, err = finish(proc, timeout=120)
    assert code == 128 + signum, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("seq2seq train: interrupted")
    status = RunDir(run_dir).read_status()
    assert status["state"] == "failed" and status["error"] == error
    assert status["pid"] == proc.pid


@pytest.mark.slow
def test_a_killed_run_reads_as_killed_and_resume_says_so(tmp_path):
    proc, run_dir = _training(tmp_path)
    proc.send_signal(signal.SIGKILL)
    assert finish(proc)[0] == -signal.SIGKILL
    written = read_status(run_dir)
    assert written["state"] == "training" and written["pid"] == proc.pid  # nothing caught it
    assert RunDir(run_dir).read_status() == {**written, "state": "killed"}
    # The epoch already ran more steps than this: it ends at once, and the run finishes.
    code, _, err = finish(start("seq2seq", *RUN, "--steps-per-epoch", "5", "--out", run_dir,
                                "--resume"))
    assert code == 0, err
    assert f"{run_dir}: the run was killed at step {written['step']} (process {proc.pid} " in err
    assert RunDir(run_dir).read_status()["state"] == "finished"
