"""Test-wide settings: quiet TensorFlow, the TensorFlow backend, paths to shared data, the
order files run in, the fast tier, `--record-durations FILE`, and the processes tests start
(`tests/process_guard.py`).

The fast tier (`bash scripts/test.sh --fast`, i.e. `-m "not slow"`) leaves out the tests marked
`slow` by hand and those that `durations.json` (a recorded run of the whole suite) shows to be
slow: a test of more than `SLOW_TEST_S` seconds, or any test of a file of more than
`SLOW_FILE_S` (its module fixtures train or export models). Re-record it after adding slow
tests: `pytest --record-durations run.jsonl` then `python -m tests.durations run.jsonl
--write-durations tests/durations.json`.
"""

import json
import os
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

# Children get default SIGINT/SIGTERM dispositions, and a test's processes end with it.
pytest_plugins = ["tests.process_guard"]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Seconds each test took (every phase, fixtures included) in a recorded run of the whole suite
# (`python -m tests.durations`): the fast tier leaves out the slow tests and files.
DURATIONS = Path(__file__).with_name("durations.json")
SLOW_TEST_S = 4.0
SLOW_FILE_S = 30.0


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data`: real data (spa-eng, coco-mini); tests skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# Trained runs several packages' tests read (tests/captioner, tests/seq2seq and the Python API's
# examples): session fixtures, so a worker trains each once.

@pytest.fixture(scope="session")
def trained_captioner(tmp_path_factory) -> Path:
    """A `--preset tiny` run with enough steps (200, at a high learning rate, on 200 images)
    that its captions differ between images; its attention query is the demo's (`hidden+word`),
    so the export and serving tests cover it. No validation: the best checkpoint of its one
    epoch would be its last. It has the demo's coverage too (its state carries the attention
    so far through every decoder: beam search, the export, sampling)."""
    from captioner.cli import main

    run = tmp_path_factory.mktemp("captioner") / "run"
    assert main(["train", "--preset", "tiny", "--out", str(run), "--seed", "3",
                 "--steps-per-epoch", "200", "--learning-rate", "0.01",
                 "--data-option", "num_images=200", "--attention-query", "hidden+word",
                 "--coverage", "--validation-examples", "0"]) == 0
    return run



@pytest.fixture(scope="session")
def dates_transformer(tmp_path_factory) -> Path:
    """A dates Transformer trained until it is sure (`dates-demo` at width 32, one epoch of
    600 steps: every one of the first 64 held-out dates exact), so that beams end where the
    model is sure, translations differ between sentences, and int8 arithmetic, which rounds
    differently on each instruction set, rarely meets a near tie (the CTranslate2 and int8
    export tests). About 25 s on 2 cores."""
    from seq2seq.cli import main

    out = tmp_path_factory.mktemp("dates-transformer") / "dates"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "dates-demo",
                 "--epochs", "1", "--steps-per-epoch", "600", "--hidden-dim", "32",
                 "--intermediate-dim", "64", "--seed", "1", "--out", str(out),
                 "--verbose", "0"]) == 0
    return out


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="FILE", default=None,
                     help="append one JSON line per test phase (node id, phase, outcome, "
                          "seconds, worker) to FILE, as each finishes")


def _file(item) -> str:
    return item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark `slow` the tests that the recorded run shows to be slow (before `-m` selects)."""
    if not DURATIONS.is_file():
        return
    tests = json.loads(DURATIONS.read_text())["tests"]
    files: dict[str, float] = {}
    for nodeid, seconds in tests.items():
        files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0.0) + seconds
    for item in items:
        if tests.get(item.nodeid, 0.0) > SLOW_TEST_S or files.get(_file(item), 0.0) > SLOW_FILE_S:
            item.add_marker(pytest.mark.slow)


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
