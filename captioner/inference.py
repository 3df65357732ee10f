"""Captioning with a trained run directory: load it, read images, decode captions.

`load_run(run_dir)` rebuilds the model from `config.json` and `vocab.txt` and restores the
latest checkpoint; `CaptionerRun.caption_batch(images)` captions a batch of raw images and
`caption_files(paths)` reads image files, captioning the readable ones and reporting the rest.

Shapes: `B` batch, `H`, `W` image size, `K` beams, `T` caption steps, `L` regions.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from captioner.config import CaptionerRunConfig
from captioner.train import VOCAB_FILE, build_model, load_run_config
from common.errors import DataError, UserError


@dataclass
class Caption:
    """One generated caption: its text, words, score and attention maps `(T, L)`."""

    text: str
    words: list[str]
    score: float
    attention: np.ndarray
    finished: bool

    def to_json(self, grid_shape: tuple[int, int] | None = None) -> dict[str, Any]:
        data = {"caption": self.text, "words": self.words, "score": self.score,
                "finished": self.finished,
                "attention": np.round(self.attention, 5).tolist()}
        if grid_shape is not None:
            data["grid"] = list(grid_shape)
        return data


class CaptionerRun:
    """A trained captioner loaded from its run directory.

    Args:
        run_dir: a directory written by `captioner train`.

    Raises:
        UserError: `run_dir` is not a captioner run or holds no checkpoint.

    Example:
    >>> run = CaptionerRun("runs/demo")                              # doctest: +SKIP
    >>> [c.text for c in run.caption_batch(images, beam_size=3)]    # doctest: +SKIP
    ['a red circle above a blue square .']
    """

    def __init__(self, run_dir: str | os.PathLike):
        from common.text import Vocabulary
        from common.training import restore_model

        self.run_dir = Path(run_dir)
        self.config: CaptionerRunConfig = load_run_config(run_dir)
        vocab_path = self.run_dir / VOCAB_FILE
        if not vocab_path.exists():
            raise UserError(f"{run_dir}: not a captioner run directory (no {VOCAB_FILE})")
        self.vocab = Vocabulary.load(vocab_path)
        self.model = build_model(self.config, len(self.vocab))
        self.checkpoint = restore_model(self.model, self.run_dir / "checkpoints")
        self._decoders: dict[tuple, Any] = {}

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.config.encoder.image_size)

    @property
    def grid_shape(self) -> tuple[int, int]:
        return self.model.grid_shape

    def _decoder(self, method: str, beam_size: int, max_length: int | None, temperature: float):
        import tensorflow as tf

        key = (method, beam_size, max_length, temperature)
        if key not in self._decoders:
            def decode(images):
                return self.model.caption(
                    images, start_id=self.vocab.start_id, end_id=self.vocab.end_id,
                    method=method, beam_size=beam_size, max_length=max_length,
                    temperature=temperature,
                )
            self._decoders[key] = tf.function(decode, reduce_retracing=True)
        return self._decoders[key]

    def caption_batch(self, images, beam_size: int = 3, method: str | None = None,
                      max_length: int | None = None, temperature: float = 1.0) -> list[Caption]:
        """Captions of `images (B, H, W, 3)` (raw 0–255, already at `image_size`), best first.

        `method` defaults to `"beam"` (`"greedy"` when `beam_size` is 1); `"sample"` samples
        words with `temperature`.
        """
        from common.text import detokenize

        method = method or ("greedy" if beam_size == 1 else "beam")
        decoded = self._decoder(method, beam_size, max_length, temperature)(
            np.asarray(images, np.float32))
        tokens = decoded.tokens.numpy()[:, 0]
        lengths = decoded.lengths.numpy()[:, 0]
        attention = decoded.attention.numpy()[:, 0]
        scores = decoded.scores.numpy()[:, 0]
        finished = decoded.finished.numpy()[:, 0]
        captions = []
        for b in range(len(tokens)):
            words = self.vocab.decode(tokens[b])
            steps = int(lengths[b])
            captions.append(Caption(detokenize(words), words, float(scores[b]),
                                    attention[b, :steps], bool(finished[b])))
        return captions

    def caption_files(self, paths: Sequence[str | os.PathLike], batch_size: int = 16,
                      **kwargs) -> tuple[list[tuple[str, Caption]], list[tuple[str, str]]]:
        """Caption image files; returns `([(path, Caption)], [(path, why it failed)])`."""
        done, failed, images, names = [], [], [], []
        for path in paths:
            try:
                images.append(read_image(path, self.image_size))
                names.append(str(path))
            except DataError as exc:
                failed.append((str(path), str(exc)))
        for start in range(0, len(images), batch_size):
            batch = np.stack(images[start:start + batch_size])
            done.extend(zip(names[start:start + batch_size], self.caption_batch(batch, **kwargs)))
        return done, failed


def read_image(path: str | os.PathLike | bytes, image_size: tuple[int, int]) -> np.ndarray:
    """An image file (or its bytes) as `(H, W, 3)` float32 in [0, 255], resized to `image_size`.

    Any raster image a user is likely to have is read (`common.images.load_image`: RGBA,
    grayscale, 16-bit, palette, CMYK, animations' first frame, TIFF, WebP, ...).

    Raises:
        DataError: one line naming the file and the reason (missing, empty, not an image,
            truncated, or a header declaring more pixels than `common.images` allows).
    """
    from PIL import Image

    from common.images import load_image

    image = load_image(path)
    image = image.resize((image_size[1], image_size[0]), Image.Resampling.BILINEAR)
    return np.asarray(image, np.float32)


def load_run(run_dir: str | os.PathLike) -> CaptionerRun:
    """The trained captioner of `run_dir` (see `CaptionerRun`)."""
    return CaptionerRun(run_dir)
