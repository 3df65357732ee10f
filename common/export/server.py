"""An HTTP server for a SavedModel that speaks TensorFlow Serving's REST API.

Clients written for TensorFlow Serving work unchanged
(https://www.tensorflow.org/tfx/serving/api_rest):

    GET  /v1/models/NAME[/versions/N]            -> {"model_version_status": [...]}
    GET  /v1/models/NAME[/versions/N]/metadata   -> {"model_spec": ..., "metadata": ...}
    POST /v1/models/NAME[/versions/N]:predict    {"instances": [...]} -> {"predictions": [...]}
                                                 {"inputs": ...}      -> {"outputs": ...}

The path served is an export directory (version 1) or, as TensorFlow Serving's
`--model_base_path`, a directory of versions `BASE/1/`, `BASE/2/`, ...
(`common.export.savedmodel.model_versions`): every version is loaded, a request without
`/versions/N` goes to the highest, and the status answer lists them all.

Requests may name a `signature_name` (default `serving_default`). Binary strings travel as
`{"b64": "..."}`; string outputs are UTF-8 text, or `{"b64"}` when the output's name ends in
`_bytes` or the bytes are not valid UTF-8 (`common.export.json_codec` does these conversions). Scalar inputs of a signature (say `beam_size`) are
per-request options: give them in `inputs`, or in every instance object with one value, or let
them take the server's defaults (`input_defaults`, or the SavedModel's
`assets.extra/serving_input_defaults.json`). Concurrent requests are merged into one model call
by `common.export.batching.Batcher`. Every bad request gets a 4xx `{"error": "..."}`; images
whose header declares more than `max_image_pixels` pixels are refused before decoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from common.config import load_json
from common.errors import UserError
from common.export.batching import Batcher
from common.export.json_codec import RequestError, json_to_array, outputs_to_json
from common.export.json_codec import array_to_json as array_to_json  # re-exported
from common.export.savedmodel import model_versions

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
DEFAULTS_FILE = os.path.join("assets.extra", "serving_input_defaults.json")
TOP_LEVEL_KEYS = ("signature_name", "instances", "inputs")
DECODED_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")  # what tf.io.decode_image reads
IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8", b"GIF8", b"BM", b"RIFF")  # their first bytes


class ServedModel:
    """A loaded SavedModel: its signatures, their inputs, and request parsing.

    Args:
        saved_model_dir: the SavedModel directory.
        input_defaults: values for scalar (per-request) signature inputs that a request leaves
            out; by default read from `assets.extra/serving_input_defaults.json` if present.
        max_image_pixels: the most pixels an image input's header may declare.
        screen_images: the binary inputs are images: read each header with Pillow
            (`common.images.prepare_for_graph`), refuse what is not an image with its reason,
            and re-encode as PNG what the graph's `tf.io.decode_image` does not decode
            faithfully (TIFF, CMYK JPEG).
        version: the version number it is served as.
    """

    def __init__(
        self,
        saved_model_dir: str | os.PathLike,
        input_defaults: Mapping[str, Any] | None = None,
        max_image_pixels: int = 25_000_000,
        screen_images: bool = False,
        version: int = 1,
    ):
        import tensorflow as tf

        self._tf = tf
        self.version = int(version)
        path = Path(saved_model_dir)
        if not (path / "saved_model.pb").is_file():
            raise UserError(f"{path}: not a SavedModel directory (no saved_model.pb)")
        self.loaded = tf.saved_model.load(str(path))
        self.signatures = dict(self.loaded.signatures)
        if not self.signatures:
            raise UserError(f"{path}: the SavedModel has no signatures to serve")
        self.signature_defs = _read_signature_defs(path)
        self.max_image_pixels = int(max_image_pixels)
        self.screen_images = bool(screen_images)
        self.specs = {
            name: fn.structured_input_signature[1] for name, fn in self.signatures.items()
        }
        if input_defaults is None and (path / DEFAULTS_FILE).is_file():
            input_defaults = load_json(path / DEFAULTS_FILE)
        input_defaults = dict(input_defaults or {})
        options = {n for s in self.specs.values() for n, spec in s.items() if spec.shape.rank == 0}
        unknown = sorted(set(input_defaults) - options)
        if unknown:
            raise UserError(
                f"input defaults for {', '.join(map(repr, unknown))}, which no signature takes "
                f"as a single value; expected some of: {', '.join(sorted(options)) or 'none'}"
            )
        self.defaults: dict[str, dict[str, np.ndarray]] = {}
        for signature, specs in self.specs.items():
            self.defaults[signature] = {
                name: json_to_array(value, specs[name].dtype, f"default {name!r}")
                for name, value in input_defaults.items()
                if name in specs and specs[name].shape.rank == 0
            }
        self.mergeable = {
            name: all(
                spec.shape.rank is not None and spec.shape.rank >= 1
                for spec in self._tf.nest.flatten(fn.structured_outputs)
            )
            for name, fn in self.signatures.items()
        }

    def batched_names(self, signature: str) -> list[str]:
        """The inputs that carry one value per instance (rank >= 1), sorted."""
        return sorted(n for n, s in self.specs[signature].items() if s.shape.rank != 0)

    def option_names(self, signature: str) -> list[str]:
        """The scalar inputs: one value per request."""
        return sorted(n for n, s in self.specs[signature].items() if s.shape.rank == 0)

    def parse(self, body: Any) -> tuple[str, str, dict[str, np.ndarray], int]:
        """A predict request body -> (signature, "row" | "columnar", inputs, instances)."""
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
        if signature not in self.signatures:
            raise RequestError(
                f"Serving signature name: {signature!r} not found; "
                f"choose one of: {', '.join(sorted(self.signatures))}"
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
                    self._check_images(array, f"{where}, input {name!r}")
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
                self._check_images(array, f"'inputs', input {name!r}")
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

    def _check_images(self, array: np.ndarray, where: str) -> None:
        if array.dtype != object:
            return
        flat = array.reshape(-1)  # a view: re-encoded images are written back into `array`
        for i, value in enumerate(flat):
            _check_image_size(value, self.max_image_pixels, where)
            if self.screen_images and isinstance(value, bytes):
                from common.images import prepare_for_graph

                try:
                    flat[i] = prepare_for_graph(value, where, self.max_image_pixels)
                except UserError as exc:
                    raise RequestError(str(exc)) from None

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Call a signature (in a worker thread); bad input raises `RequestError`."""
        tf = self._tf
        specs = self.specs[signature]
        tensors = {n: tf.constant(a, dtype=specs[n].dtype) for n, a in inputs.items()}
        try:
            outputs = self.signatures[signature](**tensors)
        except (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError) as exc:
            raise RequestError(_tf_reason(exc.message)) from None
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


