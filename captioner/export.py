"""Exporting a captioner run as a self-contained SavedModel, and captioning with one.

`export_run(RUN_DIR, OUT_DIR)` writes a SavedModel that stock TensorFlow (or TensorFlow
Serving) runs without this project, Keras or keras-hub: image decoding
(`common.images.decode_in_graph`: JPEG with Pillow's accurate inverse DCT, PNG, GIF's first
frame, BMP, WebP; grayscale and RGBA become RGB; the pixels Pillow gives) and resizing to the
encoder's input size (bilinear with antialiasing), both by `captioner.preprocessing.image_pixels`,
the function training and the run directory's `captioner caption` use, the encoder, decoding
(`common.decoding`'s `tf.while_loop`s) and detokenization (`detokenize_tf`) are in the graph.

Signatures:

- `serving_default(images (B,) tf.string)`: encoded image bytes, captioned with the beam size
  and length chosen at export (`--beam-size`, `--max-decode-length`). A TensorFlow Serving
  client that sends only the images (`{"instances": [{"b64": ...}]}`) calls this one.
- `caption_with_options(images, beam_size () int32, max_length () int32, n_best () int32,
  no_repeat_ngram () int32)`: the beam size (one of `beam_sizes`: greedy decoding for 1, one
  beam search with the size as a tensor for the others, `common.export.beam_sizes`), the
  output width `T`, how many hypotheses `N` (1..beam_size) to return, and the n-gram size no
  caption repeats (0: off; `common.decoding`). The export-time values (`n_best` 1,
  `no_repeat_ngram` 0) are in `assets.extra/serving_input_defaults.json`, which `captioner
  serve` reads, so its requests may leave them out; TensorFlow Serving needs all five.

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
`ExportedCaptioner.caption_files` checks files with `common.images` first and re-encodes (as
BMP) what the graph cannot read as Pillow does (TIFF, CMYK JPEG, a photo with an EXIF turn,
turned upright); `caption_bytes` passes its bytes to the graph as they are (as stored: give it
`common.images.graph_bytes(...)` for what `caption_files` sends). The graph does not limit pixels: `captioner serve` and
`common.images` read the header and refuse decompression bombs before they reach it.

Dimensions: `B` batch, `T` caption steps, `gh × gw = L` the encoder's grid.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from captioner.inference import Caption, CaptionerRun, caption_from_outputs
from captioner.preprocessing import image_pixels
from common.decoding import defaults
from common.errors import DataError
from common.export.module import DEFAULT_BEAM_SIZES, DecodingModule, ExportedModel
from common.text import Vocabulary

KIND = "captioner"
WHAT = "an exported captioner (make one with `captioner export RUN_DIR OUT_DIR`)"
OPTIONS_SIGNATURE = "caption_with_options"


class CaptionerModule(DecodingModule):
    """A captioner with its vocabulary and image decoding, as one exportable module.

    `CaptionerRun.caption_batch` calls its `predict` on pixels; the export saves its
    signatures (see the module doc and `common.export.module.DecodingModule`).

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

    KIND = KIND
    WHAT = WHAT
    SEVERAL = "captions per image"
    INPUT = "images"
    TEXT = "captions"
    OPTIONS_SIGNATURE = OPTIONS_SIGNATURE
    OUTPUTS = ("captions", "tokens", "lengths", "scores", "finished", "attention",
               "attention_lengths")

    def __init__(
        self,
        model: Any,
        vocab: Vocabulary,
        image_size: Sequence[int],
        max_decode_length: int,
        max_length_limit: int = defaults.MAX_LENGTH_LIMIT,
        beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
        default_beam_size: int = defaults.BEAM_SIZE,
        length_penalty: float = defaults.LENGTH_PENALTY,
    ):
        self.model = model
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.grid_shape = tuple(int(n) for n in model.grid_shape)
        super().__init__("captioner", vocab, max_decode_length, max_length_limit, beam_sizes,
                         default_beam_size, length_penalty)

    @classmethod
    def from_run(cls, run: CaptionerRun, **kwargs: Any) -> CaptionerModule:
        """The module for an in-process `CaptionerRun` (same model, vocabulary and sizes)."""
        default = run.config.decoder.max_length
        kwargs.setdefault("max_decode_length", default)
        kwargs.setdefault("max_length_limit", max(defaults.MAX_LENGTH_LIMIT, default,
                                                  kwargs["max_decode_length"]))
        return cls(run.model, run.vocab, run.image_size, **kwargs)

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike, checkpoint: str | None = None,
                     **kwargs: Any) -> CaptionerModule:
        return cls.from_run(CaptionerRun(run_dir, checkpoint), **kwargs)

    def read_inputs(self, images) -> tf.Tensor:
        """Encoded bytes `(B,)` -> `(B, H, W, 3)` float32 in [0, 255] at the encoder's size,
        each by `captioner.preprocessing.image_pixels` (an image already at that size is only
        cast, which saves the resize's time)."""
        height, width = self.image_size
        return tf.map_fn(lambda data: image_pixels(data, self.image_size), images,
                         fn_output_signature=tf.TensorSpec([height, width, 3], tf.float32))

    def prepare(self, pixels):
        return pixels, {}

    def search_inputs(self, pixels, max_length):
        state = self.model.initial_decoding_state(pixels)
        return self.model.make_step(), state, tf.shape(pixels)[0]

    def extra_outputs(self, decoded, within, copied, rows):
        """`attention (R, T, gh, gw)`, zero after `<end>`, and its `attention_lengths`."""
        steps, attention = decoded.lengths, decoded.attention
        width = tf.shape(attention)[1]
        done = tf.range(width)[None, :] < steps[:, None]
        attention = attention * tf.cast(done, attention.dtype)[:, :, None]
        return {"attention": tf.reshape(attention, [-1, width, *self.grid_shape]),
                "attention_lengths": steps}

    def warmup_input(self) -> bytes:
        """A grey PNG at the encoder's size, for the warm-up requests."""
        return tf.io.encode_png(tf.fill([*self.image_size, 3], tf.constant(128, tf.uint8))).numpy()

    def family_info(self) -> dict[str, Any]:
        return {"image_size": list(self.image_size), "grid_shape": list(self.grid_shape),
                "vocab_size": len(self.vocab),
                "attention": self.model.decoder_config.attention}


