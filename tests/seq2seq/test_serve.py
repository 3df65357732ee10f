"""Serving an exported translator over the REST API: concurrent valid and invalid requests."""

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from common.export.server import create_app, serve_in_background
from seq2seq.cli import main
from seq2seq.inference import Translator

VALID = ["March 3, 1999", "25th of November 2026", "3/3/1999", "the 7th of July, 2001"]


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
        requests.append(({"inputs": {"sentences": [text], "beam_size": 2}},
                         lambda s, r, t=text: s == 200
                         and r["outputs"]["translations"] == [beam[t]]))
    requests.append(({"instances": VALID},
                     lambda s, r: s == 200
                     and [p["translations"] for p in r["predictions"]] == [greedy[t] for t in VALID]))
    invalid = [
        {"instances": ["   "]},                                     # empty sentence
        {"instances": [" ".join(["1"] * 40)]},                       # too long
        {"inputs": {"sentences": ["March 3, 1999"], "beam_size": 7}},  # not exported
        {"inputs": {"sentences": ["March 3, 1999"], "max_length": 999}},
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
        assert set(signatures) == {"serving_default", "translate"}
        assert "sentences" in signatures["serving_default"]["inputs"]


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
