"""Helpers of the robustness tests: command lines in a subprocess, watching a run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def cli_command(prog: str, *args: str) -> list[str]:
    """`python -m PROG ARGS...` with this interpreter."""
    return [sys.executable, "-m", prog, *map(str, args)]


def cli_env() -> dict[str, str]:
    return {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONHASHSEED": "0"}


def start(prog: str, *args: str) -> subprocess.Popen:
    """Start `PROG ARGS...` in a subprocess, stdout and stderr captured as text."""
    return subprocess.Popen(cli_command(prog, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env())


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_for(condition, proc: subprocess.Popen, timeout: float = 240, every: float = 0.01):
    """Poll `condition()` until it is truthy; fails if `proc` ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (status {proc.returncode}) before the condition: {err}")
        time.sleep(every)
    proc.kill()
    pytest.fail("timed out waiting for the run")


def history(run_dir: Path, kind: str | None = None) -> list[dict]:
    """The run's `history.jsonl` records (of `kind`); none when it holds no file yet (a run
    killed right after its first checkpoint, before the epoch's line was appended)."""
    path = run_dir / "history.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if kind is None or r["kind"] == kind]


@pytest.fixture(scope="package")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny translator run directory and its SavedModel, shared by this package's tests."""
    from seq2seq.cli import main

    root = tmp_path_factory.mktemp("translator")
    run, export = root / "run", root / "export"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--out", str(run), "--verbose", "0"]) == 0
    assert main(["export", str(run), str(export), "--beam-sizes", "1"]) == 0
    return {"run directory": run, "SavedModel": export}