OUTPUTS = CaptionerModule.OUTPUTS
N_BEST_OUTPUTS = CaptionerModule.n_best_outputs()


#: `captioner export RUN_DIR OUT_DIR`: load the run's latest checkpoint and export it, e.g.
#: `export_run("runs/demo", "export/demo", beam_sizes=(1, 3))`.
export_run = CaptionerModule.export_run


class ExportedCaptioner(ExportedModel):
    """`CaptionerRun.caption_files` on an export written by `export_run` (see `ExportedModel`;
    a SavedModel of a translator is a `UserError`)."""

    MODULE = CaptionerModule

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(self.info["grid_shape"])

    @property
    def image_size(self) -> tuple[int, ...]:
        return tuple(self.info["image_size"])

    @property
    def attention_kind(self) -> str | None:
        """"soft" or "hard", for the figures."""
        return self.info.get("attention")

    def caption_bytes(self, images: Sequence[bytes], beam_size: int | None = None,
                      max_length: int | None = None, n_best: int | None = None,
                      no_repeat_ngram: int = 0) -> list[Caption]:
        """Captions of encoded images (bytes the graph decodes, as stored: EXIF is not read;
        `common.images.graph_bytes` gives what `caption_files` sends), one call; best first.

        With `n_best`, each `Caption.n_best` lists that many hypotheses, best first; with
        `no_repeat_ngram` n, no caption repeats an n-gram of its words (an export made before
        that input refuses n > 0 in one line).

        Raises:
            tf.errors.InvalidArgumentError: an image the graph cannot decode.
        """
        beam_size, max_length = self._options(beam_size, max_length, n_best, no_repeat_ngram)
        outputs = self._run(images, beam_size, max_length, n_best, no_repeat_ngram)
        return [caption_from_outputs(outputs, row, n_best) for row in range(len(images))]

    def caption_files(self, paths: Sequence[str | os.PathLike], batch_size: int = 16,
                      beam_size: int | None = None, max_length: int | None = None,
                      n_best: int | None = None, no_repeat_ngram: int = 0,
                      ) -> tuple[list[tuple[str, Caption]], list[tuple[str, str]]]:
        """As `CaptionerRun.caption_files`: `([(path, Caption)], [(path, why it failed)])`.

        Each file is checked with `common.images` (the pixel limit, truncated data, ...) and
        sent as it is when the graph decodes it the way Pillow does, else as BMP (upright).
        """
        from common.images import graph_bytes

        options = (beam_size, max_length, n_best, no_repeat_ngram)
        self._options(*options)  # option errors before reading files
        done, failed = [], []  # done holds each file's input position
        # The files are read a batch at a time, so that only one batch's bytes (a re-encoded
        # photo takes 3 bytes a pixel) are held at once.
        for start in range(0, len(paths), batch_size):
            chunk = []
            for index, path in enumerate(paths[start:start + batch_size], start):
                try:
                    chunk.append((index, str(path), graph_bytes(path)))
                except DataError as exc:
                    failed.append((str(path), str(exc)))
            if not chunk:
                continue
            try:
                captions = self.caption_bytes([b for _, _, b in chunk], *options)
                done.extend((index, name, c) for (index, name, _), c in zip(chunk, captions))
            except tf.errors.InvalidArgumentError:
                # One image Pillow reads but the graph does not: retry each, as BMP if need be.
                for index, name, blob in chunk:
                    caption, why = self._caption_one(name, blob, *options)
                    if caption is None:
                        failed.append((name, why))
                    else:
                        done.append((index, name, caption))
        done.sort(key=lambda item: item[0])  # by position: a file given twice is answered twice
        return [(name, caption) for _, name, caption in done], failed

    def _caption_one(self, name, blob, *options):
        from common.images import REENCODED_GROWTH, load_image, lossless_bytes

        try:
            return self.caption_bytes([blob], *options)[0], ""
        except tf.errors.InvalidArgumentError:
            pass
        try:
            again = lossless_bytes(load_image(blob, name), REENCODED_GROWTH * len(blob))
            return self.caption_bytes([again], *options)[0], ""
        except (tf.errors.InvalidArgumentError, DataError) as exc:
            message = exc.message if hasattr(exc, "message") else str(exc)
            return None, f"{name}: the model could not decode it ({' '.join(message.split())})"
