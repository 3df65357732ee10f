"""One loaded SavedModel version: its signatures, request parser, calls, status and metadata.

`ServedModel(path, ...)` loads the SavedModel with TensorFlow, reads the defaults of its scalar
inputs (`assets.extra/serving_input_defaults.json` unless given), and offers what the HTTP app
(`common.serving.app`) needs: `parser` (`common.serving.protocol.RequestParser`, with the
image screening of `common.serving.images`), `run` (a signature call; an op error becomes a
`RequestError`), `mergeable` (which signatures' outputs can be split per instance), and the
`status` / `metadata` answers of TensorFlow Serving's REST API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from common.config import load_json
from common.errors import UserError
from common.export import savedmodel
from common.export.savedmodel import DEFAULTS_FILE, EXTRA_DIR
from common.serving.images import ImageScreen
from common.serving.json_codec import RequestError
from common.serving.protocol import RequestParser, option_defaults, tf_error_message


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
        return {"version": str(self.version), "state": "AVAILABLE", "status": ok}

    def metadata(self, model_name: str) -> dict:
        return {
            "model_spec": {"name": model_name, "signature_name": "",
                           "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": self.signature_defs}},
        }


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
