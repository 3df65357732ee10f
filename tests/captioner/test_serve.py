"""Serving an exported captioner over the REST API: concurrent valid and invalid requests,
every likely image answered, every bad one a 4xx, and the server still up."""

import base64
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from captioner.export import ExportedCaptioner
from common.serving.app import create_app, serve_in_background
from tests.common.image_cases import bad_images, good_images

OPTIONS = "caption_with_options"


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode("ascii")}


def post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def expected(exported_captioner, shape_images, tmp_path_factory):
    """Captions by `ExportedCaptioner` (which `captioner caption` uses) for the shapes and for
    every good image case, with the export's default beam (2) and with beam 1."""
    captioner = ExportedCaptioner(exported_captioner)
    folder = tmp_path_factory.mktemp("served-images")
    files = {}
    for name, data in good_images().items():
        files[name] = folder / name
        files[name].write_bytes(data)
    for path in shape_images:
        files[path.name] = path
    result = {}
    for beam in (1, 2):
        done, failed = captioner.caption_files(list(files.values()), beam_size=beam)
        assert not failed
        result[beam] = {p.rsplit("/", 1)[-1]: c.text for p, c in done}
    return {name: path.read_bytes() for name, path in files.items()}, result


@pytest.mark.slow
def test_concurrent_valid_and_invalid_requests(exported_captioner, expected, shape_images):
    images, captions = expected
    requests = []  # (body, check)
    for name, data in images.items():  # the shapes and every good image case
        requests.append(({"instances": [b64(data)]},
                         lambda s, r, n=name: s == 200
                         and r["predictions"][0]["captions"] == captions[2][n]))
    for path in shape_images[:3]:
        requests.append(({"signature_name": OPTIONS,
                          "inputs": {"images": [b64(images[path.name])], "beam_size": 1}},
                         lambda s, r, n=path.name: s == 200
                         and r["outputs"]["captions"] == [captions[1][n]]))
    names = [p.name for p in shape_images]
    requests.append(({"signature_name": OPTIONS,
                      "instances": [{"images": b64(images[names[0]]), "n_best": 2}]},
                     lambda s, r: s == 200
                     and r["predictions"][0]["n_best_captions"][0] == captions[2][names[0]]
                     and len(r["predictions"][0]["n_best_captions"]) == 2))
    requests.append(({"instances": [{"images": b64(images[n])} for n in names]},
                     lambda s, r: s == 200
                     and [p["captions"] for p in r["predictions"]] == [captions[2][n]
                                                                       for n in names]))
    invalid = [{"instances": [b64(data)]} for data, _ in bad_images().values()]
    good = b64(images[names[0]])
    invalid += [
        {"instances": [good, b64(b"")]},                               # one bad in a batch
        {"signature_name": OPTIONS, "inputs": {"images": [good], "beam_size": 7}},  # not exported
        {"signature_name": OPTIONS, "inputs": {"images": [good], "max_length": 999}},
        {"signature_name": OPTIONS, "inputs": {"images": [good], "n_best": 3}},  # > beam 2
        {"inputs": {"images": [good], "beam_size": 1}},                # serving_default: no options
        {"instances": [3]},                                            # not a string
        {"instances": [{"b64": "%%%"}]},                               # not base64
        {"instances": [good], "frobnicate": 1},                        # unknown field
        {"inputs": {"pictures": [good]}},                              # wrong input name
        {"inputs": {"images": good}},                                  # not a list
        b"{not json",
        b"x" * 300_000,                                                # over the body limit
    ]
    for body in invalid:
        requests.append((body, lambda s, r: 400 <= s < 500 and isinstance(r.get("error"), str)))

    app = create_app(exported_captioner, "captioner", batch_timeout_ms=20,
                     max_body_bytes=200_000, screen_images=True)
    with serve_in_background(app) as url:
        predict = f"{url}/v1/models/captioner:predict"
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
            shown = body if isinstance(body, bytes) else json.dumps(body)[:200]
            assert result is not None and check(*result), (shown, result)
        # each bad image is refused with its reason: from its header (the bomb before the
        # model decodes anything), the truncated JPEG by the model's decoder
        for offset, (name, (_, word)) in enumerate(bad_images().items()):
            error = results[len(images) + 5 + offset][1]["error"]
            word = {"truncated.jpg": "Invalid JPEG data", "bomb.png": "pixels"}.get(name, word)
            assert word in error, error
        # still up, and still right
        with urllib.request.urlopen(f"{url}/v1/models/captioner", timeout=60) as response:
            status = json.loads(response.read())
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        code, answer = post(predict, {"instances": [good]})
        assert code == 200 and answer["predictions"][0]["captions"] == captions[2][names[0]]
        prediction = answer["predictions"][0]
        assert len(prediction["attention"]) == 12 and len(prediction["attention"][0]) == 8
        with urllib.request.urlopen(f"{url}/v1/models/captioner/metadata", timeout=60) as response:
            meta = json.loads(response.read())
        signatures = meta["metadata"]["signature_def"]["signature_def"]
        assert set(signatures) == {"serving_default", OPTIONS}
        assert set(signatures["serving_default"]["inputs"]) == {"images"}
        assert signatures["serving_default"]["inputs"]["images"]["dtype"] == "DT_STRING"


@pytest.mark.slow
def test_serve_cli_starts_and_answers(exported_captioner, shape_images):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "captioner", "serve", str(exported_captioner), "--port",
         str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = ""
        for line in proc.stdout:
            if line.startswith("Serving"):
                break
        assert line.startswith(f"Serving http://127.0.0.1:{port}/v1/models/captioner"), line
        url = f"http://127.0.0.1:{port}/v1/models/captioner:predict"
        code, answer = post(url, {"instances": [b64(shape_images[0].read_bytes())]})
        assert code == 200 and isinstance(answer["predictions"][0]["captions"], str)
        code, answer = post(url, {"instances": [b64(good_images()["image.tiff"])]})
        assert code == 200, answer  # re-encoded for the graph
        code, answer = post(url, {"instances": [b64(bad_images()["bomb.png"][0])]})
        assert code == 400 and "pixels" in answer["error"]
    finally:
        proc.terminate()
        proc.wait(60)
