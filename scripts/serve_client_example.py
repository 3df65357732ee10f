"""A small client for the model server; it works the same against TensorFlow Serving.

Standard library only. It reads the model's metadata to learn the input name, then posts the
images (as `{"b64": ...}`) or sentences to `/v1/models/NAME:predict` and prints the answer.

    python scripts/serve_client_example.py --model captioner assets/samples/*.png
    python scripts/serve_client_example.py --model translator --text "I am cold." --text "Hi."
    python scripts/serve_client_example.py --model translator --text "Hi." \
        --signature translate_with_options --option beam_size=5 --option n_best=3

Options (`--option NAME=VALUE`, a JSON value) are scalar inputs of the signature; with them the
request uses the columnar `{"inputs": {...}}` format, which TensorFlow Serving also accepts.
The exports' `serving_default` takes the images or sentences alone; their options (beam_size,
max_length, n_best, no_repeat_ngram) are inputs of `caption_with_options` /
`translate_with_options`.

Exit status: 0 with the answer on stdout; 2 when the command line is refused before anything is
sent (a file that cannot be read, a malformed --url); 1 when the server cannot be reached or
answers an error (one line naming the URL).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from common.cli import EXIT_FAILURE, HelpFormatter, Parser, run_cli
from common.errors import UserError

PROG = "serve_client_example.py"
MAX_ERROR_CHARS = 300  # of a server's error text (a proxy's HTML page, say) in the one line


def call(url: str, body: dict | None = None, timeout: float = 60.0) -> Any:
    """GET (no body) or POST JSON; returns the parsed answer, raises RuntimeError naming `url`
    when the server cannot be reached, answers an error or answers something not JSON."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        with error:
            try:
                text = error.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = ""
        try:
            text = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            pass
        raise RuntimeError(f"{url}: HTTP {error.code}: {_one_line(text or error.reason)}"
                           ) from None
    except urllib.error.URLError as error:
        raise RuntimeError(f"{url}: cannot reach the server: {error.reason}") from None
    except OSError as error:  # a timeout, a connection reset
        raise RuntimeError(f"{url}: no answer from the server: "
                           f"{_one_line(str(error)) or type(error).__name__}") from None
    except http.client.HTTPException as error:  # something that is not HTTP answered
        raise RuntimeError(f"{url}: not an HTTP answer ({type(error).__name__}: "
                           f"{_one_line(str(error))})") from None
    try:
        return json.loads(raw)
    except ValueError as error:  # an HTML page, a truncated body, bytes that are not UTF-8
        raise RuntimeError(f"{url}: the answer is not JSON ({_one_line(str(error))}): "
                           f"{_one_line(raw.decode('utf-8', 'replace'))!r}") from None


def _one_line(text: Any) -> str:
    """`text` on one line, at most `MAX_ERROR_CHARS` long."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


def batch_input_name(metadata: dict, signature: str, url: str = "the metadata") -> str:
    """The signature's one input with a batch dimension (rank >= 1); `url` names where the
    metadata came from in errors."""
    try:
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        if signature not in signatures:
            raise RuntimeError(f"{url}: no signature {signature!r}; the model has: "
                               f"{', '.join(signatures)}")
        inputs = signatures[signature]["inputs"]
        batched = [n for n, info in inputs.items() if info.get("tensor_shape", {}).get("dim")]
    except (KeyError, TypeError, AttributeError):
        raise RuntimeError(f"{url}: not a model's metadata as TensorFlow Serving writes it "
                           "(metadata.signature_def.signature_def.NAME.inputs)") from None
    if len(batched) != 1:
        raise RuntimeError(f"{url}: expected one batched input of {signature!r}, found: "
                           f"{', '.join(batched) or 'none'}")
    return batched[0]


def build_request(values: list, input_name: str, signature: str, options: dict) -> dict:
    body: dict[str, Any] = {"signature_name": signature}
    if options:
        body["inputs"] = {input_name: values, **options}
    else:
        body["instances"] = values
    return body


def parse_option(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def check_url(url: str) -> str:
    """`url` without a final slash, else a one-line `UserError`: an http(s) URL of a host."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or too large
    except ValueError as error:
        raise UserError(f"--url {url}: not a URL ({error}); expected http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--url {url}: expected an http:// or https:// URL of the server, such "
                        "as http://127.0.0.1:8501")
    if parts.query or parts.fragment:
        raise UserError(f"--url {url}: expected the server's address alone (no ?query or "
                        "#fragment)")
    return url.rstrip("/")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("images", nargs="*", type=Path, help="image files to send")
    p.add_argument("--text", action="append",
                   help="a sentence to send (repeat for several)")
    p.add_argument("--url", default="http://127.0.0.1:8501", help="the server")
    p.add_argument("--model", required=True, help="the model name in /v1/models/NAME")
    p.add_argument("--signature", default="serving_default", help="the signature to call")
    p.add_argument("--option", action="append", type=parse_option,
                   metavar="NAME=VALUE",
                   help="a scalar input, e.g. beam_size=5 (repeat for several)")
    p.set_defaults(_run=run, _uses_tensorflow=False, _runs_on_jax=True)  # standard library only
    return p


def run(args: argparse.Namespace) -> int:
    args.text, args.option = args.text or [], args.option or []
    if bool(args.images) == bool(args.text):
        raise UserError("give image files or --text sentences (one kind)")
    if not args.model:
        raise UserError("--model: expected the model's name, got an empty one")
    names = [name for name, _ in args.option]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UserError(f"--option {repeated[0]} is given more than once")
    base = f"{check_url(args.url)}/v1/models/{urllib.parse.quote(args.model, safe='/')}"
    try:
        values: list[Any] = [
            {"b64": base64.b64encode(path.read_bytes()).decode("ascii")} for path in args.images
        ] or list(args.text)
    except OSError as error:  # a file named on the command line: bad input
        raise UserError(f"{error.filename}: {error.strerror}") from None
    try:
        options = dict(args.option)
        name = ""
        if options:
            name = batch_input_name(call(base + "/metadata"), args.signature, base + "/metadata")
        answer = call(base + ":predict", build_request(values, name, args.signature, options))
    except RuntimeError as error:  # the server's side: unreachable, or answered an error
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(answer, indent=2, ensure_ascii=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and sends the request; returns the exit status (module docstring)."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
