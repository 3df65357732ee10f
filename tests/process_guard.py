"""The suite's processes: started with the signal dispositions the tests rely on, and ended
whatever a test's outcome.

A pytest plugin (`tests/conftest.py` loads it; `-p tests.process_guard` loads it alone):

- **Signals.** A shell starts a background job (`nohup bash scripts/test.sh &`, cron, some CI
  runners) with SIGINT ignored, and an ignored signal stays ignored across `exec`: every Python
  the suite started would then install no KeyboardInterrupt handler, and a test that stops a run
  with SIGINT would wait for nothing. So each pytest process (the controller and every xdist
  worker) puts SIGINT back to Python's default handler and SIGTERM to the default action
  before any test runs; a caught signal is reset to its default by `exec`, so every process a
  test starts begins with the defaults, whatever started the suite.
- **Processes.** After each test's call phase, pass or fail, every process it started that is
  still running (with all of its own children) is ended: SIGTERM, then SIGKILL after
  `GRACE_S`. Processes a fixture starts are its own to end in its teardown; whatever is left
  when the session ends is ended then. So a failed test leaves no training running beside the
  rest of the suite.

`tests/test_process_guard.py` runs a failing test under this plugin with SIGINT ignored and
checks both.
"""

from __future__ import annotations

import signal

import psutil
import pytest

#: Seconds a process has to exit after SIGTERM before it is killed.
GRACE_S = 5.0


def restore_signal_defaults() -> None:
    """SIGINT to Python's KeyboardInterrupt handler and SIGTERM to the default action, where the
    process that started this one left them ignored."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _descendants() -> dict[int, psutil.Process]:
    """This process's children and theirs, by pid (a process that ends meanwhile is left out)."""
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _started_since(before: dict[int, psutil.Process]) -> list[psutil.Process]:
    """The descendants now running that were not in `before` (a pid reused by another
    process counts as new: its start time differs)."""
    new = []
    for pid, process in _descendants().items():
        old = before.get(pid)
        try:
            if old is None or old.create_time() != process.create_time():
                new.append(process)
        except psutil.Error:
            continue
    return new


def end_processes(processes: list[psutil.Process], grace: float = GRACE_S) -> list[int]:
    """SIGTERM to each process, SIGKILL to those still running after `grace` seconds; returns
    the pids that were running."""
    running = []
    for process in processes:
        try:
            process.terminate()
            running.append(process)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(running, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=grace)
    return [p.pid for p in running]


def pytest_configure(config):
    restore_signal_defaults()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = _descendants()
    try:
        yield
    finally:
        left = _started_since(before)
        if left:
            end_processes(left)


def pytest_sessionfinish(session):
    # The xdist controller's children are its workers: only a process that ran tests ends its
    # own descendants here.
    if session.config.pluginmanager.has_plugin("dsession"):
        return
    left = list(_descendants().values())
    if left:
        end_processes(left)


def signals_ignored(pid: int) -> set[int]:
    """The signals process `pid` ignores (`SigIgn` of `/proc/PID/status`, Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("SigIgn:"):
                mask = int(line.split()[1], 16)
                return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    return set()


__all__ = ["GRACE_S", "end_processes", "restore_signal_defaults", "signals_ignored"]
