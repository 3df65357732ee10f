"""The REST server, over real HTTP on a free localhost port, against small SavedModels."""

import base64
import concurrent.futures
import gzip
import io
import json
import threading

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from common.errors import UserError
from common.serving.app import BATCHER, MODEL, create_app, serve_in_background

from .conftest import bomb_png, png_bytes, request


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def reference_stats(data: bytes) -> tuple[float, list[int]]:
    """Mean pixel and (H, W, C) by Pillow and NumPy, independent of TensorFlow."""
    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)
    return pixels.mean(), list(pixels.shape)


@pytest.fixture
def image_server(image_model_dir):
    app = create_app(image_model_dir, "stats", batch_timeout_ms=300, max_body_bytes=200_000)
    with serve_in_background(app) as url:
        yield app, url + "/v1/models/stats"


@pytest.fixture
def text_server(text_model_dir):
    with serve_in_background(create_app(text_model_dir, "shout")) as url:
        yield url + "/v1/models/shout"


def calls(app) -> int:
    return int(app[MODEL].loaded.calls.numpy())


def test_status_and_metadata_endpoints(image_server):
    app, url = image_server
    for path in ("", "/versions/1"):
        status, body, content_type = request(url + path)
        assert status == 200 and content_type == "application/json"
        assert body == {
            "model_version_status": [
                {"version": "1", "state": "AVAILABLE",
                 "status": {"error_code": "OK", "error_message": ""}}
            ]
        }
    status, body, _ = request(url + "/metadata")
    assert status == 200 and body["model_spec"] == {
        "name": "stats", "signature_name": "", "version": "1"
    }
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == ["mean_only", "serving_default"]
    images = signatures["serving_default"]["inputs"]["images"]
    assert images["dtype"] == "DT_STRING" and images["tensor_shape"]["dim"] == [{"size": "-1"}]
    assert sorted(signatures["serving_default"]["outputs"]) == ["mean", "shape"]
    for path in ("/versions/2", "/versions/2/metadata"):
        assert request(url + path)[0] == 404
    status, body, _ = request(url.replace("stats", "other") + ":predict", {"instances": ["x"]})
    assert status == 404 and body == {"error": "Servable not found for request: Latest(other)"}


def test_unknown_paths_and_methods_get_json_errors(image_server):
    app, url = image_server
    base = url.rsplit("/v1/", 1)[0]
    assert request(base + "/v2/models/stats")[:2] == (404, {"error": "Not Found: GET /v2/models/stats"})
    status, body, content_type = request(url + ":predict")  # GET
    assert (status, content_type) == (405, "application/json") and "GET" in body["error"]
    assert request(url, b"{}")[0] == 405  # POST to the status endpoint


def test_predictions_equal_the_savedmodel_called_in_process(image_server, image_model_dir):
    app, url = image_server
    images = [png_bytes(seed, size=(3 + seed, 4)) for seed in range(3)]
    loaded = tf.saved_model.load(str(image_model_dir))
    direct = loaded.signatures["serving_default"](images=tf.constant(images))

    status, body, _ = request(url + ":predict", {"instances": [b64(x) for x in images]})
    assert status == 200
    assert [p["shape"] for p in body["predictions"]] == direct["shape"].numpy().tolist()
    np.testing.assert_allclose([p["mean"] for p in body["predictions"]], direct["mean"].numpy())
    for prediction, data in zip(body["predictions"], images):
        mean, shape = reference_stats(data)
        assert prediction["shape"] == shape and prediction["mean"] == pytest.approx(mean, 1e-5)

    # Columnar format, with named inputs, and another signature with a single output.
    status, body, _ = request(url + ":predict", {"inputs": {"images": [b64(x) for x in images]}})
    assert status == 200 and body["outputs"]["shape"] == direct["shape"].numpy().tolist()
    status, body, _ = request(
        url + ":predict", {"signature_name": "mean_only", "instances": [{"images": b64(images[0])}]}
    )
    assert status == 200 and body["predictions"] == pytest.approx([reference_stats(images[0])[0]])


