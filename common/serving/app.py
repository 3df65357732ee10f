"""An HTTP server for SavedModels that speaks TensorFlow Serving's REST API.

Clients written for TensorFlow Serving work unchanged
(https://www.tensorflow.org/tfx/serving/api_rest):

    GET  /v1/models/NAME[/versions/N]            -> {"model_version_status": [...]}
    GET  /v1/models/NAME[/versions/N]/metadata   -> {"model_spec": ..., "metadata": ...}
    POST /v1/models/NAME[/versions/N]:predict    {"instances": [...]} -> {"predictions": [...]}
                                                 {"inputs": ...}      -> {"outputs": ...}

The path served is an export directory (version 1) or, as TensorFlow Serving's
`--model_base_path`, a directory of versions `BASE/1/`, `BASE/2/`, ...
(`common.export.savedmodel.model_versions`): every version is loaded
(`common.serving.servable.ServedModel`), a request without `/versions/N` goes to the highest,
and the status answer lists them all.

Requests are parsed by `common.serving.protocol` (`signature_name`, row or columnar format,
per-request scalar options and their defaults), binary inputs screened by
`common.serving.images`, values converted by `common.serving.json_codec` (`{"b64": ...}` for
binary strings both ways). Concurrent requests are merged into one model call by
`common.serving.batching.Batcher`. Every bad request gets a 4xx `{"error": "..."}`, never a
traceback.
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
from typing import Any

import numpy as np
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from common.errors import UserError
from common.export.savedmodel import model_versions
from common.serving.batching import Batcher
from common.serving.json_codec import RequestError, outputs_to_json
from common.serving.protocol import parse_body
from common.serving.servable import ServedModel, set_tensorflow_threads

log = logging.getLogger(__name__)

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


async def _read_body(request: web.Request) -> bytes:
    """The request's body, decompressed as its Content-Encoding says; one that does not
    decompress (a corrupt gzip or deflate stream) is a 400, past `client_max_size` a 413."""
    try:
        return await request.read()  # raises HTTPRequestEntityTooLarge past client_max_size
    except (RequestPayloadError, HttpProcessingError) as exc:
        reason = " ".join(str(getattr(exc, "message", None) or exc).split())  # one line
        raise RequestError(f"request body could not be decoded: {reason}") from None


async def _predict(request: web.Request) -> web.Response:
    model = _servable(request)
    raw = await _read_body(request)
    parser = model.parser
    # Parsing (and screening images) and writing the answer take CPU time in proportion to
    # the request: off the event loop, so that other requests are answered meanwhile.
    signature, layout, inputs, size = await asyncio.to_thread(
        lambda: parser.parse(parse_body(raw)))
    batched = frozenset(parser.batched_names(signature))
    key = None
    if size > 0 and model.mergeable[signature]:
        options = tuple((n, repr(inputs[n].tolist())) for n in parser.option_names(signature))
        shapes = tuple((n, inputs[n].shape[1:]) for n in sorted(batched))
        key = (model.version, signature, options, shapes)
    try:
        outputs = await request.app[BATCHER].submit(
            inputs, size=size, key=key, context=(model.version, signature), batched=batched
        )
    except RequestError as exc:  # from the graph (an empty sentence, a truncated PNG)
        culprit = None
        if size > 1:  # which instance: the graph's message does not say
            culprit = await asyncio.to_thread(
                _first_failing, model, signature, inputs, batched, 0, size)
        if culprit is None:
            raise
        where = (f"instance {culprit} of 'instances'" if layout == "row"
                 else f"row {culprit} of 'inputs'")
        raise RequestError(f"{where}: {exc}") from None
    text = await asyncio.to_thread(lambda: json.dumps(outputs_to_json(outputs, layout)))
    return web.json_response(text=text)


def _first_failing(model: ServedModel, signature: str, inputs: dict[str, np.ndarray],
                   batched: frozenset, start: int, stop: int) -> int | None:
    """The first instance of `start:stop` whose own call raises `RequestError`, found by
    halving (the calls hold about twice `stop - start` instances in all); None when it cannot
    be told: no half fails alone, or no instance passes (an option every instance shares,
    several bad ones), where the graph's message stands for the request as a whole."""
    def fails(a: int, b: int) -> bool:
        part = {n: (v[a:b] if n in batched else v) for n, v in inputs.items()}
        try:
            model.run(signature, part)
        except RequestError:
            return True
        return False

    first, last, passed = start, stop, False
    while last - first > 1:
        middle = (first + last) // 2
        if fails(first, middle):
            last = middle
        elif fails(middle, last):
            first, passed = middle, True
        else:
            return None  # each half alone passes
    if not passed and fails(first + 1, stop):
        return None
    return first


