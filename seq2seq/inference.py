"""Translating with a trained run: loading it, decoding batches, rare-word copying, detokenizing.

`Translator.from_run_dir(RUN_DIR)` rebuilds the model from `config.json`, loads the
vocabularies and the latest checkpoint; `Translator.translate(texts)` returns one
`Translation` (or one per-line error) per input text.

Rare words: a target `<unk>` is replaced by the source token that the decoder attended to most
when it produced it (Luong et al. 2015, "Addressing the Rare Word Problem in NMT", in its
simplest form: copy, no dictionary). For names, numbers and words the target vocabulary does not
hold this gives the right token more often than not; it never emits `<unk>` unless the attended
source token is itself padding. `Translation.copied` lists the output positions replaced.
A pointer-generator (`--copy`, `seq2seq.copying`) copies by itself: its extended ids `>= V` are
mapped back to the source tokens they point to, and a `<unk>` it still emits is replaced as
above. A model without attention (`seq2seq-noattn`) cannot copy: its `<unk>`s stay.

Dimensions: `B` batch, `K` hypotheses, `S` source steps, `T` target steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from common.config import from_dict, load_json
from common.decoding import Decoded, beam_search, greedy_decode
from common.errors import UserError
from common.text import Vocabulary, detokenize, tokenize_texts
from seq2seq.config import RunConfig
from seq2seq.copying import copy_ids, extended_words
from seq2seq.models import build_model

SOURCE_VOCAB = "vocab.source.txt"
TARGET_VOCAB = "vocab.target.txt"


@dataclass
class TranslationHypothesis:
    """One of the n best translations of a beam: text, tokens (after rare-word copying), the
    sum of log-probabilities (`score`) and the length-normalized score the beam ranks by."""

    text: str
    tokens: list[str]
    score: float
    normalized_score: float
    finished: bool

    def as_json(self) -> dict[str, Any]:
        return {"translation": self.text, "tokens": self.tokens, "score": self.score,
                "normalized_score": self.normalized_score, "finished": self.finished}


@dataclass
class Translation:
    """One translated sentence.

    Attributes:
        source: the input text.
        text: the detokenized translation ("" when `error` is set).
        tokens: the output tokens (no `<start>`/`<end>`), after rare-word copying.
        source_tokens: the tokens the model read.
        score: the sum of log-probabilities of the output.
        finished: whether the model emitted `<end>` within the length limit; when False the
            translation was cut at `max_decode_length` and `warning` says so.
        attention: `(T, S)` the attention over source tokens for each output token; None for
            a model without attention (`seq2seq-noattn`).
        copied: the output positions whose `<unk>` was replaced by a source token.
        error: a one-line reason this line could not be translated, or None.
        warning: a one-line note about a translation that was produced (unfinished, empty).
        n_best: the beam's best hypotheses, best first (the first is this translation), when
            they were asked for; else None.
    """

    source: str
    text: str = ""
    tokens: list[str] = field(default_factory=list)
    source_tokens: list[str] = field(default_factory=list)
    score: float = 0.0
    finished: bool = True
    attention: Any = None
    copied: list[int] = field(default_factory=list)
    error: str | None = None
    warning: str | None = None
    n_best: list[TranslationHypothesis] | None = None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (attention as nested lists)."""
        out = {
            "source": self.source, "translation": self.text, "tokens": self.tokens,
            "source_tokens": self.source_tokens, "score": self.score, "finished": self.finished,
            "copied": self.copied,
        }
        if self.attention is not None:
            out["attention"] = np.round(np.asarray(self.attention), 4).tolist()
        if self.error:
            out["error"] = self.error
        if self.warning:
            out["warning"] = self.warning
        if self.n_best is not None:
            out["n_best"] = [h.as_json() for h in self.n_best]
        return out


def screen_lines(
    texts: Sequence[str], token_lists: Sequence[list[str]], max_source_tokens: int
) -> tuple[list[Translation | None], list[int]]:
    """Per-line errors for lines that cannot be translated, and the indices of the rest.

    Returns `(results, good)`: `results[i]` is a `Translation` carrying the error of an empty
    line or of one longer than `max_source_tokens`, else None; `good` lists the other indices.
    """
    results: list[Translation | None] = [None] * len(texts)
    good = []
    for i, (text, tokens) in enumerate(zip(texts, token_lists)):
        if not tokens:
            results[i] = Translation(source=text, error="empty line: nothing to translate")
        elif len(tokens) > max_source_tokens:
            results[i] = Translation(
                source=text, source_tokens=tokens,
                error=f"{len(tokens)} tokens; this model accepts at most {max_source_tokens}",
            )
        else:
            good.append(i)
    return results, good


def source_ids(vocab: Vocabulary, tokens: Sequence[str]) -> list[int]:
    """The model input for one tokenized source sentence (as `seq2seq.datasets` makes it)."""
    return vocab.encode(list(tokens))


