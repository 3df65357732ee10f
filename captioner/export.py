"""Exporting a captioner run as a self-contained SavedModel, and captioning with one.

`export_run(RUN_DIR, OUT_DIR)` writes a SavedModel that stock TensorFlow (or TensorFlow
Serving) runs without this project, Keras or keras-hub: image decoding
(`tf.io.decode_image`: JPEG, PNG, GIF's first frame, BMP, WebP; grayscale and RGBA become RGB),
resizing to the encoder's input size (bilinear with antialiasing, close to Pillow's bilinear
resize the run directory's `captioner caption` uses), the encoder, decoding
(`common.decoding`'s `tf.while_loop`s) and detokenization (`detokenize_tf`) are in the graph.

Signatures:

- `serving_default(images (B,) tf.string)`: encoded image bytes, captioned with the beam size
  and length chosen at export (`--beam-size`, `--max-decode-length`). A TensorFlow Serving
  client that sends only the images (`{"instances": [{"b64": ...}]}`) calls this one.
- `caption_with_options(images, beam_size () int32, max_length () int32, n_best () int32)`:
  the beam size (one search compiled per size in `beam_sizes`, picked with nested `tf.cond`s
  by `common.export.beam_sizes`; size 1 is greedy decoding), the output width `T` and how many
  hypotheses `N` (1..beam_size) to return. The export-time values (`n_best` 1) are in
  `assets.extra/serving_input_defaults.json`, which `captioner serve` reads, so its requests
  may leave them out; TensorFlow Serving needs all four.

Both return `captions (B,)`, `tokens (B, T)` (padded with ""), `lengths (B,)` (words in
`tokens`), `scores (B,)` (sum of log-probabilities), `finished (B,)` (whether `<end>` came
within `max_length`), `attention (B, T, gh, gw)` (one map over the encoder's grid per decoded
step, `<end>` included; zero after) and `attention_lengths (B,)` (the number of those maps),
all of the best caption. `caption_with_options` adds the `N` best, best first (ranked by the
length-normalized score): `n_best_captions (B, N)`, `n_best_tokens (B, N, T)`,
`n_best_lengths (B, N)`, `n_best_scores (B, N)`, `n_best_normalized_scores (B, N)` and
`n_best_finished (B, N)`; its first hypothesis is the best caption.

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

from captioner.inference import Caption, CaptionerRun, CaptionHypothesis
from common.decoding import beam_search, greedy_decode
from common.errors import DataError, UserError
from common.export import savedmodel
from common.export.beam_sizes import (
    UNFILLED_SCORE,
    check_export_options,
    check_n_best,
    dispatch_n_best,
    graph_checks,
    request_options,
)
from common.text import Vocabulary, detokenize_tf

KIND = "captioner"
WHAT = "an exported captioner (make one with `captioner export RUN_DIR OUT_DIR`)"
OPTIONS_SIGNATURE = "caption_with_options"
DEFAULT_BEAM_SIZES = (1, 2, 3, 4, 5)
OUTPUTS = ("captions", "tokens", "lengths", "scores", "finished", "attention",
           "attention_lengths")
N_BEST_OUTPUTS = ("n_best_captions", "n_best_tokens", "n_best_lengths", "n_best_scores",
                  "n_best_normalized_scores", "n_best_finished")


class CaptionerModule(tf.Module):
    """A captioner with its vocabulary and image decoding, as one exportable module.

    Args:
        model: a built `captioner.model.ShowAttendTell` with its weights.
        vocab: its `Vocabulary`.
        image_size: `(H, W)` the encoder takes.
        max_decode_length: the default `max_length`.
        max_length_limit: the largest `max_length` accepted.
        beam_sizes: the beam sizes compiled into the graph.
        default_beam_size: the beam size of `serving_default` and the served default.
        length_penalty: the GNMT length penalty of beam search.

    Example:
    >>> module = CaptionerModule.from_run(CaptionerRun("runs/demo"))     # doctest: +SKIP
    >>> module.caption_with_options(tf.constant([png]), 3, 20, 1)["captions"]  # doctest: +SKIP
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
            self._serve_defaults, autograph=False,
            input_signature=[tf.TensorSpec([None], tf.string, name="images")],
        )
        self.caption_with_options = tf.function(
            self._serve_options, autograph=False,
            input_signature=[
                tf.TensorSpec([None], tf.string, name="images"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.int32, name="max_length"),
                tf.TensorSpec([], tf.int32, name="n_best"),
            ],
        )

    @classmethod
    def from_run(cls, run: CaptionerRun, **kwargs: Any) -> CaptionerModule:
        """The module for an in-process `CaptionerRun` (same model, vocabulary and sizes)."""
        default = run.config.decoder.max_length
        kwargs.setdefault("max_decode_length", default)
        kwargs.setdefault("max_length_limit", max(100, default, kwargs["max_decode_length"]))
        return cls(run.model, run.vocab, run.image_size, **kwargs)

    # -- the graph -------------------------------------------------------------------------

    def _serve_defaults(self, images):
        max_length = tf.constant(self.max_decode_length, tf.int32)
        pixels = self.decode_images(images)
        decoded = self._decode(pixels, self.default_beam_size, max_length, 1)
        return self._postprocess(*decoded)

    def _serve_options(self, images, beam_size, max_length, n_best):
        checks = graph_checks(beam_size, max_length, self.beam_sizes, self.max_length_limit,
                              n_best)
        with tf.control_dependencies(checks):
            pixels = self.decode_images(images)
        decoded = dispatch_n_best(beam_size, n_best, self.beam_sizes,
                                  lambda size, k: self._decode(pixels, size, max_length, k))
        return {**self._postprocess(*decoded), **self._n_best(*decoded)}

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

    def _decode(self, pixels, beam_size: int, max_length, n_best: int):
        """The `n_best` best captions of `pixels` with a Python beam size (1: greedy):
        tokens `(B, N, T)`, lengths, scores, normalized scores `(B, N)`, attention
        `(B, N, T, L)`, finished `(B, N)`."""
        model, vocab = self.model, self.vocab
        state = model.initial_decoding_state(pixels)
        batch = tf.shape(pixels)[0]
        step = model.make_step()
        if beam_size == 1:
            decoded = greedy_decode(step, state, batch, vocab.start_id, vocab.end_id, max_length)
        else:
            decoded = beam_search(step, state, batch, vocab.start_id, vocab.end_id, max_length,
                                  beam_size, length_penalty=self.length_penalty, n_best=n_best)
        return (decoded.tokens, decoded.lengths, decoded.scores, decoded.normalized_scores,
                tf.cast(decoded.attention, tf.float32), decoded.finished)

    def _words(self, ids, steps, finished) -> tf.RaggedTensor:
        """`(R, T)` ids -> `(R, None)` words, `<end>` and other special tokens dropped."""
        vocab = self.vocab
        width = tf.shape(ids)[1]
        n = steps - tf.cast(finished, tf.int32)  # the words: <end> dropped
        within = tf.range(width)[None, :] < n[:, None]
        special = (tf.equal(ids, vocab.pad_id) | tf.equal(ids, vocab.start_id)
                   | tf.equal(ids, vocab.end_id))
        words = tf.gather(tf.constant(vocab.tokens, tf.string), ids)
        return tf.ragged.boolean_mask(words, within & ~special)

    def _postprocess(self, ids, steps, scores, normalized, attention, finished):
        """The outputs of the first (best) hypothesis of each `(B, N, ...)` input."""
        ids, steps, scores = ids[:, 0], steps[:, 0], scores[:, 0]
        attention, finished = attention[:, 0], finished[:, 0]
        kept = self._words(ids, steps, finished)
        width = tf.shape(ids)[1]
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

    def _n_best(self, ids, steps, scores, normalized, attention, finished):
        """The `n_best_*` outputs: every hypothesis of `(B, N, ...)`, best first."""
        shape = tf.shape(ids)  # (B, N, T)
        kept = self._words(tf.reshape(ids, [-1, shape[2]]), tf.reshape(steps, [-1]),
                           tf.reshape(finished, [-1]))
        return {
            "n_best_captions": tf.reshape(detokenize_tf(kept), shape[:2]),
            "n_best_tokens": tf.reshape(kept.to_tensor("", shape=[shape[0] * shape[1],
                                                                  shape[2]]), shape),
            "n_best_lengths": tf.reshape(tf.cast(kept.row_lengths(), tf.int32), shape[:2]),
            "n_best_scores": scores,
            "n_best_normalized_scores": normalized,
            "n_best_finished": finished,
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
            "outputs": list(OUTPUTS), "n_best_outputs": list(N_BEST_OUTPUTS),
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
    return savedmodel.save_decoding_module(module, out_dir, KIND, OPTIONS_SIGNATURE,
                                           overwrite=overwrite)


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
        self.signature = self.loaded.signatures[savedmodel.options_signature(self.info)]
        self.takes_n_best = "n_best" in self.signature.structured_input_signature[1]
        self.beam_sizes = tuple(self.info["beam_sizes"])
        self.grid_shape = tuple(self.info["grid_shape"])
        self.image_size = tuple(self.info["image_size"])
        self.attention_kind = self.info.get("attention")  # "soft" | "hard", for the figures

    def _options(self, beam_size: int | None, max_length: int | None,
                 n_best: int | None = None) -> tuple[int, int]:
        beam_size, max_length = request_options(self.info, beam_size, max_length)
        check_n_best(n_best, beam_size)
        if n_best and n_best > 1 and not self.takes_n_best:
            raise UserError(f"{self.export_dir} was exported without n-best outputs; export "
                            "the run again to get several captions per image")
        return beam_size, max_length

    def caption_bytes(self, images: Sequence[bytes], beam_size: int | None = None,
                      max_length: int | None = None, n_best: int | None = None,
                      ) -> list[Caption]:
        """Captions of encoded images (bytes the graph decodes), one call; best first.

        With `n_best`, each `Caption.n_best` lists that many hypotheses, best first.

        Raises:
            tf.errors.InvalidArgumentError: an image the graph cannot decode.
        """
        beam_size, max_length = self._options(beam_size, max_length, n_best)
        inputs = {"images": tf.constant(list(images), tf.string),
                  "beam_size": tf.constant(beam_size, tf.int32),
                  "max_length": tf.constant(max_length, tf.int32)}
        if self.takes_n_best:
            inputs["n_best"] = tf.constant(n_best or 1, tf.int32)
        outputs = {name: value.numpy() for name, value in self.signature(**inputs).items()}
        return [_caption(outputs, row, n_best) for row in range(len(images))]

    def caption_files(self, paths: Sequence[str | os.PathLike], batch_size: int = 16,
                      beam_size: int | None = None, max_length: int | None = None,
                      n_best: int | None = None,
                      ) -> tuple[list[tuple[str, Caption]], list[tuple[str, str]]]:
        """As `CaptionerRun.caption_files`: `([(path, Caption)], [(path, why it failed)])`.

        Each file is checked with `common.images` (the pixel limit, truncated data, ...) and
        sent as it is when the graph decodes it the way Pillow does, else as PNG.
        """
        from common.images import graph_bytes

        self._options(beam_size, max_length, n_best)  # option errors before reading files
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
                captions = self.caption_bytes([b for _, b in chunk], beam_size, max_length,
                                              n_best)
                done.extend((name, c) for (name, _), c in zip(chunk, captions))
            except tf.errors.InvalidArgumentError:
                # One image Pillow reads but the graph does not: retry each, as PNG if need be.
                for name, blob in chunk:
                    caption, why = self._caption_one(name, blob, beam_size, max_length,
                                                     n_best)
                    if caption is None:
                        failed.append((name, why))
                    else:
                        done.append((name, caption))
        order = {str(p): i for i, p in enumerate(paths)}
        done.sort(key=lambda item: order[item[0]])
        return done, failed

    def _caption_one(self, name, blob, beam_size, max_length, n_best):
        from common.images import load_image, png_bytes

        try:
            return self.caption_bytes([blob], beam_size, max_length, n_best)[0], ""
        except tf.errors.InvalidArgumentError:
            pass
        try:
            return self.caption_bytes([png_bytes(load_image(blob, name))], beam_size,
                                      max_length, n_best)[0], ""
        except (tf.errors.InvalidArgumentError, DataError) as exc:
            message = exc.message if hasattr(exc, "message") else str(exc)
            return None, f"{name}: the model could not decode it ({' '.join(message.split())})"


def _caption(outputs: dict[str, np.ndarray], row: int, n_best: int | None = None) -> Caption:
    n = int(outputs["lengths"][row])
    steps = int(outputs["attention_lengths"][row])
    attention = outputs["attention"][row, :steps]
    words = [t.decode("utf-8") for t in outputs["tokens"][row, :n]]
    caption = Caption(outputs["captions"][row].decode("utf-8"), words,
                      float(outputs["scores"][row]), attention.reshape(steps, -1),
                      bool(outputs["finished"][row]))
    if n_best:
        caption.n_best = []
        for k in range(n_best):
            score = float(outputs["n_best_scores"][row, k])
            if score <= UNFILLED_SCORE:
                continue
            length = int(outputs["n_best_lengths"][row, k])
            caption.n_best.append(CaptionHypothesis(
                outputs["n_best_captions"][row, k].decode("utf-8"),
                [t.decode("utf-8") for t in outputs["n_best_tokens"][row, k, :length]],
                score, float(outputs["n_best_normalized_scores"][row, k]),
                bool(outputs["n_best_finished"][row, k])))
    return caption
