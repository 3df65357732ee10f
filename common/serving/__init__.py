"""Serving exported SavedModels over TensorFlow Serving's REST API.

- `app`: the aiohttp application and its handlers, `create_app`, `serve`, `serve_in_background`.
- `servable`: `ServedModel`, one loaded SavedModel version (signatures, calls, metadata).
- `protocol`: the predict request format (row / columnar, options, defaults) and its errors.
- `images`: the screening of image bytes before the model sees them (header pixel limits).
- `batching`: `Batcher`, which merges concurrent requests into one model call.
- `json_codec`: JSON values <-> NumPy arrays, `RequestError`.

Importing this package does not import TensorFlow or aiohttp; the names below load on first
use.
"""

from __future__ import annotations

from common.lazy import lazy_getattr

_LAZY = {
    "Batcher": "common.serving.batching",
    "BatchStats": "common.serving.batching",
    "RequestError": "common.serving.json_codec",
    "RequestParser": "common.serving.protocol",
    "ServedModel": "common.serving.servable",
    "array_to_json": "common.serving.json_codec",
    "create_app": "common.serving.app",
    "json_to_array": "common.serving.json_codec",
    "serve": "common.serving.app",
    "serve_in_background": "common.serving.app",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