def pad_batch(rows: Sequence[Sequence[int]], multiple: int = 8) -> np.ndarray:
    """`(B, S)` int32 right-padded with 0; `S` rounded up to a multiple (fewer retraces)."""
    width = max(1, max((len(r) for r in rows), default=1))
    width = int(math.ceil(width / multiple) * multiple)
    out = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def decode_batch(
    model: Any,
    source: Any,
    start_id: int,
    end_id: int,
    max_length: int,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    attention_layer: int = -1,
    attention_head: int | None = None,
    source_copy: Any = None,
    n_best: int = 1,
) -> Decoded:
    """Greedy decoding (`beam_size == 1`) or beam search of `source (B, S)`.

    `source_copy (B, S)` is the copy ids of a copying model (`seq2seq.copying.copy_ids`); its
    tokens may then be extended ids `>= V`. `n_best` (1..`beam_size`) hypotheses are kept.

    Returns:
        A `Decoded` with `K = n_best`, best first: tokens `(B, K, T)`, attention `(B, K, T, S)`
        (`(B, K, T, 0)` for a model without attention).
    """
    source = tf.convert_to_tensor(source, tf.int32)
    batch = tf.shape(source)[0]
    step = model.make_step(attention_layer=attention_layer, attention_head=attention_head)
    options = {}
    if getattr(model, "copy", False):
        options["source_copy"] = source_copy
    if hasattr(model, "max_length"):  # Transformer: the cache holds `max_length` steps
        state = model.initial_state(source, max_length=max_length, **options)
    else:
        state = model.initial_state(source, **options)
    if beam_size == 1:
        return greedy_decode(step, state, batch, start_id, end_id, max_length)
    return beam_search(step, state, batch, start_id, end_id, max_length, beam_size,
                       length_penalty=length_penalty, n_best=n_best)