def test_text_model_options_strings_and_bytes(text_server):
    url = text_server + ":predict"
    status, body, _ = request(url, {"instances": ["hello world", "¿qué tal?"]})
    assert status == 200 and body["predictions"] == [
        {"upper": "HELLO WORLD", "tokens": 2, "echo_bytes": b64(b"hello world")},
        {"upper": "¿QUé TAL?", "tokens": 2, "echo_bytes": b64("¿qué tal?".encode())},
    ]  # tf.strings.upper changes ASCII only; `_bytes` outputs are always base64
    status, body, _ = request(url, {"inputs": {"sentences": ["a b c"], "scale": 3}})
    assert status == 200 and body["outputs"]["tokens"] == [9]  # the option reached the model
    status, body, _ = request(url, {"instances": [{"sentences": b64(b"\xff ok"), "scale": 2}]})
    assert status == 200 and body["predictions"][0]["upper"] == b64(b"\xff OK")  # not UTF-8
    assert body["predictions"][0]["tokens"] == 4


def test_options_need_a_value_or_a_default(text_model_dir):
    with pytest.raises(UserError, match="'beam_size', which no signature takes"):
        create_app(text_model_dir, "shout", input_defaults={"beam_size": 3})
    with serve_in_background(create_app(text_model_dir, "shout", input_defaults={})) as url:
        url += "/v1/models/shout:predict"
        status, body, _ = request(url, {"instances": ["a b"]})
        assert status == 400 and body["error"] == "missing named input 'scale' (a single value)"
        status, body, _ = request(url, {"instances": [{"sentences": "a", "scale": 1},
                                                      {"sentences": "b", "scale": 2}]})
        assert status == 400 and "differs between instances" in body["error"]
        status, body, _ = request(url, {"inputs": {"sentences": ["a"], "scale": [2]}})
        assert status == 400 and "expected a single value" in body["error"]
        # Text that starts like an image header is still text for a model that takes text.
        status, body, _ = request(url, {"inputs": {"sentences": ["BMW GIF89a RIFF"], "scale": 2}})
        assert status == 200 and body["outputs"]["tokens"] == [6]


def test_concurrent_requests_with_different_options_are_not_mixed(text_model_dir):
    app = create_app(text_model_dir, "shout", batch_timeout_ms=200)
    jobs = [(["a b c"] * (1 + i % 2), 1 + i % 3) for i in range(9)]
    barrier = threading.Barrier(len(jobs))
    with serve_in_background(app) as url:

        def predict(job):
            barrier.wait()
            sentences, scale = job
            body = {"inputs": {"sentences": sentences, "scale": scale}}
            return request(url + "/v1/models/shout:predict", body)

        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(predict, jobs))
    for (status, body, _), (sentences, scale) in zip(results, jobs):
        assert status == 200 and body["outputs"]["tokens"] == [3 * scale] * len(sentences)
    assert calls(app) >= 3  # one call per distinct scale at least


