"""JSON values map to arrays, and arrays to JSON, the way TensorFlow Serving maps them."""

import base64
import math

import numpy as np
import pytest
import tensorflow as tf

from common.serving.json_codec import RequestError, array_to_json, json_to_array


def test_nested_lists_become_arrays_of_the_signature_dtype():
    array = json_to_array([[1, 2, 3], [4, 5, 6]], tf.int32, "x")
    assert array.dtype == np.int32 and array.tolist() == [[1, 2, 3], [4, 5, 6]]
    floats = json_to_array([1, 2.5, float("nan")], tf.float32, "x")
    assert floats.dtype == np.float32 and floats[:2].tolist() == [1.0, 2.5] and np.isnan(floats[2])
    assert json_to_array(True, tf.bool, "x").shape == ()


def test_strings_are_utf8_and_b64_objects_are_bytes():
    raw = b"\xff\x00\x89PNG"
    array = json_to_array(["héllo", {"b64": base64.b64encode(raw).decode()}], tf.string, "x")
    assert array.dtype == object and array.tolist() == ["héllo".encode(), raw]
    unpadded = base64.b64encode(b"ab").decode().rstrip("=")
    assert json_to_array({"b64": unpadded}, tf.string, "x").item() == b"ab"
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff").decode()
    assert json_to_array({"b64": urlsafe}, tf.string, "x").item() == b"\xfb\xff"


@pytest.mark.parametrize(
    "value, dtype, fragment",
    [
        ([[1, 2], [3]], tf.int32, "unequal lengths"),
        ([1, [2]], tf.int32, "unequal lengths"),
        (1.5, tf.int32, "not of expected type int32"),
        (True, tf.int32, "not of expected type int32"),
        (2**40, tf.int32, "out of range"),
        ("1", tf.float32, "not of expected type float"),
        (1e300, tf.float32, "out of range"),
        (3, tf.string, "not of expected type string"),
        ({"b64": "@@@"}, tf.string, "not valid base64"),
        ({"b64": "aGk=", "x": 1}, tf.string, "not of expected type string"),
        (1, tf.bool, "not of expected type bool"),
        (None, tf.float32, "not of expected type float"),
    ],
)
def test_bad_values_say_what_was_received_and_expected(value, dtype, fragment):
    with pytest.raises(RequestError, match=fragment) as info:
        json_to_array(value, dtype, "instance 0")
    assert str(info.value).startswith("instance 0") and info.value.status == 400


def test_outputs_become_json_values():
    assert array_to_json(np.array([[1, 2]], np.int64)) == [[1, 2]]
    assert array_to_json(np.array([0.1, math.inf], np.float32)) == [0.1, math.inf]  # shortest
    assert array_to_json(np.array(0.1, np.float64)) == 0.1
    assert array_to_json(np.array([True, False])) == [True, False]
    strings = np.array([b"caf\xc3\xa9", b"\xff\xfe"], dtype=object)
    assert array_to_json(strings, "caption") == ["café", {"b64": base64.b64encode(b"\xff\xfe").decode()}]
    assert array_to_json(np.array([b"ok"], dtype=object), "image_bytes") == [{"b64": "b2s="}]
