"""The report and helper scripts (make_sample_images, reference_ceiling, shapes_relation_report,
compare_by_length, serve_client_example) refuse bad input as the command lines do: one line on
stderr, `<script>.py: error: ...` naming the option or path, exit status 2, and all of it before
any work (nothing printed, nothing written): an output that cannot be written or is also an
input, a path that is not there or of the wrong kind, a value that cannot run. The serving
client says in one line, naming the URL, when the server is not there or answers an error.

The refusals run each script's `main(argv)` in this process (TensorFlow is imported once, not
once per case); that a script runs from the command line, exit status and all, is
tests/test_scripts.py's (`--help` and an unknown option, as subprocesses). The serving client,
which needs no TensorFlow, still talks to the servers from its own process."""

import functools
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.benchmarks import load_script, script_path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"

PAIRS = "Hi.\tHola.\nHi.\tBuenas.\nRun!\t¡Corre!\n"

# (script, arguments, what the one line must name); paths are relative to the test's folder,
# which holds `adir/` (an empty folder), `afile.txt`, `pairs.tsv`, `other.json` (a JSON file
# that no script wrote) and run directories that hold a config.json only: `translator_run/`,
# `reversed_run/` (a translator reading the pairs the other way), `captioner_run/` (trained on
# shapes) and `coco_run/` (a captioner trained on coco).
CASES = {
    # make_sample_images.py
    "samples-negative-image-size": (
        "make_sample_images.py", ["--out", "samples", "--image-size", "-1"],
        ["--image-size", "got -1"]),
    "samples-image-size-below-the-datasets-smallest": (
        "make_sample_images.py", ["--out", "samples", "--image-size", "31"],
        ["--image-size", ">= 32", "got 31"]),
    "samples-negative-seed": (
        "make_sample_images.py", ["--out", "samples", "--seed", "-1"], ["--seed", "got -1"]),
    "samples-out-is-a-file": (
        "make_sample_images.py", ["--out", "afile.txt"], ["--out afile.txt", "is a file"]),
    "samples-out-under-a-file": (
        "make_sample_images.py", ["--out", "afile.txt/samples"],
        ["--out afile.txt/samples", "afile.txt is a file"]),
    # reference_ceiling.py
    "ceiling-json-in-a-missing-folder": (
        "reference_ceiling.py", ["pairs.tsv", "--json", "missing/c.json"],
        ["--json missing/c.json", "does not exist"]),
    "ceiling-data-is-a-folder": (
        "reference_ceiling.py", ["adir"], ["adir", "is a folder"]),
    "ceiling-missing-data": (
        "reference_ceiling.py", ["missing.tsv"], ["missing.tsv", "no such file"]),
    "ceiling-json-is-the-data": (
        "reference_ceiling.py", ["pairs.tsv", "--json", "pairs.tsv"],
        ["--json pairs.tsv", "is an input"]),
    "ceiling-json-is-a-folder": (
        "reference_ceiling.py", ["pairs.tsv", "--json", "adir"], ["--json adir", "is a folder"]),
    "ceiling-json-would-replace-another-file": (
        "reference_ceiling.py", ["pairs.tsv", "--json", "other.json"],
        ["--json other.json", "not an earlier result"]),
    # shapes_relation_report.py
    "relations-json-in-a-missing-folder": (
        "shapes_relation_report.py", ["captioner_run", "--json", "missing/r.json"],
        ["--json missing/r.json", "does not exist"]),
    "relations-json-is-a-folder": (
        "shapes_relation_report.py", ["captioner_run", "--json", "adir"],
        ["--json adir", "is a folder"]),
    "relations-json-would-replace-the-runs-config": (
        "shapes_relation_report.py", ["captioner_run", "--json", "captioner_run/config.json"],
        ["--json captioner_run/config.json", "not an earlier result"]),
    "relations-zero-beam": (
        "shapes_relation_report.py", ["captioner_run", "--beam-size", "0"], ["--beam-size"]),
    "relations-missing-run": (
        "shapes_relation_report.py", ["missing_run"], ["missing_run"]),
    "relations-translator-run": (
        "shapes_relation_report.py", ["translator_run"], ["translator_run", "seq2seq"]),
    "relations-run-not-trained-on-shapes": (
        "shapes_relation_report.py", ["coco_run"], ["RUN_DIR coco_run", "'coco'", "shapes"]),
    # compare_by_length.py
    "by-length-out-in-a-missing-folder": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run",
                                 "--out", "missing/b.png"],
        ["--out missing/b.png", "does not exist"]),
    "by-length-json-in-a-missing-folder": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--json", "missing/b.json"],
        ["--json missing/b.json", "does not exist"]),
    "by-length-out-is-a-folder": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "adir"],
        ["--out adir", "is a folder"]),
    "by-length-out-is-the-default-json": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.json"],
        ["--out b.json", "'json'"]),
    "by-length-out-and-json-are-one-file": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--json", "b.png"],
        ["--json b.png", "one file"]),
    "by-length-json-is-the-data": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--json", "pairs.tsv"],
        ["--json pairs.tsv", "is an input"]),
    "by-length-json-is-a-runs-config": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--json", "translator_run/config.json"],
        ["--json translator_run/config.json", "is an input"]),
    "by-length-json-would-replace-another-file": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--json", "other.json"],
        ["--json other.json", "not an earlier result"]),
    "by-length-one-label-for-two-runs": (
        "compare_by_length.py", ["--data", "pairs.tsv", "a=translator_run", "a=reversed_run",
                                 "--out", "b.png"],
        ["label 'a'", "more than one run"]),
    "by-length-empty-label": (
        "compare_by_length.py", ["--data", "pairs.tsv", "=translator_run", "--out", "b.png"],
        ["LABEL=RUN_DIR", "'=translator_run'"]),
    "by-length-missing-second-run": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "missing_run",
                                 "--out", "b.png"],
        ["missing_run", "no such folder"]),
    "by-length-captioner-run": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "captioner_run",
                                 "--out", "b.png"],
        ["captioner_run", "'captioner'"]),
    "by-length-runs-of-two-directions": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "reversed_run",
                                 "--out", "b.png"],
        ["reversed_run", "translator_run", "one direction"]),
    "by-length-missing-data": (
        "compare_by_length.py", ["--data", "missing.tsv", "translator_run", "--out", "b.png"],
        ["--data missing.tsv", "no such file"]),
    "by-length-data-is-a-folder": (
        "compare_by_length.py", ["--data", "adir", "translator_run", "--out", "b.png"],
        ["--data adir", "is a folder"]),
    "by-length-no-closed-bucket": (
        "compare_by_length.py", ["--data", "pairs.tsv", "translator_run", "--out", "b.png",
                                 "--bucket-width", "10", "--last-bucket", "5"],
        ["--last-bucket 5", "--bucket-width 10"]),
    # serve_client_example.py (nothing is listening on 127.0.0.1:9; nothing is sent anyway)
    "client-missing-image": (
        "serve_client_example.py", ["--url", "http://127.0.0.1:9", "--model", "m",
                                    "missing.png"],
        ["missing.png", "No such file"]),
    "client-image-is-a-folder": (
        "serve_client_example.py", ["--url", "http://127.0.0.1:9", "--model", "m", "adir"],
        ["adir"]),
    "client-url-without-scheme": (
        "serve_client_example.py", ["--url", "127.0.0.1:8501", "--model", "m", "--text", "a"],
        ["--url 127.0.0.1:8501", "http://"]),
    "client-url-of-a-file": (
        "serve_client_example.py", ["--url", "file:///etc/hostname", "--model", "m",
                                    "--text", "a"],
        ["--url file:///etc/hostname"]),
    "client-url-port-out-of-range": (
        "serve_client_example.py", ["--url", "http://127.0.0.1:99999", "--model", "m",
                                    "--text", "a"],
        ["--url http://127.0.0.1:99999", "out of range"]),
    "client-url-malformed": (
        "serve_client_example.py", ["--url", "http://[::1", "--model", "m", "--text", "a"],
        ["--url http://[::1", "not a URL"]),
    "client-option-given-twice": (
        "serve_client_example.py", ["--url", "http://127.0.0.1:9", "--model", "m", "--text",
                                    "a", "--option", "beam_size=2", "--option", "beam_size=3"],
        ["--option beam_size", "more than once"]),
    "client-images-and-text": (
        "serve_client_example.py", ["--url", "http://127.0.0.1:9", "--model", "m", "--text",
                                    "a", "afile.txt"],
        ["one kind"]),
}