class Translator:
    """A trained translator with its vocabularies, ready to translate text.

    Args:
        model: a built translator (`seq2seq.models.build_model`) with its weights.
        source_vocab: the source `Vocabulary`.
        target_vocab: the target `Vocabulary`.
        config: the run's `RunConfig`.

    Example:
    >>> translator = Translator.from_run_dir("runs/dates")      # doctest: +SKIP
    >>> translator.translate(["25th of November 2026"])[0].text  # doctest: +SKIP
    '2026-11-25'
    """

    def __init__(self, model: Any, source_vocab: Vocabulary, target_vocab: Vocabulary,
                 config: RunConfig):
        self.model = model
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.config = config
        self._decoders: dict[tuple, Any] = {}

    @property
    def max_source_tokens(self) -> int:
        """The longest source (in tokens) the model accepts."""
        model = self.config.model
        if model.arch == "transformer":
            return model.transformer.max_length
        return max(4 * self.config.data.max_length, 128)

    @property
    def max_decode_limit(self) -> int:
        """The largest `max_length` accepted (the Transformer's positions), here and in an
        export of this model (its `max_length_limit`)."""
        model = self.config.model
        if model.arch == "transformer":
            return model.transformer.max_length
        return max(1024, model.max_decode_length)

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> Translator:
        """Loads `RUN_DIR/config.json`, its vocabularies and its latest checkpoint."""
        from common.training.checkpoints import restore_model

        run_dir = Path(run_dir)
        config_path = run_dir / "config.json"
        if not run_dir.is_dir() or not config_path.is_file():
            raise UserError(
                f"{run_dir} is not a translator run directory (expected {config_path}); "
                "make one with `seq2seq train --out RUN_DIR`"
            )
        data = load_json(config_path)
        if not isinstance(data, dict) or data.get("family") != "seq2seq":
            family = data.get("family") if isinstance(data, dict) else None
            raise UserError(f"{run_dir} holds a {family!r} run; expected a 'seq2seq' run")
        config = from_dict(RunConfig, data)
        vocabs = []
        for name in (SOURCE_VOCAB, TARGET_VOCAB):
            if not (run_dir / name).is_file():
                raise UserError(f"{run_dir / name}: missing; expected the run's vocabulary")
            vocabs.append(Vocabulary.load(run_dir / name))
        model = build_model(config.model, len(vocabs[0]), len(vocabs[1]))
        dummy = {"source": np.ones((1, 2), np.int32), "target_in": np.ones((1, 2), np.int32)}
        model(dummy, training=False)
        restore_model(model, run_dir)
        return cls(model, vocabs[0], vocabs[1], config)

    def _decoder(self, beam_size: int, max_length: int, attention_layer: int,
                 attention_head: int | None, n_best: int = 1):
        key = (beam_size, max_length, attention_layer, attention_head, n_best)
        if key not in self._decoders:
            vocab = self.target_vocab

            @tf.function(reduce_retracing=True)
            def run(source, source_copy=None):
                return decode_batch(self.model, source, vocab.start_id, vocab.end_id, max_length,
                                    beam_size, attention_layer=attention_layer,
                                    attention_head=attention_head, source_copy=source_copy,
                                    n_best=n_best)

            self._decoders[key] = run
        return self._decoders[key]

    def translate_tokens(
        self,
        token_lists: Sequence[Sequence[str]],
        beam_size: int = 1,
        max_length: int | None = None,
        attention_layer: int = -1,
        attention_head: int | None = None,
        copy_unknown: bool = True,
        n_best: int | None = None,
    ) -> list[Translation]:
        """Translates already tokenized, valid sentences in one batch (with `n_best`, each
        `Translation.n_best` lists that many hypotheses, best first)."""
        from common.export.beam_sizes import UNFILLED_SCORE, check_n_best

        check_n_best(n_best, beam_size)
        max_length = max_length or self.config.model.max_decode_length
        rows = [source_ids(self.source_vocab, tokens) for tokens in token_lists]
        inputs = [pad_batch(rows)]
        if getattr(self.model, "copy", False):  # the pointer-generator's extended ids
            inputs.append(pad_batch([copy_ids(t, self.target_vocab) for t in token_lists]))
        decoded = self._decoder(beam_size, max_length, attention_layer, attention_head,
                                n_best or 1)(*inputs)
        tokens = decoded.tokens.numpy()
        lengths = decoded.lengths.numpy()
        scores = decoded.scores.numpy()
        normalized = decoded.normalized_scores.numpy()
        finished = decoded.finished.numpy()
        attention = decoded.attention.numpy()
        results = []
        for i, source_tokens in enumerate(token_lists):
            words, alpha, copied = self._words(tokens[i, 0], lengths[i, 0], finished[i, 0],
                                               attention[i, 0], source_tokens, copy_unknown)
            result = Translation(
                source=detokenize(source_tokens), text=detokenize(words), tokens=words,
                source_tokens=list(source_tokens), score=float(scores[i, 0]),
                finished=bool(finished[i, 0]), attention=alpha, copied=copied,
            )
            if not result.finished:
                result.warning = f"no <end> within {max_length} tokens; the output is cut there"
            elif not words:
                result.warning = "the model produced an empty translation"
            if n_best is not None:
                result.n_best = []
                for k in range(n_best):
                    if scores[i, k] <= UNFILLED_SCORE:
                        continue
                    words = self._words(tokens[i, k], lengths[i, k], finished[i, k],
                                        attention[i, k], source_tokens, copy_unknown)[0]
                    result.n_best.append(TranslationHypothesis(
                        detokenize(words), words, float(scores[i, k]), float(normalized[i, k]),
                        bool(finished[i, k])))
            results.append(result)
        return results

    def _words(self, ids, length, finished, attention, source_tokens, copy_unknown):
        """One hypothesis's output words (extended ids mapped back, `<unk>` copied from the
        most attended source token, specials dropped), its attention `(T, S)` or None, and
        the copied positions."""
        n = int(length) - int(bool(finished))  # drop <end>
        words = extended_words(ids[:n].tolist(), source_tokens, self.target_vocab)
        alpha = attention[:n, : len(source_tokens)]
        if not attention.shape[-1]:  # a model without attention (seq2seq-noattn)
            alpha = None
        copied = []
        if copy_unknown and alpha is not None:
            for t, word in enumerate(words):
                if word == "<unk>" and len(source_tokens):
                    words[t] = source_tokens[int(np.argmax(alpha[t]))]
                    copied.append(t)
        words = [w for w in words if w not in ("<pad>", "<start>", "<end>")]
        return words, alpha, copied

    def translate(
        self,
        texts: Sequence[str],
        beam_size: int = 1,
        batch_size: int = 64,
        max_length: int | None = None,
        attention_layer: int = -1,
        attention_head: int | None = None,
        progress: bool = False,
        n_best: int | None = None,
    ) -> list[Translation]:
        """Translates `texts`; bad lines get a `Translation` with `error` set, not an exception.

        Empty or whitespace-only lines and lines longer than `max_source_tokens` are errors;
        unknown words, emoji and control characters are tokenized and translated (unknown
        source words are `<unk>` to the model and may be copied to the output). With `n_best`
        (1..`beam_size`), each `Translation.n_best` lists that many hypotheses, best first.
        """
        from common.export.beam_sizes import check_n_best

        if max_length is not None and not 1 <= max_length <= self.max_decode_limit:
            raise UserError(f"max decode length {max_length}: expected 1..{self.max_decode_limit} "
                            "for this model")
        check_n_best(n_best, beam_size)
        lowercase = self.config.data.lowercase
        token_lists = tokenize_texts(list(texts), lowercase=lowercase) if texts else []
        results, good = screen_lines(texts, token_lists, self.max_source_tokens)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(good), desc="decoding", unit="sent")
        for start in range(0, len(good), batch_size):
            chunk = good[start : start + batch_size]
            outs = self.translate_tokens(
                [token_lists[i] for i in chunk], beam_size=beam_size, max_length=max_length,
                attention_layer=attention_layer, attention_head=attention_head, n_best=n_best,
            )
            for i, out in zip(chunk, outs):
                out.source = texts[i]
                results[i] = out
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        return results  # type: ignore[return-value]
