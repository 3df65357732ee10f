"""TensorFlow Serving's warm-up requests: `assets.extra/tf_serving_warmup_requests`.

A SavedModel's first call of a signature is its costliest: TensorFlow instantiates the
signature's function and optimizes its graph (grappler) before running it, seconds for a
decoder. TensorFlow Serving replays the requests of this file when it loads a version, before
the version is AVAILABLE, so that no client pays for it
(https://www.tensorflow.org/tfx/serving/saved_model_warmup). `export` writes one request per
signature (`common.export.module.DecodingModule.warmup_requests`) and `common.serving` replays
the same file before it reports the version AVAILABLE.

The file is a TFRecord of `tensorflow.serving.PredictionLog` protos
(`tensorflow_serving/apis/prediction_log.proto`), each holding a `PredictLog` whose
`PredictRequest` names the signature (`model_spec.signature_name`) and maps input names to
`TensorProto`s. Only those fields are written and read, by hand in protobuf's wire format, so
neither the export nor the server needs the tensorflow-serving-api package (the tests parse the
file with it).

Example:
>>> request = WarmupRequest("serving_default", {"sentences": np.array([b"hello"])})
>>> decode(encode(request)).inputs["sentences"]  # doctest: +SKIP
array([b'hello'], dtype=object)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError

WARMUP_FILE = "tf_serving_warmup_requests"  # in `assets.extra/`, as TensorFlow Serving reads it
#: TensorFlow Serving reads at most this many records (`kMaxNumRecords`); so does `read`.
MAX_RECORDS = 1000

# Field numbers (tensorflow_serving/apis/*.proto).
_PREDICTION_LOG_PREDICT = 6  # PredictionLog.predict_log
_PREDICT_LOG_REQUEST = 1  # PredictLog.request
_REQUEST_MODEL_SPEC, _REQUEST_INPUTS = 1, 2  # PredictRequest.model_spec, .inputs (a map)
_SPEC_NAME, _SPEC_SIGNATURE = 1, 3  # ModelSpec.name, .signature_name
_ENTRY_KEY, _ENTRY_VALUE = 1, 2  # a map entry's key and value
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5  # wire types


@dataclasses.dataclass(frozen=True)
class WarmupRequest:
    """One predict request: a signature and its inputs (name -> array, `(B,)` or scalar).

    Args:
        signature: the signature's name.
        inputs: its inputs by name, as arrays of the signature's dtypes (bytes for strings).
    """

    signature: str
    inputs: Mapping[str, np.ndarray]


def encode(request: WarmupRequest, model_name: str = "") -> bytes:
    """The serialized `PredictionLog` of `request` (TensorFlow Serving ignores `model_name`
    when it warms a model up; the signature and inputs are what it replays)."""
    import tensorflow as tf

    spec = _field(_SPEC_SIGNATURE, request.signature.encode())
    if model_name:
        spec = _field(_SPEC_NAME, model_name.encode()) + spec
    body = _field(_REQUEST_MODEL_SPEC, spec)
    for name, value in request.inputs.items():
        tensor = tf.make_tensor_proto(np.asarray(value)).SerializeToString()
        body += _field(_REQUEST_INPUTS,
                       _field(_ENTRY_KEY, name.encode()) + _field(_ENTRY_VALUE, tensor))
    return _field(_PREDICTION_LOG_PREDICT, _field(_PREDICT_LOG_REQUEST, body))


def decode(record: bytes) -> WarmupRequest:
    """The `WarmupRequest` of a serialized `PredictionLog` holding a predict request.

    Raises:
        ValueError: the record is not a protobuf message, or not a predict log (a classify,
            regress or multi-inference log: TensorFlow Serving's other kinds, which the
            signatures of these exports do not take).
    """
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    logs = _fields(record)
    if _PREDICTION_LOG_PREDICT not in logs:
        raise ValueError("not a PredictionLog with a predict_log (classify, regress and "
                         "multi-inference logs are not replayed)")
    request = _fields(_last(logs, _PREDICTION_LOG_PREDICT), _PREDICT_LOG_REQUEST)
    body = _fields(request)
    spec = _fields(_last(body, _REQUEST_MODEL_SPEC)) if _REQUEST_MODEL_SPEC in body else {}
    signature = (_last(spec, _SPEC_SIGNATURE) if _SPEC_SIGNATURE in spec else b"").decode()
    inputs = {}
    for entry in body.get(_REQUEST_INPUTS, []):
        parts = _fields(entry)
        name = (_last(parts, _ENTRY_KEY) if _ENTRY_KEY in parts else b"").decode()
        proto = tensor_pb2.TensorProto.FromString(
            _last(parts, _ENTRY_VALUE) if _ENTRY_VALUE in parts else b"")
        inputs[name] = tf.make_ndarray(proto)
    # An empty signature name is the default signature, as TensorFlow Serving reads it.
    return WarmupRequest(signature or "serving_default", inputs)


def write(path: str | os.PathLike, requests: Sequence[WarmupRequest]) -> Path:
    """Writes `requests` as TensorFlow Serving's warm-up file (a TFRecord of `encode`s)."""
    import tensorflow as tf

    if len(requests) > MAX_RECORDS:
        raise UserError(f"{len(requests)} warm-up requests; TensorFlow Serving reads at most "
                        f"{MAX_RECORDS}")
    with tf.io.TFRecordWriter(str(path)) as writer:
        for request in requests:
            writer.write(encode(request))
    return Path(path)


def read(path: str | os.PathLike) -> list[WarmupRequest]:
    """The requests of a warm-up file, in order.

    Raises:
        UserError: the file is not a TFRecord of predict logs, or holds more than
            `MAX_RECORDS` (TensorFlow Serving refuses to load such a model too).
    """
    import tensorflow as tf

    requests = []
    try:
        for index, record in enumerate(_records(path)):
            if index >= MAX_RECORDS:
                raise UserError(f"{path}: more than {MAX_RECORDS} warm-up records; "
                                f"TensorFlow Serving reads at most {MAX_RECORDS}")
            try:
                requests.append(decode(record))
            except (ValueError, tf.errors.OpError, TypeError) as exc:
                reason = " ".join(str(exc).split())[:200]
                raise UserError(f"{path}: warm-up record {index} is not a predict request "
                                f"({reason})") from None
    except tf.errors.OpError as exc:  # a corrupt or truncated TFRecord
        reason = " ".join(str(exc.message).split())[:200]
        raise UserError(f"{path}: not a TFRecord of warm-up requests ({reason})") from None
    return requests


def _records(path: str | os.PathLike) -> Iterator[bytes]:
    import tensorflow as tf

    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
        yield bytes(record)


# -- protobuf's wire format: length-delimited fields only ---------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings, bytes, messages, map entries)."""
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes, only: int | None = None) -> Any:
    """The length-delimited fields of a message, number -> payloads in order (other wire
    types skipped); with `only`, the last payload of that field (b"" when absent)."""
    found: dict[int, list[bytes]] = {}
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            _, at = _read_varint(data, at)
        elif kind == _FIXED64:
            at += 8
        elif kind == _FIXED32:
            at += 4
        elif kind == _BYTES:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            found.setdefault(number, []).append(data[at:at + size])
            at += size
        else:
            raise ValueError(f"wire type {kind} of field {number} is not supported")
        if at > len(data):
            raise ValueError("truncated field")
    if only is not None:
        return found[only][-1] if only in found else b""
    return found


def _last(fields: dict[int, list[bytes]], number: int) -> bytes:
    """A singular field's value (its last occurrence; `encode` writes each once)."""
    return fields[number][-1]