def _tf_reason(message: str) -> str:
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


def _check_image_size(data: Any, max_pixels: int, where: str) -> None:
    """Refuse bytes whose image header declares more than `max_pixels` pixels (no decoding)."""
    import io
    import warnings

    from PIL import Image

    if not isinstance(data, bytes) or not data.startswith(IMAGE_MAGIC):
        return  # text, or a format tf.io.decode_image does not read either
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=DECODED_FORMATS) as image:
                width, height = image.size
    except Image.DecompressionBombError as exc:  # Pillow's own, larger limit fired
        raise RequestError(f"{where}: {exc} (the limit here is {max_pixels})") from None
    except Exception:  # not an image Pillow knows: TensorFlow decides
        return
    if width * height > max_pixels:
        raise RequestError(
            f"{where}: the image header declares {width}x{height} = {width * height} pixels; "
            f"the limit is {max_pixels}"
        )


def _check_names(values: dict, specs: dict, where: str) -> None:
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


# ---------------------------------------------------------------------------------------------
# The aiohttp application.

MODEL = web.AppKey("model", ServedModel)  # the highest version: what NAME alone serves
VERSIONS = web.AppKey("versions", dict)  # version number -> ServedModel
BATCHER = web.AppKey("batcher", Batcher)
NAME = web.AppKey("model_name", str)
MAX_BODY = web.AppKey("max_body_bytes", int)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _json_errors(request: web.Request, handler):
    """Every failure becomes a JSON `{"error": ...}` with a fitting status; never a traceback."""
    try:
        return await handler(request)
    except RequestError as exc:
        return _error(exc.status, str(exc))
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[MAX_BODY]
        return _error(413, f"request body is larger than the limit of {limit} bytes")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, f"{exc.reason}: {request.method} {request.path}")
    except Exception:
        log.exception("error while serving %s %s", request.method, request.path)
        return _error(500, "internal server error")


def _servable(request: web.Request) -> ServedModel:
    name, version = request.match_info["name"], request.match_info.get("version")
    versions = request.app[VERSIONS]
    number = int(version) if version is not None and re.fullmatch(r"[0-9]+", version) else -1
    if name != request.app[NAME] or (version is not None and number not in versions):
        spec = f"Latest({name})" if version is None else f"Specific({name}, {version})"
        raise RequestError(f"Servable not found for request: {spec}", status=404)
    return request.app[MODEL] if version is None else versions[number]


async def _status(request: web.Request) -> web.Response:
    model = _servable(request)
    if "version" in request.match_info:
        served = [model]
    else:  # every loaded version, the one served first
        served = sorted(request.app[VERSIONS].values(), key=lambda m: -m.version)
    return web.json_response({"model_version_status": [m.status() for m in served]})


async def _metadata(request: web.Request) -> web.Response:
    return web.json_response(_servable(request).metadata(request.app[NAME]))


async def _predict(request: web.Request) -> web.Response:
    model = _servable(request)
    raw = await request.read()  # raises HTTPRequestEntityTooLarge past client_max_size
    if not raw:
        raise RequestError("JSON Parse error: The document is empty")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RequestError(f"JSON Parse error: {' '.join(str(exc).split())[:200]}") from None
    signature, layout, inputs, size = model.parse(body)
    batched = frozenset(model.batched_names(signature))
    key = None
    if size > 0 and model.mergeable[signature]:
        options = tuple((n, repr(inputs[n].tolist())) for n in model.option_names(signature))
        shapes = tuple((n, inputs[n].shape[1:]) for n in sorted(batched))
        key = (model.version, signature, options, shapes)
    outputs = await request.app[BATCHER].submit(
        inputs, size=size, key=key, context=(model.version, signature), batched=batched
    )
    return web.json_response(outputs_to_json(outputs, layout), dumps=json.dumps)


