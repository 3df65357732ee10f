"""Exporting a captioner run as a self-contained SavedModel, and captioning with one.

`export_run(RUN_DIR, OUT_DIR)` writes a SavedModel that stock TensorFlow (or TensorFlow
Serving) runs without this project, Keras or keras-hub: image decoding
(`tf.io.decode_image`: JPEG, PNG, GIF's first frame, BMP, WebP; grayscale and RGBA become RGB),
resizing to the encoder's input size (bilinear with antialiasing, close to Pillow's bilinear
resize the run directory's `captioner caption` uses), the encoder, decoding
(`common.decoding`'s `tf.while_loop`s) and detokenization (`detokenize_tf`) are in the graph.

Signatures:

- `serving_default(images (B,) tf.string, beam_size () int32, max_length () int32)`: encoded
  image bytes, the beam size (one search compiled per size in `beam_sizes`, picked with nested
  `tf.cond`s by `common.export.beam_sizes`; size 1 is greedy decoding) and the output width `T`. The
  defaults (given at export time) are in `assets.extra/serving_input_defaults.json`, which
  `captioner serve` reads, so its requests may leave the two out.
- `caption(images (B,) tf.string)`: the same with the export-time defaults, for TensorFlow
  Serving's row format and `saved_model_cli`.

Both return `captions (B,)`, `tokens (B, T)` (padded with ""), `lengths (B,)` (words in
`tokens`), `scores (B,)` (sum of log-probabilities), `finished (B,)` (whether `<end>` came
within `max_length`), `attention (B, T, gh, gw)` (one map over the encoder's grid per decoded
step, `<end>` included; zero after) and `attention_lengths (B,)` (the number of those maps).

Bytes that are not an image the graph decodes fail the whole call with an
`InvalidArgumentError` (the server then retries the other requests of a merged batch);
`ExportedCaptioner` checks files with `common.images` first and re-encodes as PNG what the graph
cannot read (TIFF, 16-bit, CMYK JPEG). The graph does not limit pixels: `captioner serve` and
`common.images` read the header and refuse decompression bombs before they reach it.

Dimensions: `B` batch, `T` caption steps, `gh × gw = L` the encoder's grid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from captioner.inference import Caption, CaptionerRun
from common.decoding import beam_search, greedy_decode
from common.errors import DataError
from common.export import savedmodel
from common.export.beam_sizes import (
    check_export_options,
    dispatch,
    graph_checks,
    request_options,
)
from common.text import Vocabulary, detokenize_tf

KIND = "captioner"
WHAT = "an exported captioner (make one with `captioner export RUN_DIR OUT_DIR`)"
DEFAULT_BEAM_SIZES = (1, 2, 3, 4, 5)
OUTPUTS = ("captions", "tokens", "lengths", "scores", "finished", "attention",
           "attention_lengths")


class CaptionerModule(tf.Module):
    """A captioner with its vocabulary and image decoding, as one exportable module.

    Args:
        model: a built `captioner.model.ShowAttendTell` with its weights.
        vocab: its `Vocabulary`.
        image_size: `(H, W)` the encoder takes.
        max_decode_length: the default `max_length`.
        max_length_limit: the largest `max_length` accepted.
        beam_sizes: the beam sizes compiled into the graph.
        default_beam_size: the beam size of the `caption` signature and the served default.
        length_penalty: the GNMT length penalty of beam search.

    Example:
    >>> module = CaptionerModule.from_run(CaptionerRun("runs/demo"))     # doctest: +SKIP
    >>> module.serving_default(tf.constant([png]), 3, 20)["captions"]    # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'a red circle .'], dtype=object)>
    """

    def __init__(
        self,
        model: Any,
        vocab: Vocabulary,
        image_size: Sequence[int],
        max_decode_length: int,
        max_length_limit: int = 100,
        beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
        default_beam_size: int = 1,
        length_penalty: float = 0.6,
    ):
        super().__init__(name="captioner")
        self.beam_sizes = check_export_options(beam_sizes, default_beam_size,
                                               max_decode_length, max_length_limit)
        self.model = model
        self.vocab = vocab
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.grid_shape = tuple(int(n) for n in model.grid_shape)
        self.max_decode_length = int(max_decode_length)
        self.max_length_limit = int(max_length_limit)
        self.default_beam_size = int(default_beam_size)
        self.length_penalty = float(length_penalty)
        # autograph=False: the model's Python conditionals stay Python (as in seq2seq.export).
        self.serving_default = tf.function(
            self._serve, autograph=False,
            input_signature=[
                tf.TensorSpec([None], tf.string, name="images"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.int32, name="max_length"),
            ],
        )
        self.caption = tf.function(
            self._serve_defaults, autograph=False,
            input_signature=[tf.TensorSpec([None], tf.string, name="images")],
        )

    @classmethod
    def from_run(cls, run: CaptionerRun, **kwargs: Any) -> CaptionerModule:
        """The module for an in-process `CaptionerRun` (same model, vocabulary and sizes)."""
        default = run.config.decoder.max_length
        kwargs.setdefault("max_decode_length", default)
        kwargs.setdefault("max_length_limit", max(100, default, kwargs["max_decode_length"]))
        return cls(run.model, run.vocab, run.image_size, **kwargs)

    # -- the graph -------------------------------------------------------------------------

    def _serve(self, images, beam_size, max_length):
        return self._caption(images, beam_size, max_length)

    def _serve_defaults(self, images):
        return self._caption(images, self.default_beam_size,
                             tf.constant(self.max_decode_length, tf.int32))

    def decode_images(self, images) -> tf.Tensor:
        """Encoded bytes `(B,)` -> `(B, H, W, 3)` float32 in [0, 255] at the encoder's size."""
        height, width = self.image_size

        def one(data):
            image = tf.io.decode_image(data, channels=3, expand_animations=False,
                                       dtype=tf.uint8)
            image.set_shape([None, None, 3])
            return tf.image.resize(image, (height, width), method="bilinear", antialias=True)

        return tf.map_fn(one, images, fn_output_signature=tf.TensorSpec(
            [height, width, 3], tf.float32))

    def _decode(self, pixels, beam_size: int, max_length):
        """Captions of `pixels` with a Python beam size (1: greedy), K = 1 squeezed away."""
        model, vocab = self.model, self.vocab
        state = model.initial_decoding_state(pixels)
        batch = tf.shape(pixels)[0]
        step = model.make_step()
        if beam_size == 1:
            decoded = greedy_decode(step, state, batch, vocab.start_id, vocab.end_id, max_length)
        else:
            decoded = beam_search(step, state, batch, vocab.start_id, vocab.end_id, max_length,
                                  beam_size, length_penalty=self.length_penalty, n_best=1)
        return (decoded.tokens[:, 0], decoded.lengths[:, 0], decoded.scores[:, 0],
                tf.cast(decoded.attention[:, 0], tf.float32), decoded.finished[:, 0])

    def _caption(self, images, beam_size, max_length) -> dict[str, tf.Tensor]:
        """The whole pipeline: `(B,)` encoded images -> the outputs in the module doc."""
        checks = graph_checks(beam_size, max_length, self.beam_sizes, self.max_length_limit)
        with tf.control_dependencies(checks):
            pixels = self.decode_images(images)
        outputs = dispatch(beam_size, self.beam_sizes,
                           lambda size: self._decode(pixels, size, max_length))
        return self._postprocess(*outputs)

    def _postprocess(self, ids, steps, scores, attention, finished):
        vocab = self.vocab
        width = tf.shape(ids)[1]
        n = steps - tf.cast(finished, tf.int32)  # the words: <end> dropped
        within = tf.range(width)[None, :] < n[:, None]
        special = (tf.equal(ids, vocab.pad_id) | tf.equal(ids, vocab.start_id)
                   | tf.equal(ids, vocab.end_id))
        words = tf.gather(tf.constant(vocab.tokens, tf.string), ids)
        kept = tf.ragged.boolean_mask(words, within & ~special)
        decoded = tf.range(width)[None, :] < steps[:, None]
        attention = attention * tf.cast(decoded, attention.dtype)[:, :, None]
        batch = tf.shape(ids)[0]
        return {
            "captions": detokenize_tf(kept),
            "tokens": kept.to_tensor("", shape=tf.shape(ids)),
            "lengths": tf.cast(kept.row_lengths(), tf.int32),
            "scores": scores,
            "finished": finished,
            "attention": tf.reshape(attention, [batch, width, *self.grid_shape]),
            "attention_lengths": steps,
        }

    def info(self) -> dict[str, Any]:
        """What `export_info.json` records (`ExportedCaptioner` reads the limits from it)."""
        return {
            "image_size": list(self.image_size), "grid_shape": list(self.grid_shape),
            "max_decode_length": self.max_decode_length,
            "max_length_limit": self.max_length_limit, "beam_sizes": list(self.beam_sizes),
            "default_beam_size": self.default_beam_size,
            "length_penalty": self.length_penalty, "vocab_size": len(self.vocab),
            "attention": self.model.decoder_config.attention,
            "outputs": list(OUTPUTS),
        }