def _files(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def _run_script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`scripts/[experiments/]NAME ARGS` as a user runs it: the checkout importable, no
    TensorFlow log level or Keras backend of the caller's."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    path = script_path(name.removesuffix(".py"))
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          cwd=cwd, env={**clean, "PYTHONPATH": str(REPO)}, timeout=600)


@functools.cache
def _script(name: str):
    """The script `NAME.py` as a module (loaded once per test process)."""
    return load_script(name.removesuffix(".py"))


def _run_in_process(name: str, *args: str, cwd: Path, monkeypatch,
                    capfd) -> subprocess.CompletedProcess:
    """`main(ARGS)` of `scripts/[experiments/]NAME` in this process, from `cwd`, without the
    caller's Keras backend; what it wrote to file descriptors 1 and 2 as stdout and stderr."""
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    capfd.readouterr()
    status = _script(name).main(list(args))
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess([name, *args], status, out, err)


def _one_line(done: subprocess.CompletedProcess, name: str, status: int = 2) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"{name}: error: "), lines[0]
    assert done.stdout == ""
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile.txt").write_text("text\n")
    (tmp_path / "pairs.tsv").write_text(PAIRS, encoding="utf-8")
    (tmp_path / "other.json").write_text('{"mine": true}\n')
    runs = {"translator_run": {"family": "seq2seq", "data": {"reverse": False}},
            "reversed_run": {"family": "seq2seq", "data": {"reverse": True}},
            "captioner_run": {"family": "captioner", "data": {"dataset": "shapes"}},
            "coco_run": {"family": "captioner", "data": {"dataset": "coco"}}}
    for run, config in runs.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_in_one_line_before_any_work(case, folder, monkeypatch, capfd):
    name, args, named = CASES[case]
    before = _files(folder)
    line = _one_line(_run_in_process(name, *args, cwd=folder, monkeypatch=monkeypatch,
                                     capfd=capfd), name)
    for text in named:
        assert text in line
    assert _files(folder) == before  # nothing written, nothing replaced, no folder made


