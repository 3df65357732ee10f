"""Test-wide settings: quiet TensorFlow, the TensorFlow backend, paths to shared data, the
order files run in, and `--record-durations FILE`."""

import json
import os
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Seconds each test file took in a recorded run of the whole suite (`file_durations.json`,
# written by `python -m tests.durations`): the slowest files run first, so that pytest-xdist's
# workers, which take whole files (`--dist loadfile`), finish together.
FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data`: real data (spa-eng, coco-mini); tests skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="FILE", default=None,
                     help="append one JSON line per test phase (node id, phase, outcome, "
                          "seconds, worker) to FILE, as each finishes")


def pytest_collection_modifyitems(config, items):
    """Files in order of their recorded time, slowest first (unrecorded files after them, in
    collection order); tests within a file keep their order."""
    if not FILE_DURATIONS.is_file():
        return
    seconds = json.loads(FILE_DURATIONS.read_text())
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::")[0], index)
    items.sort(key=lambda item: (-seconds.get(item.nodeid.split("::")[0], 0.0),
                                 first_seen[item.nodeid.split("::")[0]]))


class _DurationRecorder:
    """Appends each test phase's duration to a JSONL file as it finishes (so a run that is
    stopped still leaves what it measured). Under pytest-xdist the controller writes the
    workers' reports, naming the worker."""

    def __init__(self, path: str):
        self.path = Path(path)

    def pytest_runtest_logreport(self, report):
        node = getattr(report, "node", None)  # set by pytest-xdist on the controller
        worker = node.gateway.id if node is not None else "main"
        line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                "seconds": round(report.duration, 4), "worker": worker,
                "finished": round(time.time(), 3)}
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")


def pytest_configure(config):
    path = config.getoption("--record-durations")
    if path and "PYTEST_XDIST_WORKER" not in os.environ:
        config.pluginmanager.register(_DurationRecorder(path), "duration-recorder")
