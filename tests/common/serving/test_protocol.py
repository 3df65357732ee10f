"""`common.serving.protocol` on its own: request parsing without a SavedModel or a server, and
the serving and export packages' imports (no TensorFlow where none is needed, no test helpers
in the library)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.errors import UserError
from common.serving.json_codec import RequestError
from common.serving.protocol import RequestParser, option_defaults, parse_body

SPECS = {
    "serving_default": {"x": tf.TensorSpec([None, 2], tf.int32),
                        "k": tf.TensorSpec([], tf.int32)},
    "plain": {"text": tf.TensorSpec([None], tf.string)},
}
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def parser():
    return RequestParser(SPECS, option_defaults(SPECS, {"k": 3}))


def test_row_and_columnar_give_the_same_arrays(parser):
    signature, layout, inputs, size = parser.parse({"instances": [[1, 2], [3, 4]]})
    assert (signature, layout, size) == ("serving_default", "row", 2)
    np.testing.assert_array_equal(inputs["x"], np.array([[1, 2], [3, 4]], np.int32))
    assert inputs["k"].dtype == np.int32 and inputs["k"].item() == 3  # the default
    body = {"signature_name": "", "inputs": {"x": [[1, 2], [3, 4]], "k": 5}}
    signature, layout, inputs, size = parser.parse(body)
    assert (signature, layout, size) == ("serving_default", "columnar", 2)
    np.testing.assert_array_equal(inputs["x"], [[1, 2], [3, 4]])
    assert inputs["k"].item() == 5
    _, _, inputs, _ = parser.parse({"signature_name": "plain", "instances": ["a", {"b64": "Yg=="}]})
    assert inputs["text"].tolist() == [b"a", b"b"]
    assert parser.batched_names("serving_default") == ["x"]
    assert parser.option_names("serving_default") == ["k"]


@pytest.mark.parametrize("body, message", [
    ([], "expected a JSON object, got a list"),
    ({"instances": [[1, 2]], "inputs": [[1, 2]]}, "only one of 'instances' or 'inputs'"),
    ({"instance": []}, "unknown field(s) 'instance'"),
    ({"signature_name": "nope", "inputs": []}, "choose one of: plain, serving_default"),
    ({"instances": [{"x": [1, 2], "k": 1}, {"x": [3, 4], "k": 2}]}, "option 'k' differs"),
    ({"instances": [[1, 2, 3]]}, "input 'x': each instance has shape [3]; expected [2]"),
    ({"inputs": {"x": [[1, 2]], "k": [1]}}, "input 'k': expected a single value, got shape [1]"),
    ({"instances": [{"y": 1}]}, "unknown input(s) 'y'; the signature takes: k, x"),
    ({}, "Missing 'inputs' or 'instances' key"),
])
def test_bad_requests_name_what_is_wrong(parser, body, message):
    with pytest.raises(RequestError) as caught:
        parser.parse(body)
    assert message in str(caught.value) and caught.value.status == 400


def test_no_default_means_the_option_is_required():
    parser = RequestParser(SPECS, option_defaults(SPECS, {}))
    with pytest.raises(RequestError, match="missing named input 'k'"):
        parser.parse({"instances": [[1, 2]]})
    with pytest.raises(UserError, match="which no signature takes as a single value"):
        option_defaults(SPECS, {"x": 1})


def test_the_checker_sees_every_per_instance_input():
    seen = []
    parser = RequestParser(SPECS, option_defaults(SPECS, {"k": 1}),
                           lambda array, where: seen.append((array.tolist(), where)))
    parser.parse({"instances": [[1, 2], [3, 4]]})
    parser.parse({"inputs": {"x": [[5, 6]], "k": 2}})
    assert seen == [([1, 2], "instance 0 of 'instances', input 'x'"),
                    ([3, 4], "instance 1 of 'instances', input 'x'"),
                    ([[5, 6]], "'inputs', input 'x'")]


def test_parse_body():
    assert parse_body(b'{"inputs": [1]}') == {"inputs": [1]}
    for raw, message in [(b"", "The document is empty"), (b"{", "JSON Parse error"),
                         (b"\xff", "JSON Parse error")]:
        with pytest.raises(RequestError, match=message):
            parse_body(raw)


def test_serving_imports_neither_tensorflow_nor_aiohttp_until_needed():
    code = ("import sys, json, common.serving, common.serving.protocol, "
            "common.serving.images, common.serving.batching, common.serving.json_codec; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} "
            "& {'tensorflow', 'aiohttp', 'keras'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert json.loads(out) == []


def test_the_library_holds_no_test_helpers():
    from common.export import savedmodel

    # files, not imports: an editable install of another checkout may still provide the modules
    common = REPO / "common"
    assert not (common / "testing.py").exists() and not (common / "export" / "server.py").exists()
    assert (common / "serving" / "app.py").is_file()
    assert not hasattr(savedmodel, "run_signature_isolated")
    assert not hasattr(savedmodel, "saved_model_cli")


def test_a_request_of_no_instances_or_too_many_is_refused_before_screening():
    screened = []
    parser = RequestParser(SPECS, option_defaults(SPECS, {"k": 3}),
                           lambda array, where: screened.append(len(array)), max_instances=3)
    for body in ({"inputs": {"x": np.zeros((0, 2), int).tolist()}},
                 {"signature_name": "plain", "inputs": []}):
        with pytest.raises(RequestError, match="no values") as caught:
            parser.parse(body)
        assert caught.value.status == 400
    for body in ({"instances": [[1, 2]] * 4}, {"inputs": {"x": [[1, 2]] * 4}},
                 {"signature_name": "plain", "instances": ["a"] * 4}):
        with pytest.raises(RequestError, match="4 instances in one request; at most 3") as caught:
            parser.parse(body)
        assert caught.value.status == 413
    assert screened == []  # refused before any instance was screened
    assert parser.parse({"instances": [[1, 2]] * 3})[3] == 3
