"""JSON values <-> NumPy arrays and response bodies, as TensorFlow Serving's REST API maps them.

- `json_to_array(value, dtype, where)`: a JSON scalar or rectangular nested lists -> an array of
  the signature's dtype (a `tf.DType`); strings become UTF-8 bytes and `{"b64": ...}` the bytes
  it encodes (standard or URL-safe alphabet, padding optional); numbers must fit the dtype.
- `array_to_json(array, name)`: an output -> JSON-ready values; bytes become UTF-8 text, or
  `{"b64": ...}` when `name` ends in `_bytes` or they are not valid UTF-8; float32 values keep
  their shortest round-trip digits.
- `outputs_to_json(outputs, layout)`: the `predictions` (row) or `outputs` (columnar) body.

Anything a request gets wrong is a `RequestError` naming where (`where`) and what was expected;
`common.serving.app` turns it into a 4xx `{"error": ...}`. Only `tf.DType` attributes are
read, so this module imports neither TensorFlow nor the web server.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from common.errors import UserError

#: The most nested list levels a JSON value may have: well under NumPy's limit of 64 dimensions
#: (the row format stacks instances into one more), and far above any signature's rank.
MAX_RANK = 32


class RequestError(UserError):
    """A request the server refuses; `status` is the HTTP status (400 unless said)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def json_to_array(value: Any, dtype: Any, where: str) -> np.ndarray:
    """A JSON value (a scalar or rectangular nested lists) -> an array of `dtype` (a tf.DType).

    Strings become UTF-8 bytes and `{"b64": ...}` the bytes it encodes (an object array);
    numbers must fit the dtype (no floats for integers, no booleans for numbers).
    """
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        if len(shape) == MAX_RANK:  # NumPy's limit on dimensions; no signature takes as many
            raise RequestError(f"{where}: lists nested more than {MAX_RANK} deep")
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat: list[Any] = []
    convert = _leaf_converter(dtype, where)

    def walk(item: Any, level: int) -> None:
        if isinstance(item, list):
            if level >= len(shape) or len(item) != shape[level]:
                raise RequestError(f"{where}: nested lists of unequal lengths are not a tensor")
            for element in item:
                walk(element, level + 1)
        elif level != len(shape):
            raise RequestError(f"{where}: nested lists of unequal lengths are not a tensor")
        else:
            flat.append(convert(item))

    walk(value, 0)
    np_dtype = object if dtype.name == "string" else dtype.as_numpy_dtype
    array = np.empty(len(flat), dtype=np_dtype)
    array[:] = flat
    return array.reshape(shape)


def _leaf_converter(dtype: Any, where: str) -> Callable[[Any], Any]:
    def type_error(value: Any) -> RequestError:
        text = json.dumps(value)
        text = text if len(text) <= 60 else text[:57] + "..."
        return RequestError(f"{where}: JSON value {text} is not of expected type {dtype.name}")

    if dtype.name == "string":

        def convert(value):
            if isinstance(value, str):
                try:
                    return value.encode("utf-8")
                except UnicodeEncodeError:
                    raise RequestError(f"{where}: the string is not valid Unicode") from None
            if isinstance(value, dict) and list(value) == ["b64"] and isinstance(value["b64"], str):
                return _b64decode(value["b64"], where)
            raise type_error(value)

    elif dtype.is_bool:

        def convert(value):
            if not isinstance(value, bool):
                raise type_error(value)
            return value

    elif dtype.is_integer:

        def convert(value):
            if not isinstance(value, int) or isinstance(value, bool):
                raise type_error(value)
            if not dtype.min <= value <= dtype.max:
                raise RequestError(f"{where}: {value} is out of range for {dtype.name}")
            return value

    elif dtype.is_floating:

        def convert(value):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise type_error(value)
            try:
                as_float = float(value)
            except OverflowError:
                as_float = math.inf
            if abs(as_float) > float(dtype.max) and not (
                isinstance(value, float) and math.isinf(value)
            ):
                raise RequestError(f"{where}: {value} is out of range for {dtype.name}")
            return value

    else:
        raise RequestError(f"{where}: inputs of type {dtype.name} are not supported")
    return convert


def _b64decode(text: str, where: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise RequestError(f"{where}: the 'b64' value is not valid base64")


def array_to_json(array: Any, name: str = "") -> Any:
    """An output array -> JSON-ready Python values, as TensorFlow Serving writes them.

    Bytes become UTF-8 strings, or `{"b64": ...}` when `name` ends in `_bytes` or they are not
    valid UTF-8; float32 values are written with their shortest round-trip digits.
    """
    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind == "S":
        as_b64 = name.endswith("_bytes")
        return _map(array, lambda value: _bytes_to_json(value, as_b64))
    if array.dtype.kind == "f" and array.dtype.itemsize < 8:
        scalar = array.dtype.type
        return _map(array, lambda value: float(str(scalar(value))))
    return array.tolist()


def _map(array: np.ndarray, fn: Callable[[Any], Any]) -> Any:
    out = np.frompyfunc(fn, 1, 1)(array)
    return out.tolist() if isinstance(out, np.ndarray) else out


def _bytes_to_json(value: Any, as_b64: bool) -> Any:
    if isinstance(value, bytes):
        if not as_b64:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def outputs_to_json(outputs: dict[str, np.ndarray], layout: str) -> dict:
    """A signature's outputs as the response body: `{"predictions": [...]}` for the row
    layout (one object per instance, or the bare values for a single output), `{"outputs": ...}`
    for the columnar one.

    Raises:
        RequestError: row layout asked of outputs without a shared batch dimension.
    """
    names = sorted(outputs)
    if layout == "columnar":
        if len(names) == 1:
            return {"outputs": array_to_json(outputs[names[0]], names[0])}
        return {"outputs": {n: array_to_json(outputs[n], n) for n in names}}
    sizes = {np.shape(outputs[name])[:1] for name in names}
    if len(sizes) != 1 or () in sizes:
        raise RequestError("the outputs do not share a batch dimension; use the 'inputs' format")
    columns = {n: array_to_json(outputs[n], n) for n in names}
    size = len(columns[names[0]])
    if len(names) == 1:
        return {"predictions": columns[names[0]]}
    return {"predictions": [{n: columns[n][i] for n in names} for i in range(size)]}