def test_reference_ceiling_replaces_its_own_earlier_result(folder, monkeypatch, capfd):
    for _ in range(2):
        done = _run_in_process("reference_ceiling.py", "pairs.tsv", "--json", "c.json",
                               cwd=folder, monkeypatch=monkeypatch, capfd=capfd)
        assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((folder / "c.json").read_text())["lines"] == 3


@pytest.mark.parametrize("name", ["make_sample_images.py", "serve_client_example.py"])
def test_scripts_that_need_no_tensorflow_do_not_import_it(name):
    """Pillow and NumPy, or the standard library: `run_cli` does not import TensorFlow for
    them, and KERAS_BACKEND=jax does not stop them."""
    spec = importlib.util.spec_from_file_location(name[:-3], SCRIPTS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.build_parser().parse_args(["--model", "m"] if "client" in name else [])
    assert args._uses_tensorflow is False and args._runs_on_jax is True


# -- the serving client against servers that fail -------------------------------------------


class _FailingServer(http.server.BaseHTTPRequestHandler):
    """Answers by the model's name: `html502` a proxy's HTML error page, `html200` an HTML page
    with status 200, `nometa` metadata without signatures, anything else a JSON answer."""

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        if "/html502" in self.path:
            body, status = b"<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body>\n</html>\n", 502
        elif "/html200" in self.path:
            body, status = b"<html>\nnot JSON\n</html>\n", 200
        elif "/nometa" in self.path:
            body, status = b'{"model_spec": {}}', 200
        else:
            body, status = b'{"predictions": [1]}', 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.fixture(scope="module")
def server_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("model,options,said", [
    ("html502", [], "HTTP 502"),
    ("html200", [], "not JSON"),
    ("nometa", ["--option", "beam_size=2"], "metadata"),
])
def test_the_client_names_the_url_of_a_server_error_in_one_line(server_url, tmp_path, model,
                                                                  options, said):
    done = _run_script("serve_client_example.py", "--url", server_url, "--model", model,
                       "--text", "a", *options, cwd=tmp_path)
    line = _one_line(done, "serve_client_example.py", status=1)
    where = "/metadata" if options else ":predict"
    assert f"{server_url}/v1/models/{model}{where}" in line and said in line


def test_the_client_names_the_url_of_a_server_that_is_not_there(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    done = _run_script("serve_client_example.py", "--url", url, "--model", "m", "--text", "a",
                       cwd=tmp_path)
    line = _one_line(done, "serve_client_example.py", status=1)
    assert f"{url}/v1/models/m:predict" in line and "cannot reach" in line


def test_the_client_quotes_the_model_name_into_the_url(server_url, tmp_path):
    done = _run_script("serve_client_example.py", "--url", server_url, "--model", "a b",
                       "--text", "a", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"predictions": [1]}
