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
max_length, n_best) are inputs of `caption_with_options` / `translate_with_options`.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def call(url: str, body: dict | None = None, timeout: float = 60.0) -> Any:
    """GET (no body) or POST JSON; returns the parsed answer, raises RuntimeError on an error."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            text = error.read().decode("utf-8", "replace")
        try:
            text = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            pass
        raise RuntimeError(f"HTTP {error.code}: {text}") from None
    except urllib.error.URLError as error:
        raise RuntimeError(f"cannot reach {url}: {error.reason}") from None


def batch_input_name(metadata: dict, signature: str) -> str:
    """The signature's one input with a batch dimension (rank >= 1)."""
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    if signature not in signatures:
        raise RuntimeError(f"no signature {signature!r}; the model has: {', '.join(signatures)}")
    inputs = signatures[signature]["inputs"]
    batched = [n for n, info in inputs.items() if info.get("tensor_shape", {}).get("dim")]
    if len(batched) != 1:
        raise RuntimeError(f"expected one batched input, found: {', '.join(batched) or 'none'}")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="*", type=Path, help="image files to send")
    parser.add_argument("--text", action="append", default=[], help="a sentence to send")
    parser.add_argument("--url", default="http://127.0.0.1:8501", help="the server")
    parser.add_argument("--model", required=True, help="the model name in /v1/models/NAME")
    parser.add_argument("--signature", default="serving_default")
    parser.add_argument("--option", action="append", default=[], type=parse_option,
                        metavar="NAME=VALUE", help="a scalar input, e.g. beam_size=5")
    args = parser.parse_args(argv)
    if bool(args.images) == bool(args.text):
        parser.error("give image files or --text sentences (one kind)")
    base = f"{args.url.rstrip('/')}/v1/models/{args.model}"
    try:
        values: list[Any] = [
            {"b64": base64.b64encode(path.read_bytes()).decode("ascii")} for path in args.images
        ] or list(args.text)
    except OSError as error:  # a file named on the command line: bad input
        print(f"error: {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        options = dict(args.option)
        name = batch_input_name(call(base + "/metadata"), args.signature) if options else ""
        answer = call(base + ":predict", build_request(values, name, args.signature, options))
    except (OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
