"""TensorFlow Serving's REST predict protocol: parsing and checking a request body.

https://www.tensorflow.org/tfx/serving/api_rest#predict_api

- `parse_body(raw)`: the request's bytes -> the JSON value (an empty or malformed body is a
  `RequestError`).
- `RequestParser(specs, defaults).parse(body)`: `{"instances": [...]}` (row format) or
  `{"inputs": ...}` (columnar), with an optional `signature_name`, -> the signature, the
  format, one array per input and the number of instances. Scalar inputs of a signature (say
  `beam_size`) are per-request options: given in `inputs`, or with one value in every instance
  object, or taken from `defaults` (`option_defaults` checks those).
- `tf_error_message(message)`: the one line worth returning from a TensorFlow op error.

Anything wrong is a `RequestError` (a 400 unless said) whose message names where and what was
expected; the HTTP app (`common.serving.app`) returns it as `{"error": ...}`. Signature specs
are read through `tf.TensorSpec` attributes only, so this module does not import TensorFlow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from common.errors import UserError
from common.serving.json_codec import RequestError, json_to_array

DEFAULT_SIGNATURE = "serving_default"
TOP_LEVEL_KEYS = ("signature_name", "instances", "inputs")

#: signature name -> input name -> its `tf.TensorSpec`.
Specs = Mapping[str, Mapping[str, Any]]


def parse_body(raw: bytes) -> Any:
    """A request body's bytes -> its JSON value; `RequestError` when empty or malformed."""
    if not raw:
        raise RequestError("JSON Parse error: The document is empty")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RequestError(f"JSON Parse error: {' '.join(str(exc).split())[:200]}") from None


def option_defaults(specs: Specs, input_defaults: Mapping[str, Any]) -> dict[str, dict]:
    """Server-side values for the scalar inputs, per signature, as arrays of their dtypes.

    Raises:
        UserError: a default names no scalar input of any signature, or does not fit its dtype.
    """
    options = {n for s in specs.values() for n, spec in s.items() if spec.shape.rank == 0}
    unknown = sorted(set(input_defaults) - options)
    if unknown:
        raise UserError(
            f"input defaults for {', '.join(map(repr, unknown))}, which no signature takes "
            f"as a single value; expected some of: {', '.join(sorted(options)) or 'none'}"
        )
    return {
        signature: {
            name: json_to_array(value, inputs[name].dtype, f"default {name!r}")
            for name, value in input_defaults.items()
            if name in inputs and inputs[name].shape.rank == 0
        }
        for signature, inputs in specs.items()
    }