BAD_REQUESTS = [
    (b"{not json", 400, "JSON Parse error"),
    (b"", 400, "empty"),
    (b"[1, 2]", 400, "expected a JSON object"),
    (b'{"instances": ' + b"[" * 100_000, 400, "JSON Parse error"),
    (b'{"instances": ["\xff"]}', 400, "JSON Parse error"),  # not UTF-8
    (b'{"instances": ["\\ud800"]}', 400, "not valid Unicode"),  # a lone surrogate
    ({"instance": ["x"]}, 400, "unknown field(s) 'instance'"),
    ({"signature_name": "x"}, 400, "not found"),
    ({}, 400, "Missing 'inputs' or 'instances' key"),
    ({"instances": [], }, 400, "No values"),
    ({"instances": "abc"}, 400, "must be a list"),
    ({"instances": ["a"], "inputs": ["a"]}, 400, "only one of"),
    ({"instances": [{"picture": "a"}]}, 400, "unknown input(s) 'picture'"),
    ({"instances": [3]}, 400, "not of expected type string"),
    ({"instances": [["a", "b"]]}, 400, "expected []"),
    ({"instances": [{"b64": "not base64!"}]}, 400, "not valid base64"),
    ({"inputs": "abc"}, 400, "expected a list"),
    ({"instances": [b64(bomb_png())]}, 400,
     "instance 0 of 'instances', input 'images': the image header declares 1600000000 pixels; "
     "the limit is 25000000"),
    ({"inputs": [b64(png_bytes(0)), b64(bomb_png())]}, 400,
     "'inputs', input 'images', instance 1: the image header declares 1600000000 pixels"),
    ({"instances": [b64(b"\x89PNG\r\n\x1a\n" + bytes(40))]}, 400, "PNG"),
    ({"instances": [b64(b"GIF89a" + bytes(40))]}, 400, "GIF"),
]


def nested(depth: int, leaf) -> object:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


BAD_REQUESTS += [
    # Deeper than NumPy's 64 dimensions: refused as JSON, not a 500 from the array.
    ({"instances": nested(65, "a")}, 400, "nested more than 32 deep"),
    ({"inputs": nested(900, "a")}, 400, "nested more than 32 deep"),
]


