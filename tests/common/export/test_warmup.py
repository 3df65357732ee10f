"""TensorFlow Serving's warm-up file, `assets.extra/tf_serving_warmup_requests`: what `export`
writes parses with tensorflow-serving-api's own `PredictionLog` and replays, signature by
signature, on plain TensorFlow; `common.export.warmup` reads what that package writes; and a
served version is AVAILABLE only once its warm-up requests have run."""

import json
import shutil
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from common.errors import UserError
from common.export import warmup
from common.export.savedmodel import EXTRA_DIR
from common.serving.app import create_app, serve_in_background
from common.serving.servable import ServedModel
from tests.helpers.toy_export import LENGTH


def _logs(path) -> list:
    """The file's records, parsed by tensorflow-serving-api's `PredictionLog`."""
    return [prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(str(path))]


def test_the_export_warms_each_signature_and_beam_size_as_tensorflow_serving_reads_it(
        toy_export):
    logs = _logs(toy_export / EXTRA_DIR / warmup.WARMUP_FILE)
    assert all(log.WhichOneof("log_type") == "predict_log" for log in logs)
    requests = [log.predict_log.request for log in logs]
    options = {"max_length": LENGTH, "no_repeat_ngram": 0}
    expected = [("serving_default", {}),  # then the default size first, the whole beam last
                *(("decode_with_options", {"beam_size": size, "n_best": 1, **options})
                  for size in (3, 1, 2, 4, 5)),
                ("decode_with_options", {"beam_size": 5, "n_best": 5, **options})]
    assert len(requests) == len(expected)
    for request, (signature, scalars) in zip(requests, expected):
        assert request.model_spec.signature_name == signature
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        np.testing.assert_array_equal(inputs.pop("examples"), np.array([b"0"], object))
        assert {name: (int(value), value.dtype, value.shape) for name, value in inputs.items()} \
            == {name: (value, np.int32, ()) for name, value in scalars.items()}


def test_each_request_replays_on_plain_tensorflow(toy_export):
    model = tf.saved_model.load(str(toy_export))
    for log in _logs(toy_export / EXTRA_DIR / warmup.WARMUP_FILE):
        request = log.predict_log.request
        signature = model.signatures[request.model_spec.signature_name]
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto
                  in request.inputs.items()}
        outputs = signature(**inputs)
        assert outputs["texts"].shape == (1,), request.model_spec.signature_name


def test_the_reader_takes_what_tensorflow_serving_api_writes(tmp_path):
    request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(
        name="m", signature_name="decode_with_options", version={"value": 7}),
        output_filter=["texts"])
    request.inputs["examples"].CopyFrom(tf.make_tensor_proto(np.array([b"1", b"2"], object)))
    request.inputs["beam_size"].CopyFrom(tf.make_tensor_proto(np.int32(3)))
    request.inputs["scale"].CopyFrom(tf.make_tensor_proto(np.array([0.5, 1.5], np.float32)))
    default = predict_pb2.PredictRequest()  # no signature name: the default signature
    default.inputs["examples"].CopyFrom(tf.make_tensor_proto(np.array([b"3"], object)))
    path = tmp_path / warmup.WARMUP_FILE
    with tf.io.TFRecordWriter(str(path)) as writer:
        for one in (request, default):
            log = prediction_log_pb2.PredictionLog(predict_log={"request": one})
            writer.write(log.SerializeToString())
    first, second = warmup.read(path)
    assert first.signature == "decode_with_options" and second.signature == "serving_default"
    assert sorted(first.inputs) == ["beam_size", "examples", "scale"]
    np.testing.assert_array_equal(first.inputs["examples"], [b"1", b"2"])
    assert first.inputs["beam_size"] == 3 and first.inputs["beam_size"].dtype == np.int32
    np.testing.assert_array_equal(first.inputs["scale"], np.array([0.5, 1.5], np.float32))
    np.testing.assert_array_equal(second.inputs["examples"], [b"3"])
    # ... and what `write` writes reads back whole, through the real parser as well.
    again = tmp_path / "again"
    warmup.write(again, [first, second])
    assert [log.predict_log.request.model_spec.signature_name for log in _logs(again)] == [
        "decode_with_options", "serving_default"]
    assert [r.signature for r in warmup.read(again)] == ["decode_with_options",
                                                         "serving_default"]


def test_a_file_that_is_not_warmup_requests_is_one_line(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01 not a TFRecord at all, just bytes\n" * 3)
    with pytest.raises(UserError, match="not a TFRecord of warm-up requests"):
        warmup.read(garbage)
    classify = tmp_path / "classify"
    with tf.io.TFRecordWriter(str(classify)) as writer:
        writer.write(prediction_log_pb2.PredictionLog(classify_log={}).SerializeToString())
    with pytest.raises(UserError, match="warm-up record 0 is not a predict request"):
        warmup.read(classify)


def test_serve_is_available_only_after_replaying_the_warmup(toy_export, monkeypatch):
    replayed = []
    run = ServedModel.run

    def spy(self, signature, inputs):
        replayed.append((self.status()["state"], signature, int(inputs.get("beam_size", 0))))
        return run(self, signature, inputs)

    monkeypatch.setattr(ServedModel, "run", spy)
    app = create_app(toy_export, "toy")
    assert replayed == [("LOADING", "serving_default", 0)] + [
        ("LOADING", "decode_with_options", size) for size in (3, 1, 2, 4, 5, 5)]
    with serve_in_background(app) as url:
        with urllib.request.urlopen(f"{url}/v1/models/toy") as answer:
            status = json.loads(answer.read())["model_version_status"]
        assert [s["state"] for s in status] == ["AVAILABLE"]
        body = json.dumps({"instances": ["4"]}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/models/toy:predict",
                                                           body)) as answer:
            assert "texts" in json.loads(answer.read())["predictions"][0]
    assert replayed[-1] == ("AVAILABLE", "serving_default", 0)


def test_a_warmup_request_the_model_cannot_take_stops_the_load_in_one_line(toy_export,
                                                                           tmp_path):
    export = shutil.copytree(toy_export, tmp_path / "export")
    path = export / EXTRA_DIR / warmup.WARMUP_FILE
    raw = {"examples": np.array([b"0"], object)}
    for requests, message in [
        ([warmup.WarmupRequest("classify", raw)],
         "warm-up request 0 names signature 'classify'; the SavedModel has: "
         "decode_with_options, serving_default"),
        ([warmup.WarmupRequest("serving_default", {"images": raw["examples"]})],
         r"warm-up request 0 \(serving_default\) has inputs \['images'\]; the signature "
         r"takes \['examples'\]"),
        ([warmup.WarmupRequest("serving_default", raw),
          warmup.WarmupRequest("decode_with_options", {**raw, **{
              name: np.int32(value) for name, value in
              {"beam_size": 6, "max_length": 4, "n_best": 1, "no_repeat_ngram": 0}.items()}})],
         r"warm-up request 1 \(decode_with_options\) failed: beam_size must be one of "
         r"\[1, 2, 3, 4, 5\]"),
    ]:
        warmup.write(path, requests)
        with pytest.raises(UserError, match=message):
            ServedModel(export)
