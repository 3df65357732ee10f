"""Captioning with a trained run directory: load it, read images, decode captions.

`load_run(run_dir)` rebuilds the model from `config.json` and `vocab.txt` and restores the
latest checkpoint; `CaptionerRun.caption_batch(images)` captions a batch of raw images and
`caption_files(paths)` reads image files (`captioner.preprocessing.read_image`, the export's
pre-processing), captioning the readable ones and reporting the rest.

Shapes: `B` batch, `H`, `W` image size, `K` beams, `T` caption steps, `L` regions.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from captioner.config import BEAM_SIZE, CaptionerRunConfig
from captioner.preprocessing import read_image
from captioner.train import VOCAB_FILE, build_model, load_run_config
from common.decoding.hypothesis import Hypothesis
from common.errors import DataError, UserError
from common.outputs import rounded_weights
from common.training.run_dir import RunDir


class CaptionHypothesis(Hypothesis):
    """One of the n best captions of a beam (`words` are its `tokens`)."""

    OUTPUT = "captions"
    TEXT_KEY = "caption"
    TOKENS_KEY = "words"

    @property
    def words(self) -> list[str]:
        return self.tokens

    to_json = Hypothesis.json


@dataclass
class Caption:
    """One generated caption: its text, words, score and attention maps `(T, L)`; `n_best`
    lists the beam's best hypotheses (the first is this caption) when they were asked for."""

    text: str
    words: list[str]
    score: float
    attention: np.ndarray
    finished: bool
    n_best: list[CaptionHypothesis] | None = None

    def to_json(self, grid_shape: tuple[int, int] | None = None) -> dict[str, Any]:
        data = {"caption": self.text, "words": self.words, "score": self.score,
                "finished": self.finished,
                "attention": rounded_weights(self.attention)}
        if grid_shape is not None:
            data["grid"] = list(grid_shape)
        if self.n_best is not None:
            data["n_best"] = [h.to_json() for h in self.n_best]
        return data


class CaptionerRun:
    """A trained captioner loaded from its run directory.

    Args:
        run_dir: a directory written by `captioner train`.
        checkpoint: which of its checkpoints: "best", "last", a number or a path (see
            `common.training.checkpoints.resolve_checkpoint`); None: the best when the run
            keeps one, else the last.

    Raises:
        UserError: `run_dir` is not a captioner run or holds no such checkpoint.

    Example:
    >>> run = CaptionerRun("runs/demo")                              # doctest: +SKIP
    >>> [c.text for c in run.caption_batch(images, beam_size=3)]    # doctest: +SKIP
    ['a red circle above a blue square .']
    """

    def __init__(self, run_dir: str | os.PathLike, checkpoint: str | None = None):
        from common.text import Vocabulary
        from common.training.checkpoints import restore_run_checkpoint

        self.run_dir = Path(run_dir)
        self.config: CaptionerRunConfig = load_run_config(run_dir)
        vocab_path = self.run_dir / VOCAB_FILE
        if not vocab_path.exists():
            raise UserError(f"{run_dir}: not a captioner run directory (no {VOCAB_FILE})")
        RunDir(self.run_dir).check_vocabularies()
        self.vocab = Vocabulary.load(vocab_path)
        self.model = build_model(self.config, len(self.vocab))
        self.checkpoint = restore_run_checkpoint(self.model, self.run_dir, checkpoint)
        self._module: Any = None

    @classmethod
    def from_model(cls, model: Any, vocab: Any, config: CaptionerRunConfig) -> CaptionerRun:
        """A captioner around a model in memory (the training's validation), no run directory."""
        run = cls.__new__(cls)
        run.run_dir, run.config, run.vocab, run.model = None, config, vocab, model
        run.checkpoint, run._module = None, None
        return run

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.config.encoder.image_size)

    @property
    def grid_shape(self) -> tuple[int, int]:
        return self.model.grid_shape

    def module(self) -> Any:
        """The `captioner.export.CaptionerModule` of this run: the graph both the export and
        `caption_batch` decode with (built on first use)."""
        if self._module is None:
            from captioner.export import CaptionerModule

            self._module = CaptionerModule.from_run(self)
        return self._module

    def caption_batch(self, images, beam_size: int = BEAM_SIZE, method: str | None = None,
                      max_length: int | None = None, temperature: float = 1.0,
                      n_best: int | None = None, no_repeat_ngram: int = 0) -> list[Caption]:
        """Captions of `images (B, H, W, 3)` (raw 0–255, already at `image_size`), best first.

        `method` (a name of `common.decoding.DECODING_METHODS`) defaults to `"beam"`
        (`"greedy"` when `beam_size` is 1); `"sample"` samples words with `temperature`.
        With `n_best` (1..`beam_size`), each caption's `n_best` lists that many hypotheses of
        the beam, best first. With `no_repeat_ngram` n >= 1, no caption repeats an n-gram of
        its words (`common.decoding`; 0: off).

        Raises:
            UserError: `n_best` is more than `beam_size`, or given with sampling;
                `no_repeat_ngram` is not an integer >= 0.
        """
        method = _decoding_method(beam_size, method, n_best)
        outputs = self.module().predict(np.asarray(images, np.float32), method, beam_size,
                                        max_length, n_best, temperature=temperature,
                                        no_repeat_ngram=no_repeat_ngram)
        return [caption_from_outputs(outputs, row, n_best)
                for row in range(len(outputs["scores"]))]

    def caption_files(self, paths: Sequence[str | os.PathLike], batch_size: int = 16,
                      **kwargs) -> tuple[list[tuple[str, Caption]], list[tuple[str, str]]]:
        """Caption image files; returns `([(path, Caption)], [(path, why it failed)])`.

        Each file is read by `captioner.preprocessing.read_image`: upright as its EXIF says,
        decoded and resized as the export reads it. Keyword arguments are those of
        `caption_batch`; their errors come before any file is read."""
        from common.decoding.utils import check_no_repeat_ngram

        _decoding_method(kwargs.get("beam_size", BEAM_SIZE), kwargs.get("method"),
                         kwargs.get("n_best"))
        check_no_repeat_ngram(kwargs.get("no_repeat_ngram", 0))
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