@pytest.mark.parametrize("body, status, fragment", BAD_REQUESTS)
def test_bad_requests_get_a_4xx_json_error(image_server, body, status, fragment):
    app, url = image_server
    got_status, got_body, content_type = request(url + ":predict", body)
    assert (got_status, content_type) == (status, "application/json")
    assert list(got_body) == ["error"] and fragment in got_body["error"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_that_does_not_decompress_gets_a_400(image_server, encoding):
    app, url = image_server
    status, body, _ = request(url + ":predict", b"not compressed at all",
                              headers={"Content-Encoding": encoding})
    assert status == 400 and body["error"].startswith("request body could not be decoded")
    assert "\n" not in body["error"]  # docs/serving.md: one line
    good = gzip.compress(json.dumps({"instances": [b64(png_bytes(0))]}).encode())
    status, body, _ = request(url + ":predict", good, headers={"Content-Encoding": "gzip"})
    assert status == 200 and len(body["predictions"]) == 1  # the server keeps serving


def test_an_image_larger_than_the_limit_is_refused_from_its_header(image_model_dir):
    app = create_app(image_model_dir, "stats", max_image_pixels=20 * 20)
    with serve_in_background(app) as url:
        before = calls(app)
        for data in (bomb_png(), bomb_png(30, 20)):
            status, body, _ = request(url + "/v1/models/stats:predict", {"instances": [b64(data)]})
            assert status == 400 and "pixels" in body["error"]
        assert calls(app) == before  # refused without running the model
        small = png_bytes(0, size=(20, 20))
        assert request(url + "/v1/models/stats:predict", {"instances": [b64(small)]})[0] == 200


def test_oversized_body_gets_413_and_the_server_keeps_serving(image_server):
    app, url = image_server
    status, body, _ = request(url + ":predict", {"instances": ["x" * 300_000]})
    assert status == 413 and "limit of 200000 bytes" in body["error"]
    assert request(url + ":predict", {"instances": [b64(png_bytes(1))]})[0] == 200


def test_concurrent_requests_are_merged_into_one_call(image_server):
    app, url = image_server
    images = [png_bytes(seed) for seed in range(8)]
    barrier = threading.Barrier(len(images))

    def predict(data):
        barrier.wait()
        return request(url + ":predict", {"instances": [b64(data)]})

    before = calls(app)
    with concurrent.futures.ThreadPoolExecutor(len(images)) as pool:
        results = list(pool.map(predict, images))
    for (status, body, _), data in zip(results, images):
        assert status == 200 and body["predictions"][0]["mean"] == pytest.approx(
            reference_stats(data)[0], 1e-5
        )
    # 8 requests inside one 300 ms window: far fewer model calls than requests.
    assert calls(app) - before <= 3 and app[BATCHER].stats.merged_calls >= 1


def test_concurrent_valid_and_invalid_requests(image_server):
    app, url = image_server
    good = {seed: png_bytes(seed, size=(2 + seed % 5, 3)) for seed in range(24)}
    bad = [
        {"instances": [b64(b"\x89PNG\r\n\x1a\n" + bytes(30))]},  # TensorFlow cannot decode it
        {"instances": [b64(bomb_png())]},
        {"instances": [{"b64": "%%%"}]},
        {"instances": [1.5]},
        b'{"instances": [',
    ]

    def work(thread: int):
        answers = []
        for step in range(4):
            if (thread + step) % 2:
                seed = thread * 3 + step % 3
                status, body, _ = request(url + ":predict", {"instances": [b64(good[seed])]})
                answers.append(("good", seed, status, body))
            else:
                status, body, _ = request(url + ":predict", bad[(thread + step) % len(bad)])
                answers.append(("bad", None, status, body))
        return answers

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = [a for result in pool.map(work, range(8)) for a in result]
    assert len(answers) == 32
    for kind, seed, status, body in answers:
        if kind == "good":
            mean, shape = reference_stats(good[seed])
            assert status == 200, body
            assert body["predictions"][0]["shape"] == shape
            assert body["predictions"][0]["mean"] == pytest.approx(mean, 1e-5)
        else:
            assert 400 <= status < 500 and set(body) == {"error"}
    assert request(url)[0] == 200  # still serving
    assert request(url + ":predict", {"instances": [b64(good[0])]})[0] == 200


def test_one_undecodable_image_does_not_fail_the_requests_merged_with_it(image_server):
    app, url = image_server
    images = [png_bytes(seed) for seed in range(4)] + [b"\x89PNG\r\n\x1a\n" + bytes(30)]
    barrier = threading.Barrier(len(images))

    def predict(data):
        barrier.wait()
        return request(url + ":predict", {"instances": [b64(data)]})

    with concurrent.futures.ThreadPoolExecutor(len(images)) as pool:
        results = list(pool.map(predict, images))
    assert [status for status, _, _ in results] == [200, 200, 200, 200, 400]
    assert "PNG" in results[-1][1]["error"]
    for (_, body, _), data in zip(results, images):
        if "predictions" in body:
            assert body["predictions"][0]["mean"] == pytest.approx(reference_stats(data)[0], 1e-5)


def test_bad_arguments_are_user_errors(tmp_path, image_model_dir):
    with pytest.raises(UserError, match="not a SavedModel"):
        create_app(tmp_path, "m")
    with pytest.raises(UserError, match="model name"):
        create_app(image_model_dir, "a/b")


def test_serve_runs_until_interrupted_on_localhost(image_model_dir):
    import inspect
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from common.serving.app import serve

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = f"from common.serving.app import serve; serve({str(image_model_dir)!r}, 'm', port={port})"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body, _ = request(f"http://127.0.0.1:{port}/v1/models/m", timeout=5)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert f"Serving http://127.0.0.1:{port}/v1/models/m" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


class Whisper(tf.Module):
    """Lower-cases sentences: a second version that answers differently from `Shout`."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve(self, sentences):
        return {"lower": tf.strings.lower(sentences)}


@pytest.fixture(scope="module")
def versioned_base(tmp_path_factory, text_model_dir):
    """TensorFlow Serving's model base path: BASE/1 (`Shout`), BASE/2 (`Whisper`)."""
    base = tmp_path_factory.mktemp("versions")
    (base / "1").symlink_to(text_model_dir, target_is_directory=True)
    module = Whisper()
    tf.saved_model.save(module, str(base / "2"), signatures={"serving_default": module.serve})
    return base


def test_a_model_base_path_serves_its_highest_version_and_each_by_number(versioned_base):
    with serve_in_background(create_app(versioned_base, "m")) as url:
        url += "/v1/models/m"
        body = {"instances": ["Hello World"]}
        assert request(url + ":predict", body)[:2] == (200, {"predictions": ["hello world"]})
        assert request(url + "/versions/2:predict", body)[:2] == (
            200, {"predictions": ["hello world"]})
        status, answer, _ = request(url + "/versions/1:predict", body)
        assert status == 200 and answer["predictions"][0]["upper"] == "HELLO WORLD"
        ok = {"error_code": "OK", "error_message": ""}
        assert request(url)[1] == {"model_version_status": [
            {"version": "2", "state": "AVAILABLE", "status": ok},
            {"version": "1", "state": "AVAILABLE", "status": ok}]}
        assert request(url + "/versions/1")[1] == {"model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": ok}]}
        assert request(url + "/metadata")[1]["model_spec"]["version"] == "2"
        metadata = request(url + "/versions/1/metadata")[1]
        assert metadata["model_spec"]["version"] == "1"
        assert "scale" in metadata["metadata"]["signature_def"]["signature_def"][
            "serving_default"]["inputs"]  # version 1's own signatures
        for path in ("/versions/3", "/versions/x", "/versions/3:predict"):
            status, answer, _ = request(url + path, body if path.endswith("predict") else None)
            assert status == 404 and answer["error"].startswith(
                "Servable not found for request: Specific(m, ")


