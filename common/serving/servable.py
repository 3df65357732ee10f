"""One loaded SavedModel version: its signatures, request parser, calls, status and metadata.

`ServedModel(path, ...)` loads the SavedModel with TensorFlow, reads the defaults of its scalar
inputs (`assets.extra/serving_input_defaults.json` unless given), and offers what the HTTP app
(`common.serving.app`) needs: `parser` (`common.serving.protocol.RequestParser`, with the
image screening of `common.serving.images`), `run` (a signature call; an op error becomes a
`RequestError`), `mergeable` (which signatures' outputs can be split per instance), and the
`status` / `metadata` answers of TensorFlow Serving's REST API.

A version is AVAILABLE once loaded and warmed up: the requests of its
`assets.extra/tf_serving_warmup_requests` (`common.export.warmup`, written by `export`) are
replayed first, as TensorFlow Serving replays them, so the first client request of each
signature does not pay for instantiating and optimizing its graph.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from common.config import load_json
from common.errors import UserError
from common.export import savedmodel, warmup
from common.export.savedmodel import DEFAULTS_FILE, EXTRA_DIR
from common.export.warmup import WARMUP_FILE
from common.serving.images import ImageScreen
from common.serving.json_codec import RequestError
from common.serving.protocol import RequestParser, option_defaults, tf_error_message

log = logging.getLogger(__name__)


def set_tensorflow_threads(intra_threads: int = 0, inter_threads: int = 0) -> None:
    """Sizes TensorFlow's thread pools for this process: `intra_threads` for the threads one
    op uses (`tf.config.threading.set_intra_op_parallelism_threads`), `inter_threads` for the
    ops run at once (`set_inter_op_parallelism_threads`); 0 leaves TensorFlow's default (about
    one per core). TensorFlow reads them when it starts running ops, so this comes first.

    Raises:
        UserError: a negative size, or TensorFlow already running with other sizes.
    """
    import tensorflow as tf

    threading = tf.config.threading
    for option, value, setter in (
            ("--intra-threads", intra_threads, threading.set_intra_op_parallelism_threads),
            ("--inter-threads", inter_threads, threading.set_inter_op_parallelism_threads)):
        if value < 0:
            raise UserError(f"{option} {value}: expected a number of threads >= 0 (0: "
                            "TensorFlow's default)")
        if value == 0:  # left as it is (setting it would fail once TensorFlow runs)
            continue
        try:
            setter(value)
        except RuntimeError:  # "... cannot be modified after initialization"
            raise UserError(f"{option} {value}: TensorFlow is already running in this "
                            "process with other thread pools; set them before it starts"
                            ) from None


class ServedModel:
    """A loaded SavedModel: its signatures, their inputs, and request parsing.

    Args:
        saved_model_dir: the SavedModel directory.
        input_defaults: values for scalar (per-request) signature inputs that a request leaves
            out; by default read from `assets.extra/serving_input_defaults.json` if present.
        max_image_pixels: the most pixels an image input's header may declare.
        screen_images: the binary inputs are images: read each header with Pillow
            (`common.images.prepare_for_graph`), refuse what is not an image with its reason,
            and re-encode (as BMP) what the graph's `tf.io.decode_image` does not decode as
            Pillow does (TIFF, CMYK JPEG, a photo with an EXIF turn, turned upright).
        version: the version number it is served as.
        max_instances: the most instances one request may hold (`RequestParser`).

    Raises:
        UserError: not a SavedModel, no signatures, or a warm-up request that is not one of
            its signatures' or that fails (TensorFlow Serving does not load such a model
            either).
    """

    def __init__(
        self,
        saved_model_dir: str | os.PathLike,
        input_defaults: Mapping[str, Any] | None = None,
        max_image_pixels: int = 25_000_000,
        screen_images: bool = False,
        version: int = 1,
        max_instances: int | None = None,
    ):
        import tensorflow as tf

        self._tf = tf
        self.version = int(version)
        self.state = "LOADING"  # AVAILABLE once loaded and warmed up (`status`)
        path = Path(saved_model_dir)
        if not (path / "saved_model.pb").is_file():
            raise UserError(f"{path}: not a SavedModel directory (no saved_model.pb)")
        self.loaded = savedmodel.load(path)
        self.signatures = dict(self.loaded.signatures)
        if not self.signatures:
            raise UserError(f"{path}: the SavedModel has no signatures to serve")
        self.signature_defs = _read_signature_defs(path)
        self.specs = {
            name: fn.structured_input_signature[1] for name, fn in self.signatures.items()
        }
        defaults_file = path / EXTRA_DIR / DEFAULTS_FILE
        if input_defaults is None and defaults_file.is_file():
            input_defaults = load_json(defaults_file)
        self.defaults = option_defaults(self.specs, dict(input_defaults or {}))
        self.parser = RequestParser(
            self.specs, self.defaults, ImageScreen(max_image_pixels, screen_images),
            max_instances=max_instances,
        )
        self.mergeable = {
            name: all(
                spec.shape.rank is not None and spec.shape.rank >= 1
                for spec in tf.nest.flatten(fn.structured_outputs)
            )
            for name, fn in self.signatures.items()
        }
        self.warmup_requests, self.warmup_seconds = self._warm_up(path / EXTRA_DIR / WARMUP_FILE)
        self.state = "AVAILABLE"

    def _warm_up(self, path: Path) -> tuple[int, float]:
        """Replays the warm-up file's requests (none: no file); `(requests, seconds)`."""
        if not path.is_file():
            return 0, 0.0
        start = time.perf_counter()
        requests = warmup.read(path)
        for index, request in enumerate(requests):
            where = f"{path}: warm-up request {index}"
            specs = self.specs.get(request.signature)
            if specs is None:
                raise UserError(f"{where} names signature {request.signature!r}; the "
                                f"SavedModel has: {', '.join(sorted(self.specs))}")
            if set(request.inputs) != set(specs):
                raise UserError(f"{where} ({request.signature}) has inputs "
                                f"{sorted(request.inputs)}; the signature takes {sorted(specs)}")
            try:
                # As a client's request: parsed (images screened) and run, so that the first
                # one pays for nothing either path does once (Pillow's start, for instance).
                signature, _, inputs, _ = self.parser.parse(_as_body(request))
                self.run(signature, inputs)
            except (RequestError, ValueError, TypeError, self._tf.errors.OpError) as exc:
                reason = " ".join(str(exc).split())[:200]
                raise UserError(f"{where} ({request.signature}) failed: {reason}") from None
        log.info("%s: %d warm-up requests replayed in %.1f s", path.parent.parent,
                 len(requests), time.perf_counter() - start)
        return len(requests), time.perf_counter() - start

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Call a signature (in a worker thread); bad input raises `RequestError`."""
        tf = self._tf
        specs = self.specs[signature]
        tensors = {n: tf.constant(a, dtype=specs[n].dtype) for n, a in inputs.items()}
        try:
            outputs = self.signatures[signature](**tensors)
        except (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError) as exc:
            raise RequestError(tf_error_message(exc.message)) from None
        return {name: value.numpy() for name, value in outputs.items()}

    def status(self) -> dict:
        """This version's entry of TensorFlow Serving's `model_version_status` list."""
        ok = {"error_code": "OK", "error_message": ""}
        return {"version": str(self.version), "state": self.state, "status": ok}

    def metadata(self, model_name: str) -> dict:
        return {
            "model_spec": {"name": model_name, "signature_name": "",
                           "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": self.signature_defs}},
        }


def _as_body(request: warmup.WarmupRequest) -> dict:
    """A warm-up request as the columnar JSON body a client sends (bytes as base64)."""
    def value(item: Any) -> Any:
        if isinstance(item, list):
            return [value(v) for v in item]
        if isinstance(item, bytes):
            return {"b64": base64.b64encode(item).decode()}
        return item

    return {"signature_name": request.signature,
            "inputs": {name: value(np.asarray(v).tolist()) for name, v in request.inputs.items()}}


def _read_signature_defs(path: Path) -> dict:
    """The SignatureDefs as TensorFlow Serving's metadata API writes them (proto JSON)."""
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((path / "saved_model.pb").read_bytes())
    defs = proto.meta_graphs[0].signature_def if proto.meta_graphs else {}
    return {
        name: json_format.MessageToDict(d, preserving_proto_field_name=True)
        for name, d in sorted(defs.items())
        if not name.startswith("__")
    }