def export_captioner(
    run: CaptionerRun,
    out_dir: str | os.PathLike,
    beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
    default_beam_size: int = 1,
    max_decode_length: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `run`'s model as a SavedModel into `out_dir` (signatures: see the module doc).

    Returns:
        The export directory.
    """
    kwargs: dict[str, Any] = {}
    if max_decode_length:
        kwargs["max_decode_length"] = max_decode_length
    module = CaptionerModule.from_run(run, beam_sizes=beam_sizes,
                                      default_beam_size=default_beam_size, **kwargs)
    return savedmodel.save_decoding_module(module, out_dir, KIND, "caption", overwrite=overwrite)


def export_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """`captioner export RUN_DIR OUT_DIR`: load the run's latest checkpoint and export it.

    Keyword arguments are those of `export_captioner`.

    Example:
    >>> export_run("runs/demo", "export/demo", beam_sizes=(1, 3))  # doctest: +SKIP
    PosixPath('export/demo')
    """
    return export_captioner(CaptionerRun(run_dir), out_dir, **kwargs)


class ExportedCaptioner:
    """`CaptionerRun.caption_files` on an exported SavedModel (loaded with `tf.saved_model.load`).

    Args:
        export_dir: a directory written by `export_run`.

    Raises:
        UserError: `export_dir` is not a SavedModel, or is one of another kind (a translator).
    """

    def __init__(self, export_dir: str | os.PathLike):
        self.info = savedmodel.require_kind(export_dir, KIND, WHAT)
        self.export_dir = Path(export_dir)
        self.loaded = tf.saved_model.load(str(export_dir))
        self.signature = self.loaded.signatures["serving_default"]
        self.beam_sizes = tuple(self.info["beam_sizes"])
        self.grid_shape = tuple(self.info["grid_shape"])
        self.image_size = tuple(self.info["image_size"])
        self.attention_kind = self.info.get("attention")  # "soft" | "hard", for the figures

    def _options(self, beam_size: int | None, max_length: int | None) -> tuple[int, int]:
        return request_options(self.info, beam_size, max_length)

    def caption_bytes(self, images: Sequence[bytes], beam_size: int | None = None,
                      max_length: int | None = None) -> list[Caption]:
        """Captions of encoded images (bytes the graph decodes), one call; best first.

        Raises:
            tf.errors.InvalidArgumentError: an image the graph cannot decode.
        """
        beam_size, max_length = self._options(beam_size, max_length)
        outputs = self.signature(images=tf.constant(list(images), tf.string),
                                 beam_size=tf.constant(beam_size, tf.int32),
                                 max_length=tf.constant(max_length, tf.int32))
        outputs = {name: value.numpy() for name, value in outputs.items()}
        return [_caption(outputs, row) for row in range(len(images))]

    def caption_files(self, paths: Sequence[str | os.PathLike], batch_size: int = 16,
                      beam_size: int | None = None, max_length: int | None = None,
                      ) -> tuple[list[tuple[str, Caption]], list[tuple[str, str]]]:
        """As `CaptionerRun.caption_files`: `([(path, Caption)], [(path, why it failed)])`.

        Each file is checked with `common.images` (the pixel limit, truncated data, ...) and
        sent as it is when the graph decodes it the way Pillow does, else as PNG.
        """
        from common.images import graph_bytes

        self._options(beam_size, max_length)  # option errors before reading any file
        done, failed, blobs, names = [], [], [], []
        for path in paths:
            try:
                blobs.append(graph_bytes(path))
                names.append(str(path))
            except DataError as exc:
                failed.append((str(path), str(exc)))
        for start in range(0, len(blobs), batch_size):
            chunk = list(zip(names[start:start + batch_size], blobs[start:start + batch_size]))
            try:
                captions = self.caption_bytes([b for _, b in chunk], beam_size, max_length)
                done.extend((name, c) for (name, _), c in zip(chunk, captions))
            except tf.errors.InvalidArgumentError:
                # One image Pillow reads but the graph does not: retry each, as PNG if need be.
                for name, blob in chunk:
                    caption, why = self._caption_one(name, blob, beam_size, max_length)
                    if caption is None:
                        failed.append((name, why))
                    else:
                        done.append((name, caption))
        order = {str(p): i for i, p in enumerate(paths)}
        done.sort(key=lambda item: order[item[0]])
        return done, failed

    def _caption_one(self, name, blob, beam_size, max_length):
        from common.images import load_image, png_bytes

        try:
            return self.caption_bytes([blob], beam_size, max_length)[0], ""
        except tf.errors.InvalidArgumentError:
            pass
        try:
            return self.caption_bytes([png_bytes(load_image(blob, name))], beam_size,
                                      max_length)[0], ""
        except (tf.errors.InvalidArgumentError, DataError) as exc:
            message = exc.message if hasattr(exc, "message") else str(exc)
            return None, f"{name}: the model could not decode it ({' '.join(message.split())})"


def _caption(outputs: dict[str, np.ndarray], row: int) -> Caption:
    n = int(outputs["lengths"][row])
    steps = int(outputs["attention_lengths"][row])
    attention = outputs["attention"][row, :steps]
    words = [t.decode("utf-8") for t in outputs["tokens"][row, :n]]
    return Caption(outputs["captions"][row].decode("utf-8"), words, float(outputs["scores"][row]),
                   attention.reshape(steps, -1), bool(outputs["finished"][row]))