def _decoding_method(beam_size: int, method: str | None, n_best: int | None) -> str:
    """The decoding method (default: greedy for beam size 1, else beam search), after checking
    that `n_best` hypotheses can come from it; a `UserError` otherwise."""
    from common.decoding import DECODING_METHODS, default_method
    from common.export.beam_sizes import check_n_best

    method = method or default_method(beam_size)
    DECODING_METHODS.get(method)  # an unknown name: one line listing the methods
    if n_best is not None and method == "sample":
        raise UserError("n-best: sampling draws one caption per image; expected beam search "
                        "or greedy decoding")
    check_n_best(n_best, 1 if method == "greedy" else beam_size)
    return method


def caption_from_outputs(outputs: dict[str, np.ndarray], row: int,
                         n_best: int | None = None) -> Caption:
    """The `Caption` of one row of a `CaptionerModule`'s outputs (in process or from an
    export), with its `n_best` hypotheses when asked for."""
    n = int(outputs["lengths"][row])
    steps = int(outputs["attention_lengths"][row])
    attention = outputs["attention"][row, :steps]
    caption = Caption(outputs["captions"][row].decode("utf-8"), _words(outputs["tokens"][row], n),
                      float(outputs["scores"][row]), attention.reshape(steps, -1),
                      bool(outputs["finished"][row]))
    if n_best:
        caption.n_best = CaptionHypothesis.n_best_from_outputs(outputs, row, n_best)
    return caption


def _words(tokens: np.ndarray, n: int) -> list[str]:
    return [t.decode("utf-8") for t in tokens[:n]]


def open_model(path: str | os.PathLike, checkpoint: str | None = None) -> Any:
    """A `CaptionerRun` for a run directory (its `checkpoint`, see `CaptionerRun`), a
    `captioner.export.ExportedCaptioner` for a SavedModel (both caption files the same way);
    a `UserError` for anything else."""
    from common.export.savedmodel import is_saved_model

    path = Path(path)
    if is_saved_model(path):
        from captioner.export import ExportedCaptioner

        if checkpoint is not None:
            raise UserError("--checkpoint: a SavedModel holds the weights chosen at export "
                            "time; give it to `captioner export`")
        return ExportedCaptioner(path)
    if path.is_dir() and not (path / "config.json").is_file():
        raise UserError(f"{path} is not a captioner run directory (no config.json) nor an "
                        "exported captioner SavedModel (no saved_model.pb)")
    return CaptionerRun(path, checkpoint)


def load_run(run_dir: str | os.PathLike, checkpoint: str | None = None) -> CaptionerRun:
    """The trained captioner of `run_dir` (see `CaptionerRun`)."""
    return CaptionerRun(run_dir, checkpoint)
