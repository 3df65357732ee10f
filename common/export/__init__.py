"""Serving exported SavedModels: a TensorFlow-Serving-compatible REST server and its batcher.

`create_app` / `serve` load a SavedModel and answer `GET /v1/models/NAME[/metadata]` and
`POST /v1/models/NAME:predict` as TensorFlow Serving does. Importing this package does not
import TensorFlow or aiohttp; the names load on first use.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "Batcher": "common.export.batching",
    "BatchStats": "common.export.batching",
    "RequestError": "common.export.json_codec",
    "ServedModel": "common.export.server",
    "array_to_json": "common.export.json_codec",
    "create_app": "common.export.server",
    "json_to_array": "common.export.json_codec",
    "serve": "common.export.server",
    "serve_in_background": "common.export.server",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