def create_app(
    saved_model_dir: str | os.PathLike,
    model_name: str,
    max_body_bytes: int = 16 * 1024 * 1024,
    max_batch_size: int = 32,
    batch_timeout_ms: float = 5.0,
    max_image_pixels: int = 25_000_000,
    input_defaults: Mapping[str, Any] | None = None,
    screen_images: bool = False,
) -> web.Application:
    """The aiohttp application serving `saved_model_dir` as `model_name` (loads it now).

    Args:
        saved_model_dir: a SavedModel directory (its signatures take batches, e.g. `(B,)`
            `tf.string`), or a model base path of versions `1/`, `2/`, ... (all loaded; the
            highest answers requests without `/versions/N`).
        model_name: the NAME in `/v1/models/NAME`.
        max_body_bytes: larger request bodies get 413.
        max_batch_size: the most instances merged into one signature call.
        batch_timeout_ms: how long a request waits for others to share its call.
        max_image_pixels: binary inputs whose image header declares more pixels get 400.
        input_defaults: values for scalar inputs (e.g. `{"beam_size": 3}`) a request omits.
        screen_images: binary inputs are images: refuse non-images from their header and
            re-encode what the graph cannot decode faithfully (see `ServedModel`).

    Returns:
        A `web.Application`; `app[BATCHER].stats` counts requests and model calls.
    """
    if not model_name or "/" in model_name or ":" in model_name:
        raise UserError(f"model name must be non-empty without '/' or ':', got {model_name!r}")
    if max_body_bytes < 1:
        raise UserError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    versions = {
        number: ServedModel(path, input_defaults, max_image_pixels, screen_images, number)
        for number, path in model_versions(saved_model_dir).items()
    }

    def run(context: tuple[int, str], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        version, signature = context
        return versions[version].run(signature, inputs)

    batcher = Batcher(run, max_batch_size=max_batch_size, batch_timeout_ms=batch_timeout_ms)
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_json_errors])
    app[MODEL], app[VERSIONS] = versions[max(versions)], versions
    app[BATCHER], app[NAME] = batcher, model_name
    app[MAX_BODY] = max_body_bytes
    base = "/v1/models/{name:[^/:]+}"
    version = "/versions/{version:[^/:]+}"
    for prefix in (base, base + version):
        app.router.add_get(prefix, _status)
        app.router.add_get(prefix + "/metadata", _metadata)
        app.router.add_post(prefix + ":predict", _predict)

    async def start(app: web.Application) -> None:
        batcher.start()

    async def stop(app: web.Application) -> None:
        await batcher.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


def serve(
    saved_model_dir: str | os.PathLike,
    model_name: str,
    host: str = "127.0.0.1",
    port: int = 8501,
    max_body_bytes: int = 16 * 1024 * 1024,
    max_batch_size: int = 32,
    batch_timeout_ms: float = 5.0,
    max_image_pixels: int = 25_000_000,
    input_defaults: Mapping[str, Any] | None = None,
    screen_images: bool = False,
) -> None:
    """Serve `saved_model_dir` on `host:port` until interrupted (arguments as `create_app`).

    It binds to 127.0.0.1 unless told otherwise: put a proxy with authentication in front of
    it before exposing it.

    Example:
    >>> serve("runs/captioner/export", "captioner")  # doctest: +SKIP
    """
    app = create_app(
        saved_model_dir, model_name, max_body_bytes=max_body_bytes,
        max_batch_size=max_batch_size, batch_timeout_ms=batch_timeout_ms,
        max_image_pixels=max_image_pixels, input_defaults=input_defaults,
        screen_images=screen_images,
    )
    url = f"http://{host}:{port}/v1/models/{model_name}"
    numbers = sorted(app[VERSIONS])
    shown = (f" (version {numbers[0]})" if len(numbers) == 1 else
             f" (versions {', '.join(map(str, numbers))}; {numbers[-1]} by default)")
    web.run_app(app, host=host, port=port,
                print=lambda _: print(f"Serving {url}{shown}", flush=True))


@contextlib.contextmanager
def serve_in_background(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0
) -> Iterator[str]:
    """Run `app` in a thread (port 0: a free one); yields the base URL; stops it on exit.

    Example:
    >>> with serve_in_background(create_app(path, "m")) as url:  # doctest: +SKIP
    ...     urllib.request.urlopen(f"{url}/v1/models/m")
    """
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, host, port).start())
        except BaseException as exc:  # reported to the caller below
            failure.append(exc)
            started.set()
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="serve-in-background", daemon=True)
    thread.start()
    if not started.wait(timeout) or failure:
        raise RuntimeError(f"the server did not start: {failure[0] if failure else 'timeout'}")
    bound_host, bound_port = runner.addresses[0][:2]
    try:
        yield f"http://{bound_host}:{bound_port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        loop.close()
