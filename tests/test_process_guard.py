"""`tests/process_guard.py`: a suite started with SIGINT ignored (as `nohup bash scripts/test.sh
&` is) still starts its processes with the default dispositions, and a test that fails leaves
none of the processes it started running.

The check runs a small test file in a pytest of its own, started with SIGINT and SIGTERM
ignored, with only this plugin loaded: its test starts a process through the robustness tests'
own helper (`tests.robustness.conftest.start`), records what that process sees, and fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from tests.conftest import REPO
from tests.process_guard import signals_ignored

INNER = textwrap.dedent('''
    import json, os, signal, time
    from pathlib import Path
    from tests.process_guard import signals_ignored
    from tests.robustness.conftest import start

    def test_starts_a_process_and_fails():
        # A Python that reports its SIGINT handler and what it ignores, then waits.
        proc = start("tests.sleeper")
        line = proc.stdout.readline()
        Path(os.environ["RECORD"]).write_text(json.dumps({
            "pid": proc.pid, "child": json.loads(line),
            "pytest_ignores": sorted(signals_ignored(os.getpid()))}))
        assert False, "failing on purpose"
''')


def test_a_failed_test_leaves_no_process_and_children_get_default_signals(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    record = tmp_path / "record.json"

    def ignore_signals():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "tests.process_guard", "--rootdir", str(tmp_path), "-c", "/dev/null",
         str(tmp_path / "test_inner.py")],
        cwd=REPO, env={**_env(), "RECORD": str(record)}, preexec_fn=ignore_signals,
        capture_output=True, text=True, timeout=120)
    assert inner.returncode == 1, inner.stdout + inner.stderr
    assert "failing on purpose" in inner.stdout
    seen = json.loads(record.read_text())
    # The inner pytest itself was started ignoring both; it put them back before the test ran.
    assert signal.SIGINT not in seen["pytest_ignores"]
    assert signal.SIGTERM not in seen["pytest_ignores"]
    # Its child began with the defaults: Python installed its KeyboardInterrupt handler.
    assert seen["child"] == {"sigint_handler": "default_int_handler", "ignored": []}
    # The test failed with its child still sleeping: nothing of it is left.
    deadline = time.monotonic() + 10
    while psutil.pid_exists(seen["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(seen["pid"])


def test_signals_ignored_reads_the_process_mask():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN))
    try:
        assert signal.SIGUSR1 in signals_ignored(proc.pid)
        assert signal.SIGINT not in signals_ignored(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}