class RequestParser:
    """Parses predict request bodies for the signatures `specs`.

    Args:
        specs: signature name -> input name -> `tf.TensorSpec` (a signature's
            `structured_input_signature[1]`).
        defaults: signature name -> scalar input name -> the value a request may leave out
            (`option_defaults`).
        check_batched: called as `check_batched(array, where)` on every per-instance input
            (the image screening, `common.serving.images.ImageScreen`); it may rewrite the
            elements of `array` in place, and raises `RequestError` to refuse one.
        max_instances: the most instances one request may hold (None: no limit); more is a
            413 before any is screened. A request runs in one model call whatever its size,
            so this bounds the memory and time one request can take.
    """

    def __init__(
        self,
        specs: Specs,
        defaults: Mapping[str, Mapping[str, np.ndarray]],
        check_batched: Callable[[np.ndarray, str], None] | None = None,
        max_instances: int | None = None,
    ):
        self.specs = specs
        self.defaults = defaults
        self._check = check_batched or (lambda array, where: None)
        self.max_instances = max_instances

    def _check_count(self, count: int, where: str) -> None:
        if count == 0:
            raise RequestError(f"{where}: no values; expected at least one instance")
        if self.max_instances is not None and count > self.max_instances:
            raise RequestError(f"{where}: {count} instances in one request; at most "
                               f"{self.max_instances} (the server's --max-request-instances)",
                               status=413)

    def batched_names(self, signature: str) -> list[str]:
        """The inputs that carry one value per instance (rank >= 1), sorted."""
        return sorted(n for n, s in self.specs[signature].items() if s.shape.rank != 0)

    def option_names(self, signature: str) -> list[str]:
        """The scalar inputs: one value per request."""
        return sorted(n for n, s in self.specs[signature].items() if s.shape.rank == 0)

    def parse(self, body: Any) -> tuple[str, str, dict[str, np.ndarray], int]:
        """A predict request body -> (signature, "row" | "columnar", inputs, instances).

        `instances` is -1 for columnar inputs of unequal lengths (never merged with others).
        """
        if not isinstance(body, dict):
            raise RequestError(f"expected a JSON object, got {_json_type(body)}")
        unknown = sorted(set(body) - set(TOP_LEVEL_KEYS))
        if unknown:
            raise RequestError(
                f"unknown field(s) {', '.join(map(repr, unknown))}; expected 'instances' or "
                "'inputs', and optionally 'signature_name'"
            )
        signature = body.get("signature_name", DEFAULT_SIGNATURE)
        if not isinstance(signature, str):
            raise RequestError(f"'signature_name' must be a string, got {_json_type(signature)}")
        signature = signature or DEFAULT_SIGNATURE
        if signature not in self.specs:
            raise RequestError(
                f"Serving signature name: {signature!r} not found; "
                f"choose one of: {', '.join(sorted(self.specs))}"
            )
        if "instances" in body and "inputs" in body:
            raise RequestError("expected only one of 'instances' or 'inputs', got both")
        if "instances" in body:
            inputs, size = self._parse_rows(signature, body["instances"])
            return signature, "row", inputs, size
        if "inputs" in body:
            inputs, size = self._parse_columns(signature, body["inputs"])
            return signature, "columnar", inputs, size
        raise RequestError("Missing 'inputs' or 'instances' key")

    def _parse_rows(self, signature: str, instances: Any) -> tuple[dict[str, np.ndarray], int]:
        specs, batched = self.specs[signature], self.batched_names(signature)
        if not isinstance(instances, list):
            raise RequestError(f"'instances' must be a list, got {_json_type(instances)}")
        if not instances:
            raise RequestError("No values in 'instances' list")
        self._check_count(len(instances), "'instances'")
        named = _is_object(instances[0])
        if not named and len(batched) != 1:
            raise RequestError(
                "'instances' is a plain list, but the signature has several inputs "
                f"({', '.join(batched)}): give each instance as an object"
            )
        rows: dict[str, list[np.ndarray]] = {name: [] for name in batched}
        options: dict[str, np.ndarray] = {}
        for i, item in enumerate(instances):
            where = f"instance {i} of 'instances'"
            if _is_object(item) != named:
                expected = "an object of named inputs" if named else "a value or list"
                raise RequestError(f"{where}: expected {expected}, got {_json_type(item)}")
            values = item if named else {batched[0]: item}
            _check_names(values, specs, where)
            missing = [name for name in batched if name not in values]
            if missing:
                raise RequestError(f"{where}: missing named input(s): {', '.join(missing)}")
            for name, value in values.items():
                array = json_to_array(value, specs[name].dtype, f"{where}, input {name!r}")
                if name in rows:
                    self._check(array, f"{where}, input {name!r}")
                    rows[name].append(array)
                elif name in options and not np.array_equal(options[name], array):
                    raise RequestError(
                        f"{where}: option {name!r} differs between instances; "
                        "give one value per request"
                    )
                else:
                    options[name] = array
        inputs = {}
        for name, arrays in rows.items():
            shapes = {a.shape for a in arrays}
            if len(shapes) > 1:
                raise RequestError(
                    f"input {name!r}: every instance must have the same shape, got "
                    f"{', '.join(str(list(s)) for s in sorted(shapes))}"
                )
            inputs[name] = np.stack(arrays)
        return self._finish(signature, inputs, options), len(instances)

    def _parse_columns(self, signature: str, columns: Any) -> tuple[dict[str, np.ndarray], int]:
        specs, batched = self.specs[signature], self.batched_names(signature)
        if not _is_object(columns):
            if len(batched) != 1:
                raise RequestError(
                    "'inputs' is a plain value or list, but the signature has several inputs "
                    f"({', '.join(batched)}): give an object of named inputs"
                )
            columns = {batched[0]: columns}
        _check_names(columns, specs, "'inputs'")
        missing = [name for name in batched if name not in columns]
        if missing:
            raise RequestError(f"'inputs': missing named input(s): {', '.join(missing)}")
        inputs, options = {}, {}
        for name, value in columns.items():
            array = json_to_array(value, specs[name].dtype, f"'inputs', input {name!r}")
            if name in batched:
                if array.ndim == 0:
                    raise RequestError(
                        f"'inputs', input {name!r}: expected a list (one value per instance), "
                        "got a single value"
                    )
                self._check_count(array.shape[0], f"'inputs', input {name!r}")
                self._check(array, f"'inputs', input {name!r}")
                inputs[name] = array
            else:
                options[name] = array
        sizes = {a.shape[0] for a in inputs.values()}
        size = sizes.pop() if len(sizes) == 1 else -1  # -1: unequal, never merged
        return self._finish(signature, inputs, options, leading=False), size

    def _finish(self, signature, inputs, options, leading=True) -> dict[str, np.ndarray]:
        specs = self.specs[signature]
        for name, array in inputs.items():
            expected = specs[name].shape
            shape = array.shape if not leading else (None, *array.shape[1:])
            if expected.rank is not None and not expected.is_compatible_with(shape):
                got = list(array.shape[1:] if leading else array.shape)
                want = expected.as_list()[1:] if leading else expected.as_list()
                what = "each instance" if leading else "the input"
                raise RequestError(
                    f"input {name!r}: {what} has shape {got}; expected {want} (None: any)"
                )
        for name in self.option_names(signature):
            if name not in options:
                if name not in self.defaults[signature]:
                    raise RequestError(f"missing named input {name!r} (a single value)")
                options[name] = self.defaults[signature][name]
            elif options[name].ndim != 0:
                raise RequestError(
                    f"input {name!r}: expected a single value, got shape {list(options[name].shape)}"
                )
        return {**inputs, **options}