def test_assertion_errors_give_their_message_alone():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def check(lengths, beam):
        asserts = [
            tf.debugging.assert_positive(lengths, message="empty sentence: nothing to do"),
            tf.debugging.Assert(beam < 3, [tf.strings.format("beam must be one of [1, 2]; "
                                                             "got {}", beam)]),
            tf.debugging.Assert(beam > 0, ["beam must be positive, got", beam]),
        ]
        with tf.control_dependencies(asserts):
            return tf.identity(lengths)

    from common.serving.protocol import tf_error_message

    def reason(lengths, beam):
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            check(tf.constant(lengths), tf.constant(beam))
        return tf_error_message(caught.value.message)

    assert reason([3, 0], 1) == "empty sentence: nothing to do"
    assert reason([3], 7) == "beam must be one of [1, 2]; got 7"
    assert reason([3], -1) == "beam must be positive, got -1"
    # other errors keep their text, without the graph's node names
    assert tf_error_message("Graph execution error:\n\nDetected at node DecodePng defined at (most "
                      "recent call last):\n<stack traces unavailable>\nInvalid PNG data, size "
                      "40\n\t [[{{node DecodePng}}]] [Op:__inference_f_1]") == (
        "Invalid PNG data, size 40")


def test_too_many_instances_get_413_and_no_model_call(text_model_dir):
    app = create_app(text_model_dir, "shout", max_request_instances=5)
    with serve_in_background(app) as url:
        url += "/v1/models/shout:predict"
        status, body, _ = request(url, {"instances": ["a b"] * 6})
        assert status == 413 and "6 instances in one request; at most 5" in body["error"]
        assert calls(app) == 0
        status, body, _ = request(url, {"instances": ["a b"] * 5})
        assert status == 200 and len(body["predictions"]) == 5


def test_an_address_the_server_cannot_listen_on_is_one_line():
    import socket

    from common.serving.app import check_address

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
            check_address("127.0.0.1", port)
    with pytest.raises(UserError, match="does not resolve"):
        check_address("999.1.1.1", 8501)
    with pytest.raises(UserError, match="expected 0 to 65535"):
        check_address("127.0.0.1", 70000)
    with socket.socket() as free:  # "" is every interface, as aiohttp binds it
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    check_address("", port)
