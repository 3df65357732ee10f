"""scripts/serve_client_example.py talks to the server (row format, and columnar with options)."""

import importlib.util
import json
from pathlib import Path

import pytest

from common.serving.app import create_app, serve_in_background

from .conftest import png_bytes

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "serve_client_example.py"


@pytest.fixture(scope="module")
def client():
    spec = importlib.util.spec_from_file_location("serve_client_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_client_sends_sentences_and_options(client, text_model_dir, capsys):
    with serve_in_background(create_app(text_model_dir, "shout")) as url:
        assert client.main(["--url", url, "--model", "shout", "--text", "a b", "--text", "c"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert [p["tokens"] for p in answer["predictions"]] == [2, 1]
        argv = ["--url", url, "--model", "shout", "--text", "a b", "--option", "scale=5"]
        assert client.main(argv) == 0
        assert json.loads(capsys.readouterr().out)["outputs"]["tokens"] == [10]
        assert client.main(["--url", url, "--model", "nope", "--text", "a"]) == 1
        assert "HTTP 404: Servable not found" in capsys.readouterr().err


def test_client_sends_image_files(client, image_model_dir, tmp_path, capsys):
    path = tmp_path / "x.png"
    path.write_bytes(png_bytes(3, size=(6, 2)))
    with serve_in_background(create_app(image_model_dir, "stats")) as url:
        assert client.main(["--url", url, "--model", "stats", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["predictions"][0]["shape"] == [2, 6, 3]
    # A file that cannot be read is bad input (exit 2), named, before anything is sent.
    assert client.main(["--url", "http://127.0.0.1:9", "--model", "stats",
                        str(tmp_path / "none.png")]) == 2
    missing = f"serve_client_example.py: error: {tmp_path / 'none.png'}: No such file or directory"
    assert capsys.readouterr().err.strip() == missing
