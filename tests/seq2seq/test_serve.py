"""Serving an exported translator over the REST API: concurrent valid and invalid requests,
and the engines' thread pools (`--intra-threads`, `--inter-threads`)."""

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from common.serving.app import create_app, serve_in_background
from seq2seq.cli import main
from seq2seq.inference import Translator

VALID = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001"]
OPTIONS = "translate_with_options"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    run_dir, export_dir = root / "run", root / "export"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--steps-per-epoch", "100", "--out", str(run_dir), "--verbose", "0"]) == 0
    assert main(["export", str(run_dir), str(export_dir), "--beam-sizes", "1,2"]) == 0
    return run_dir, export_dir


def post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_concurrent_valid_and_invalid_requests(exported):
    run_dir, export_dir = exported
    translator = Translator.from_run_dir(run_dir)
    greedy = {t.source: t.text for t in translator.translate(VALID)}
    beam = {t.source: t.text for t in translator.translate(VALID, beam_size=2)}
    requests = []  # (body, check)
    for text in VALID:
        requests.append(({"instances": [text]},
                         lambda s, r, t=text: s == 200
                         and r["predictions"][0]["translations"] == greedy[t]))
        requests.append(({"signature_name": OPTIONS,
                          "inputs": {"sentences": [text], "beam_size": 2}},
                         lambda s, r, t=text: s == 200
                         and r["outputs"]["translations"] == [beam[t]]))
    requests.append(({"instances": VALID},
                     lambda s, r: s == 200
                     and [p["translations"] for p in r["predictions"]] == [greedy[t] for t in VALID]))
    invalid = [
        {"instances": ["   "]},                                     # empty sentence
        {"instances": [" ".join(["1"] * 40)]},                       # too long
        {"signature_name": OPTIONS,
         "inputs": {"sentences": ["March 3, 1999"], "beam_size": 7}},  # not exported
        {"signature_name": OPTIONS, "inputs": {"sentences": ["March 3, 1999"], "max_length": 999}},
        {"inputs": {"sentences": ["March 3, 1999"], "beam_size": 2}},  # serving_default: no options
        {"instances": [3]},                                          # not a string
        {"instances": ["x"], "frobnicate": 1},                       # unknown field
        {"inputs": {"sentences": "March 3, 1999"}},                  # not a list
        b"{not json",
    ]
    for body in invalid:
        requests.append((body, lambda s, r: 400 <= s < 500 and isinstance(r.get("error"), str)))

    app = create_app(export_dir, "dates", batch_timeout_ms=20)
    with serve_in_background(app) as url:
        predict = f"{url}/v1/models/dates:predict"
        results = [None] * len(requests)

        def worker(indices):
            for i in indices:
                results[i] = post(predict, requests[i][0])

        threads = [threading.Thread(target=worker, args=(range(k, len(requests), 6),))
                   for k in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        for (body, check), result in zip(requests, results):
            assert result is not None and check(*result), (body, result)
        # still up, and still right
        with urllib.request.urlopen(f"{url}/v1/models/dates", timeout=60) as response:
            status = json.loads(response.read())
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        code, answer = post(predict, {"instances": VALID[:1]})
        assert code == 200 and answer["predictions"][0]["translations"] == greedy[VALID[0]]
        with urllib.request.urlopen(f"{url}/v1/models/dates/metadata", timeout=60) as response:
            meta = json.loads(response.read())
        signatures = meta["metadata"]["signature_def"]["signature_def"]
        assert set(signatures) == {"serving_default", OPTIONS}
        assert set(signatures["serving_default"]["inputs"]) == {"sentences"}


@pytest.mark.slow
def test_errors_from_the_graph_are_the_message_alone(exported):
    _, export_dir = exported
    with serve_in_background(create_app(export_dir, "dates")) as url:
        predict = f"{url}/v1/models/dates:predict"
        cases = [
            # The graph's message names no instance: the server finds which one it was.
            ({"instances": ["March 3, 1999", "   "]},
             "instance 1 of 'instances': empty sentence: nothing to translate"),
            ({"instances": ["   ", "March 3, 1999", "1/2/2003"]},
             "instance 0 of 'instances': empty sentence: nothing to translate"),
            ({"signature_name": OPTIONS, "inputs": {"sentences": ["x", "y", "", "z"]}},
             "row 2 of 'inputs': empty sentence: nothing to translate"),
            # An option every instance shares, or several bad ones: the message alone.
            ({"instances": ["   ", "  "]}, "empty sentence: nothing to translate"),
            ({"signature_name": OPTIONS, "inputs": {"sentences": ["x", "y"], "beam_size": 7}},
             "beam_size must be one of [1, 2] (the exported sizes); got 7"),
            ({"instances": [" ".join(["1"] * 40)]},
             "a sentence is longer than 32 tokens, the most this model accepts"),
            ({"signature_name": OPTIONS, "inputs": {"sentences": ["x"], "beam_size": 7}},
             "beam_size must be one of [1, 2] (the exported sizes); got 7"),
            ({"signature_name": OPTIONS, "inputs": {"sentences": ["x"], "max_length": 0}},
             "max_length must be 1..32; got 0"),
            ({"signature_name": OPTIONS, "inputs": {"sentences": ["x"], "beam_size": 2,
                                                    "n_best": 3}},
             "n_best must be 1..beam_size (2); got 3"),
        ]
        for body, message in cases:
            assert post(predict, body) == (400, {"error": message})


@pytest.mark.slow
def test_serve_cli_serves_a_model_base_path(exported, tmp_path):
    # TensorFlow Serving's layout: BASE/1/, BASE/2/; the highest answers by default, each
    # version on its own path. Version 1 here is the greedy export, version 2 beam 2.
    run_dir, export_dir = exported
    base = tmp_path / "models"
    base.mkdir()
    (base / "1").symlink_to(export_dir, target_is_directory=True)
    assert main(["export", str(run_dir), str(base / "2"), "--beam-sizes", "2",
                 "--beam-size", "2", "--max-decode-length", "3"]) == 0
    (base / "notes").mkdir()  # not a version: ignored, as TensorFlow Serving does
    translator = Translator.from_run_dir(run_dir)
    v1 = translator.translate(VALID)
    v2 = translator.translate(VALID, beam_size=2, max_length=3)
    assert [t.text for t in v1] != [t.text for t in v2]
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "seq2seq", "serve", str(base), "--port", str(port),
         "--model-name", "dates"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = _serving_line(proc)
        assert line.startswith(f"Serving http://127.0.0.1:{port}/v1/models/dates (versions 1, 2"), line
        url = f"http://127.0.0.1:{port}/v1/models/dates"
        for path, expected in (("", v2), ("/versions/2", v2), ("/versions/1", v1)):
            code, answer = post(f"{url}{path}:predict", {"instances": VALID})
            assert code == 200 and [p["translations"] for p in answer["predictions"]] == [
                t.text for t in expected], path
        with urllib.request.urlopen(url, timeout=60) as response:
            status = json.loads(response.read())["model_version_status"]
        assert [(s["version"], s["state"]) for s in status] == [("2", "AVAILABLE"),
                                                                 ("1", "AVAILABLE")]
        with urllib.request.urlopen(f"{url}/versions/1", timeout=60) as response:
            status = json.loads(response.read())["model_version_status"]
        assert [s["version"] for s in status] == ["1"]
        with urllib.request.urlopen(f"{url}/versions/1/metadata", timeout=60) as response:
            assert json.loads(response.read())["model_spec"]["version"] == "1"
        code, answer = post(f"{url}/versions/3:predict", {"instances": VALID})
        assert code == 404 and answer["error"] == ("Servable not found for request: "
                                                   "Specific(dates, 3)")
    finally:
        proc.terminate()
        proc.wait(60)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving_line(proc) -> str:
    line = ""
    for line in proc.stdout:
        if line.startswith("Serving"):
            break
    return line


@pytest.mark.slow
def test_serve_cli_starts_and_answers(exported, tmp_path):
    _, export_dir = exported
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "seq2seq", "serve", str(export_dir), "--port", str(port),
         "--model-name", "dates"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = ""
        for line in proc.stdout:
            if line.startswith("Serving"):
                break
        assert line.startswith(f"Serving http://127.0.0.1:{port}/v1/models/dates"), line
        code, answer = post(f"http://127.0.0.1:{port}/v1/models/dates:predict",
                            {"instances": ["March 3, 1999"]})
        assert code == 200 and isinstance(answer["predictions"][0]["translations"], str)
    finally:
        proc.terminate()
        proc.wait(60)


def test_serve_cli_refuses_a_directory_that_is_not_a_savedmodel(tmp_path, capsys):
    assert main(["serve", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a SavedModel directory" in err
    (tmp_path / "1").mkdir()  # a version directory without a SavedModel
    assert main(["serve", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "version directory without saved_model.pb" in err


@pytest.mark.slow
def test_serve_cli_refuses_a_bad_port_or_host_in_one_line(exported, capsys):
    _, export_dir = exported
    for options, fragment in ((["--port", "70000"], "expected a port from 1 to 65535"),
                              (["--port", "-5"], "expected a positive integer"),
                              (["--host", "999.1.1.1"], "does not resolve"),
                              (["--max-request-instances", "0"], "expected a positive integer")):
        assert main(["serve", str(export_dir), *options]) == 2, options
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and fragment in err, err


# -- --intra-threads and --inter-threads: each engine's thread pools --------------------------


@pytest.mark.parametrize("option", ["--intra-threads", "--inter-threads"])
@pytest.mark.parametrize("value, fragment", [
    ("-1", "expected 0 (the engine's default) to 1024 threads, got -1"),
    ("100000", "expected 0 (the engine's default) to 1024 threads, got 100000"),
    ("1.5", "expected a number of threads (0: the engine's default), got '1.5'"),
    ("many", "expected a number of threads (0: the engine's default), got 'many'"),
])
def test_serve_refuses_a_bad_thread_count_in_one_line(tmp_path, capsys, option, value, fragment):
    # Refused while parsing, whatever the directory holds.
    assert main(["serve", str(tmp_path), f"{option}={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {option}: {fragment}" in err, err


def test_serve_help_names_both_engines_thread_pools(capsys):
    assert main(["serve", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for option in ("--intra-threads N", "--inter-threads N"):
        assert option in shown
    assert "TensorFlow's intra-op pool" in shown and "TensorFlow's inter-op pool" in shown
    assert "CTranslate2 export's intra_threads" in shown
    assert "CTranslate2 export's inter_threads" in shown


def _fake_translator_export(folder):
    """A directory `serve` takes for an exported translator (the app itself is not started)."""
    (folder / "assets.extra").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    (folder / "assets.extra" / "export_info.json").write_text(
        json.dumps({"kind": "seq2seq.translator", "format": 2}))
    return folder


def test_serve_sizes_tensorflows_pools_before_loading(tmp_path, monkeypatch):
    import common.serving.app as app_module

    calls = []
    monkeypatch.setattr(app_module, "set_tensorflow_threads",
                        lambda intra, inter: calls.append(("threads", intra, inter)))

    def create_app(path, name, **options):
        calls.append(("load", name))
        return {app_module.VERSIONS: {1: None}}

    monkeypatch.setattr(app_module, "create_app", create_app)
    monkeypatch.setattr(app_module.web, "run_app", lambda app, **kwargs: calls.append("run"))
    export_dir = _fake_translator_export(tmp_path / "export")
    assert main(["serve", str(export_dir), "--port", str(_free_port()), "--intra-threads", "1",
                 "--inter-threads", "2", "--model-name", "dates"]) == 0
    assert calls == [("threads", 1, 2), ("load", "dates"), "run"]
    calls.clear()
    assert main(["serve", str(export_dir), "--port", str(_free_port())]) == 0
    assert calls[0] == ("threads", 0, 0)  # TensorFlow's defaults


def test_tensorflow_pools_take_the_sizes_in_a_new_process():
    code = ("from common.serving.servable import set_tensorflow_threads\n"
            "set_tensorflow_threads(1, 2)\n"
            "import tensorflow as tf\n"
            "t = tf.config.threading\n"
            "print(t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads())")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, check=True).stdout.split()
    assert printed[-2:] == ["1", "2"]


def test_tensorflow_pools_cannot_change_once_it_runs():
    import tensorflow as tf

    from common.errors import UserError
    from common.serving.servable import set_tensorflow_threads

    _ = tf.constant(1) + 1  # TensorFlow has started
    set_tensorflow_threads(0, 0)  # its defaults: nothing to change
    current = tf.config.threading.get_intra_op_parallelism_threads()
    with pytest.raises(UserError, match=r"^--intra-threads \d+: TensorFlow is already running"):
        set_tensorflow_threads(current + 1, 0)


@pytest.fixture(scope="module")
def ct2_export(tmp_path_factory):
    """A CTranslate2 export of a `tiny` dates Transformer (3 steps: its threads, not its
    skill)."""
    root = tmp_path_factory.mktemp("serve-ct2")
    run_dir, out = root / "run", root / "ct2"
    assert main(["train", "--dataset", "dates", "--arch", "transformer", "--preset", "tiny",
                 "--out", str(run_dir), "--verbose", "0", "--validation-examples", "0"]) == 0
    assert main(["export", str(run_dir), str(out), "--format", "ctranslate2",
                 "--beam-sizes", "1,2"]) == 0
    return out


@pytest.fixture
def engines_made(monkeypatch):
    """The keyword arguments of each `ctranslate2.Translator` made (the real one is made)."""
    import ctranslate2

    made = []
    real = ctranslate2.Translator

    def recording(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ctranslate2, "Translator", recording)
    return made


def _served_ct2(monkeypatch, serve, *args, **kwargs):
    """What `serve` hands `common.serving.app.serve` (which is not started)."""
    import common.serving.app as app_module

    started = {}
    monkeypatch.setattr(app_module, "serve",
                        lambda path, name, **options: started.update(options, name=name))
    serve(*args, **kwargs)
    return started


def test_ctranslate2_serve_gives_the_engine_its_threads(ct2_export, engines_made, monkeypatch):
    from seq2seq.ctranslate2_translator import CTranslate2Translator
    from seq2seq.ctranslate2_translator import serve as serve_ct2

    started = _served_ct2(monkeypatch, serve_ct2, ct2_export, "dates", port=_free_port(),
                          intra_threads=1, inter_threads=2)
    assert engines_made[-1]["intra_threads"] == 1 and engines_made[-1]["inter_threads"] == 2
    assert "intra_threads" not in started and "inter_threads" not in started
    servable = started["versions"][1]
    sentences = np.array([s.encode() for s in VALID * 3], object)
    # Two translators, each translating a part of a merged batch: the same translations.
    got = servable.run(OPTIONS, {"sentences": sentences, "beam_size": 2, "max_length": 16,
                                 "n_best": 2, "no_repeat_ngram": 0})
    whole = CTranslate2Translator(ct2_export)
    assert whole.engine.num_translators == 1 and engines_made[-1]["inter_threads"] == 1
    assert engines_made[-1]["intra_threads"] == 0  # CTranslate2's default
    expected = whole.call(OPTIONS, {"sentences": sentences, "beam_size": 2, "max_length": 16,
                                    "n_best": 2, "no_repeat_ngram": 0})
    for name in ("translations", "n_best_translations", "lengths", "finished"):
        np.testing.assert_array_equal(got[name], expected[name])
    np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-4)


def test_serve_cli_gives_a_ctranslate2_export_its_threads(ct2_export, engines_made,
                                                          monkeypatch):
    started = _served_ct2(monkeypatch, main, ["serve", str(ct2_export), "--port",
                                              str(_free_port()), "--intra-threads", "1",
                                              "--inter-threads", "2"])
    assert engines_made[-1]["intra_threads"] == 1 and engines_made[-1]["inter_threads"] == 2
    assert started["versions"][1] is not None