def tf_error_message(message: str) -> str:
    """The useful part of a TensorFlow op error ("Invalid PNG...."), on one line.

    A failed `tf.debugging.assert_*` or `tf.debugging.Assert` gives its message alone:
    "assertion failed: [empty sentence.  ] [Condition x > 0 did not hold element-wise:] [x
    (x:0) = ] [0 3]" becomes "empty sentence", "assertion failed: [got] [7]" "got 7".
    """
    for noise in (
        r"Graph execution error:",
        r"Detected at node \S+ defined at \(most recent call last\):",
        r"<stack traces unavailable>",
        r"\[\[.*?\]\]",
        r"\[Op:[^\]]*\]",
    ):
        message = re.sub(noise, " ", message, flags=re.DOTALL)
    head, marker, asserted = message.partition("assertion failed:")
    if marker:
        message = _assertion_message(asserted) or message
    return " ".join(message.split())[:500] or "the model refused the input"


def _assertion_message(text: str) -> str:
    """The message of `tf.debugging.Assert`'s "[part] [part] ..." data, without the
    "Condition ... did not hold" part and the values after it that `assert_*` adds."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth == 1:
                current = []
                continue
        elif char == "]" and depth:
            depth -= 1
            if depth == 0:
                parts.append("".join(current).strip())
                continue
        if depth:
            current.append(char)
    kept = []
    for part in parts:
        if part.startswith("Condition "):
            break
        kept.append(part)
    message = " ".join(p for p in kept if p)
    return message[:-1] if message.endswith(".") and not message.endswith("..") else message


def _check_names(values: dict, specs: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(values) - set(specs))
    if unknown:
        raise RequestError(
            f"{where}: unknown input(s) {', '.join(map(repr, unknown))}; "
            f"the signature takes: {', '.join(sorted(specs))}"
        )


def _is_object(value: Any) -> bool:
    return isinstance(value, dict) and not (len(value) == 1 and "b64" in value)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")
