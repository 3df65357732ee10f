"""A model served by a Python function rather than a SavedModel (a CTranslate2 export).

`EngineServable(specs, outputs, run, ...)` offers what the HTTP app (`common.serving.app`)
asks of `common.serving.servable.ServedModel` (`parser`, `run`, `mergeable`, `status`,
`metadata`, `version`), over `run(signature, inputs) -> outputs`: the same REST contract,
request parsing and defaults, whatever engine computes the answer. Pass it to
`create_app(..., versions={1: servable})`.

Signature specs are read through `tf.TensorSpec` attributes only (`name`, `shape.rank`,
`shape.as_list()`, `dtype`), so this module does not import TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from common.serving.protocol import RequestParser, Specs, option_defaults


class EngineServable:
    """One served model version whose signatures are Python functions.

    Args:
        specs: signature name -> input name -> `tf.TensorSpec`, as a SavedModel's
            `structured_input_signature[1]` (scalar inputs are per-request options).
        outputs: signature name -> output name -> `(tf.DType, rank)`, for the metadata; every
            output has a leading batch dimension, so concurrent requests may be merged.
        run: `run(signature, inputs)` -> outputs as arrays with a leading batch dimension;
            bad input raises `common.serving.json_codec.RequestError`.
        input_defaults: values for the scalar inputs a request leaves out.
        version: the version number it is served as.
        max_instances: the most instances one request may hold (`RequestParser`).
    """

    def __init__(self, specs: Specs, outputs: Mapping[str, Mapping[str, tuple[Any, int]]],
                 run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
                 input_defaults: Mapping[str, Any] | None = None, version: int = 1,
                 max_instances: int | None = None):
        self.version = int(version)
        self.specs = specs
        self.defaults = option_defaults(specs, dict(input_defaults or {}))
        self.parser = RequestParser(specs, self.defaults, max_instances=max_instances)
        self.mergeable = {name: True for name in specs}
        self.signature_defs = _signature_defs(specs, outputs)
        self._run = run

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Call a signature (in a worker thread); bad input raises `RequestError`."""
        return self._run(signature, inputs)

    def status(self) -> dict:
        """This version's entry of TensorFlow Serving's `model_version_status` list."""
        ok = {"error_code": "OK", "error_message": ""}
        return {"version": str(self.version), "state": "AVAILABLE", "status": ok}

    def metadata(self, model_name: str) -> dict:
        return {
            "model_spec": {"name": model_name, "signature_name": "",
                           "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": self.signature_defs}},
        }


def _tensor_info(name: str, dtype: Any, dims: list[int | None]) -> dict:
    """A `TensorInfo` as TensorFlow Serving's metadata writes it (proto JSON)."""
    shape = {"dim": [{"size": str(-1 if d is None else d)} for d in dims]} if dims else {}
    return {"name": name, "dtype": f"DT_{dtype.name.upper()}", "tensor_shape": shape}


def _signature_defs(specs: Specs, outputs: Mapping[str, Mapping[str, tuple[Any, int]]]) -> dict:
    return {
        signature: {
            "inputs": {name: _tensor_info(f"{signature}_{name}:0", spec.dtype,
                                          spec.shape.as_list())
                       for name, spec in sorted(inputs.items())},
            "outputs": {name: _tensor_info(f"{signature}/{name}:0", dtype, [None] * rank)
                        for name, (dtype, rank) in sorted(outputs[signature].items())},
            "method_name": "tensorflow/serving/predict",
        }
        for signature, inputs in sorted(specs.items())
    }
