"""The translator server under bad requests: each gets a 4xx JSON answer and the server keeps
serving; it binds to 127.0.0.1 unless told otherwise and takes no file paths from requests."""

from __future__ import annotations

import inspect
import json
import urllib.error
import urllib.request

import pytest

from common.serving.app import create_app, serve, serve_in_background

pytestmark = pytest.mark.slow

LIMIT = 4096
BAD = [
    (b"", 400, "document is empty"),
    (b"{not json", 400, "JSON Parse error"),
    (b"\xff\xfe{}", 400, "JSON Parse error"),                              # not UTF-8
    (b"[" * 3000, 400, "JSON Parse error"),                                # nesting bomb
    (b"[1, 2]", 400, ""),                                                  # not an object
    (b"42", 400, ""),
    (b"null", 400, ""),
    (b'{"instance": ["x"]}', 400, "instance"),                             # wrong field
    (b'{"inputs": {"sentence": ["x"]}}', 400, "sentence"),                 # wrong input name
    (b'{"instances": ["x"], "signature_name": "steal"}', 400, "steal"),
    (b'{"instances": {"sentences": 3}}', 400, ""),                         # wrong type
    (b'{"instances": [["x"]]}', 400, ""),
    (b'{"instances": [null]}', 400, ""),
    (b'{"instances": [true]}', 400, ""),
    (b'{"inputs": {"sentences": ["x"], "beam_size": "two"}}', 400, ""),
    (b'{"inputs": {"sentences": ["x"], "beam_size": 1.5}}', 400, ""),
    (b'{"inputs": {"sentences": ["x"], "max_length": -3}}', 400, ""),
    (b'{"instances": []}', 400, ""),
    (json.dumps({"instances": ["x" * (2 * LIMIT)]}).encode(), 413, f"limit of {LIMIT} bytes"),
]


def request(url, body=None, method="POST"):
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_bad_requests_get_4xx_json_and_the_server_keeps_serving(models):
    app = create_app(models["SavedModel"], "dates", max_body_bytes=LIMIT, batch_timeout_ms=1)
    with serve_in_background(app) as url:
        predict = f"{url}/v1/models/dates:predict"
        code, good = request(predict, json.dumps({"instances": ["March 3, 1999"]}).encode())
        assert code == 200
        for body, status, needle in BAD:
            code, answer = request(predict, body)
            assert code == status, (body[:60], code, answer)
            assert isinstance(answer.get("error"), str) and needle in answer["error"], answer
            assert len(answer["error"]) < 500
        code, answer = request(f"{url}/v1/models/other:predict", b'{"instances": ["x"]}')
        assert code == 404 and "error" in answer
        code, answer = request(predict, method="GET")
        assert code == 405 and "error" in answer
        # still serving, with the same answer
        code, again = request(predict, json.dumps({"instances": ["March 3, 1999"]}).encode())
        assert code == 200 and again == good


def test_a_path_in_a_request_is_text_to_translate_never_a_file_to_read(models, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret words")
    app = create_app(models["SavedModel"], "dates", batch_timeout_ms=1)
    with serve_in_background(app) as url:
        code, answer = request(f"{url}/v1/models/dates:predict",
                               json.dumps({"instances": [str(secret)]}).encode())
    assert code == 200
    prediction = json.dumps(answer)
    assert "secret" in prediction  # the path's own words, as tokens
    assert "words" not in prediction  # never the file's contents


def test_servers_bind_to_localhost_by_default():
    from captioner.cli import main as captioner_main  # noqa: F401  (its parser)
    from common.cli import build_parser
    from seq2seq.cli import PROG, subcommands

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(serve_in_background).parameters["host"].default == "127.0.0.1"
    args = build_parser(PROG, "", subcommands()).parse_args(["serve", "somewhere"])
    assert args.host == "127.0.0.1"
    import captioner.cli as captioner_cli

    parser = build_parser(captioner_cli.PROG, "", captioner_cli.subcommands())
    assert parser.parse_args(["serve", "somewhere"]).host == "127.0.0.1"