def create_app(
    saved_model_dir: str | os.PathLike,
    model_name: str,
    max_body_bytes: int = 16 * 1024 * 1024,
    max_batch_size: int = 32,
    batch_timeout_ms: float = 5.0,
    max_image_pixels: int = 25_000_000,
    input_defaults: Mapping[str, Any] | None = None,
    screen_images: bool = False,
    max_request_instances: int = 1024,
    versions: Mapping[int, Any] | None = None,
) -> web.Application:
    """The aiohttp application serving `saved_model_dir` as `model_name` (loads it now).

    Args:
        saved_model_dir: a SavedModel directory (its signatures take batches, e.g. `(B,)`
            `tf.string`), or a model base path of versions `1/`, `2/`, ... (all loaded; the
            highest answers requests without `/versions/N`).
        model_name: the NAME in `/v1/models/NAME`.
        max_body_bytes: larger request bodies get 413.
        max_batch_size: the most instances merged into one signature call.
        max_request_instances: the most instances one request may hold; more is a 413. A
            request runs in one call however large, so this bounds what one request costs.
        batch_timeout_ms: how long a request waits for others to share its call.
        max_image_pixels: binary inputs whose image header declares more pixels get 400.
        input_defaults: values for scalar inputs (e.g. `{"beam_size": 3}`) a request omits.
        screen_images: binary inputs are images: refuse non-images from their header and
            re-encode what the graph cannot decode faithfully (see `ServedModel`).
        versions: the versions already loaded, by number, each with `ServedModel`'s
            interface (a CTranslate2 export's `common.serving.engine_servable.EngineServable`);
            then `saved_model_dir` is not read and the loading options do not apply.

    Returns:
        A `web.Application`; `app[BATCHER].stats` counts requests and model calls.
    """
    if not model_name or "/" in model_name or ":" in model_name:
        raise UserError(f"model name must be non-empty without '/' or ':', got {model_name!r}")
    if max_body_bytes < 1:
        raise UserError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    if max_request_instances < 1:
        raise UserError(f"max_request_instances must be >= 1, got {max_request_instances}")
    versions = dict(versions) if versions else {
        number: ServedModel(path, input_defaults, max_image_pixels, screen_images, number,
                            max_instances=max_request_instances)
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
    intra_threads: int = 0,
    inter_threads: int = 0,
    **options: Any,
) -> None:
    """Serve `saved_model_dir` on `host:port` until interrupted.

    It binds to 127.0.0.1 unless told otherwise: put a proxy with authentication in front of
    it before exposing it. `options` are those of `create_app` (`max_body_bytes`,
    `max_batch_size`, `batch_timeout_ms`, `max_image_pixels`, `input_defaults`,
    `screen_images`, `versions`), with its defaults.

    `intra_threads` and `inter_threads` size TensorFlow's thread pools for the SavedModels
    loaded here (`set_tensorflow_threads`; 0: TensorFlow's default); versions already loaded
    (`versions`: an engine's) were given their threads when they were made.

    Example:
    >>> serve("runs/captioner/export", "captioner")  # doctest: +SKIP
    """
    check_address(host, port)  # before the model loads: a bad address is one line at once
    if not options.get("versions"):
        set_tensorflow_threads(intra_threads, inter_threads)
    app = create_app(saved_model_dir, model_name, **options)
    url = f"http://{host}:{port}/v1/models/{model_name}"
    numbers = sorted(app[VERSIONS])
    shown = (f" (version {numbers[0]})" if len(numbers) == 1 else
             f" (versions {', '.join(map(str, numbers))}; {numbers[-1]} by default)")
    try:
        web.run_app(app, host=host, port=port,
                    print=lambda _: print(f"Serving {url}{shown}", flush=True))
    except OSError as exc:  # the address was taken since check_address
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def check_address(host: str, port: int) -> None:
    """Refuses, in one line, an address the server cannot listen on: a host that does not
    resolve, a port out of range, in use or not allowed (binds a socket and closes it)."""
    import socket

    if not 0 <= port <= 65535:
        raise UserError(f"port {port}: expected 0 to 65535")
    try:  # "" is every interface, as aiohttp reads it
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError) as exc:
        raise UserError(f"cannot listen on {host}:{port}: {host!r} does not resolve "
                        f"({getattr(exc, 'strerror', None) or exc})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


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
