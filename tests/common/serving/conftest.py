"""Small SavedModels shaped like the real exports: a batch of `tf.string` in, tensors out."""

import io
import json
import struct
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image


class ImageStats(tf.Module):
    """Decodes each image; returns its mean pixel and its (H, W, C) shape. Counts its calls."""

    def __init__(self):
        super().__init__()
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)

    def _stats(self, images):
        self.calls.assign_add(1)

        def one(data):
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
            return tf.reduce_mean(tf.cast(image, tf.float32)), tf.shape(image)

        return tf.map_fn(one, images, fn_output_signature=(tf.float32, tf.int32))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def serve(self, images):
        mean, shape = self._stats(images)
        return {"mean": mean, "shape": shape}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def mean_only(self, images):
        return {"mean": self._stats(images)[0]}


class Shout(tf.Module):
    """Upper-cases sentences and counts their tokens (times `scale`, a per-request option)."""

    def __init__(self):
        super().__init__()
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="sentences"),
            tf.TensorSpec([], tf.int32, name="scale"),
        ]
    )
    def serve(self, sentences, scale):
        self.calls.assign_add(1)
        count = tf.cast(tf.strings.split(sentences).row_lengths(), tf.int32) * scale
        return {"upper": tf.strings.upper(sentences), "tokens": count, "echo_bytes": sentences}


@pytest.fixture(scope="session")
def image_model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("image_stats") / "1"
    module = ImageStats()
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve, "mean_only": module.mean_only}
    )
    return path


@pytest.fixture(scope="session")
def text_model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shout") / "1"
    module = Shout()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    (path / "assets.extra").mkdir()
    (path / "assets.extra" / "serving_input_defaults.json").write_text(json.dumps({"scale": 1}))
    return path


def png_bytes(seed: int, size=(5, 7)) -> bytes:
    """A small random RGB PNG (lossless, so Pillow and TensorFlow decode the same pixels)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def bomb_png(width=40_000, height=40_000) -> bytes:
    """A 100-byte PNG whose header declares `width` x `height` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def request(url: str, body=None, method=None, timeout=30.0, headers=None):
    """(status, parsed JSON body, content type) of one HTTP request; `body` a dict or bytes."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, json.loads(response.read()), response.headers.get_content_type()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read()), error.headers.get_content_type()
