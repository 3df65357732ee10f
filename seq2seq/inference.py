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
above. A model without attention (`seq2seq-noattn`) cannot copy: its `<unk>`s stay. Neither
applies to a subword run (`seq2seq.vocabularies`): its tokens are SentencePiece pieces, and
its text is SentencePiece's decoding of the ids.

Dimensions: `B` batch, `K` hypotheses, `S` source steps, `T` target steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from common.config import from_dict, load_json
from common.decoding import Decoded, default_method, make_strategy
from common.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY
from common.decoding.hypothesis import Hypothesis
from common.errors import UserError
from common.outputs import rounded_weights
from common.text import Vocabulary, detokenize
from seq2seq.config import RunConfig
from seq2seq.models import build_model
from seq2seq.vocabularies import Vocabularies


class TranslationHypothesis(Hypothesis):
    """One of the n best translations of a beam (tokens after rare-word copying)."""

    OUTPUT = "translations"
    TEXT_KEY = "translation"

    as_json = Hypothesis.json


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
            out["attention"] = rounded_weights(self.attention)
        if self.error:
            out["error"] = self.error
        if self.warning:
            out["warning"] = self.warning
        if self.n_best is not None:
            out["n_best"] = [h.as_json() for h in self.n_best]
        return out


def chunks(indices: list[int], batch_size: int, progress: bool = False,
           lengths: Sequence[int] | None = None) -> Iterator[list[int]]:
    """`indices` in chunks of `batch_size`, with progress on stderr when `progress`, advanced
    as each chunk is done: tqdm's bar on a terminal, a plain line each tenth of the sentences
    elsewhere (a log file; `common.progress`).

    With `lengths` (`lengths[i]`: index `i`'s source length in tokens) the indices go longest
    first, ties in their order: a batch decodes until its longest output ends, and sentences
    of one length end at about one step, so none waits long for another (CTranslate2 and
    OpenNMT sort their batches so too). The caller places each result by its index.
    """
    if lengths is not None:
        indices = sorted(indices, key=lambda i: -lengths[i])
    bar = None
    if progress:
        from common.progress import progress_bar

        bar = progress_bar(len(indices), "decoding", "sentences")
    try:
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            yield chunk
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()


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
    beam_size: int = BEAM_SIZE,
    length_penalty: float = LENGTH_PENALTY,
    attention_layer: int = -1,
    attention_head: int | None = None,
    source_copy: Any = None,
    n_best: int = 1,
) -> Decoded:
    """Greedy decoding (`beam_size == 1`) or beam search of `source (B, S)`, ids only (the
    search `TranslatorModule` runs, without its postprocess).

    `source_copy (B, S)` is the copy ids of a copying model (`seq2seq.copying.copy_ids`); its
    tokens may then be extended ids `>= V`. `n_best` (1..`beam_size`) hypotheses are kept.

    Returns:
        A `Decoded` with `K = n_best`, best first: tokens `(B, K, T)`, attention `(B, K, T, S)`
        (`(B, K, T, 0)` for a model without attention).
    """
    source = tf.convert_to_tensor(source, tf.int32)
    step = model.make_step(attention_layer=attention_layer, attention_head=attention_head)
    state = initial_state(model, source, source_copy, max_length, growing=True)
    strategy = make_strategy(default_method(beam_size), beam_size=beam_size,
                             length_penalty=length_penalty, n_best=n_best)
    return strategy(step, state, tf.shape(source)[0], start_id, end_id, max_length)


def initial_state(model: Any, source: Any, source_copy: Any, max_length: Any,
                  max_length_limit: int | None = None, growing: bool = False) -> Any:
    """The translator's decoding state for `source (B, S)` and `max_length` steps
    (`seq2seq.translator_base.Translator.decoding_state`; `growing`: the Transformer's
    self-attention cache grows step by step, in TensorFlow graphs, not under XLA)."""
    return model.decoding_state(source, max_length, source_copy, max_length_limit,
                                growing=growing)


def translation_from_outputs(text: str, outputs: dict[str, np.ndarray], row: int,
                             max_length: int, n_best: int | None = None) -> Translation:
    """The `Translation` of `text` from one row of a `TranslatorModule`'s outputs (in process
    or from an export), with its `n_best` hypotheses when asked for."""
    n = int(outputs["lengths"][row])
    n_source = int(outputs["source_lengths"][row])
    finished = bool(outputs["finished"][row])
    # Decoded steps (output tokens plus dropped specials): every such row of attention sums
    # to 1 over the (never empty) source, the rows after it are zero.
    steps = int(np.count_nonzero(outputs["attention"][row].sum(-1) > 0))
    result = Translation(
        source=text,
        text=outputs["translations"][row].decode("utf-8"),
        tokens=[t.decode("utf-8") for t in outputs["tokens"][row, :n]],
        source_tokens=[t.decode("utf-8") for t in outputs["source_tokens"][row, :n_source]],
        score=float(outputs["scores"][row]),
        finished=finished,
        attention=(outputs["attention"][row, :steps, :n_source]
                   if outputs["attention"].shape[-1] else None),
        copied=[int(t) for t in np.flatnonzero(outputs["copied"][row])],
    )
    if not finished:
        result.warning = f"no <end> within {max_length} tokens; the output is cut there"
    elif not result.tokens:
        result.warning = "the model produced an empty translation"
    if n_best:
        result.n_best = TranslationHypothesis.n_best_from_outputs(outputs, row, n_best)
    return result


class Translator:
    """A trained translator with its vocabularies, ready to translate text.

    Args:
        model: a built translator (`seq2seq.models.build_model`) with its weights.
        source_vocab: the source `Vocabulary` (of a subword run: its pieces).
        target_vocab: the target `Vocabulary`.
        config: the run's `RunConfig`.
        source_subwords: a subword run's source `SubwordVocabulary` (None: words).
        target_subwords: its target `SubwordVocabulary` (the same object when shared).

    Example:
    >>> translator = Translator.from_run_dir("runs/dates")      # doctest: +SKIP
    >>> translator.translate(["25th of November 2026"])[0].text  # doctest: +SKIP
    '2026-11-25'
    """

    checkpoint: str | None = None  # the checkpoint `from_run_dir` restored

    def __init__(self, model: Any, source_vocab: Vocabulary, target_vocab: Vocabulary,
                 config: RunConfig, source_subwords: Any = None, target_subwords: Any = None):
        self.model = model
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.vocabularies = Vocabularies(source_vocab, target_vocab, source_subwords,
                                         target_subwords)
        self.config = config
        self._modules: dict[tuple, Any] = {}

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
    def from_run_dir(cls, run_dir: str | Path, checkpoint: str | None = None) -> Translator:
        """Loads `RUN_DIR/config.json`, its vocabularies and a checkpoint: `checkpoint` is
        "best", "last", a number or a path (`common.training.checkpoints.resolve_checkpoint`);
        None: the best when the run keeps one, else the last."""
        from common.training.checkpoints import restore_run_checkpoint

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
        vocabs = Vocabularies.load(run_dir, config.data)
        model = build_model(config.model, len(vocabs.source), len(vocabs.target),
                            shared_vocab=config.data.shared_vocab)
        dummy = {"source": np.ones((1, 2), np.int32), "target_in": np.ones((1, 2), np.int32)}
        model(dummy, training=False)
        translator = cls(model, vocabs.source, vocabs.target, config, vocabs.source_subwords,
                         vocabs.target_subwords)
        translator.checkpoint = restore_run_checkpoint(model, run_dir, checkpoint)
        return translator

    def module(self, attention_layer: int = -1, attention_head: int | None = None,
               copy_unknown: bool = True, length_penalty: float | None = None) -> Any:
        """The `seq2seq.export.TranslatorModule` for these options: the graph both the export
        and `translate` decode with (one per set of options, built on first use; the length
        penalty defaults to the run's).

        One module serves every head of a layer: its step reads the head from a variable set
        here, so drawing each head (`--all-heads`) traces the search once, not once per head.
        """
        if length_penalty is None:
            length_penalty = self.config.model.length_penalty
        if attention_head is not None:  # its range, in one line
            self.model.make_step(attention_layer=attention_layer, attention_head=attention_head)
        key = (attention_layer, attention_head is not None, copy_unknown, float(length_penalty))
        if key not in self._modules:
            from seq2seq.export import TranslatorModule

            head = None if attention_head is None else tf.Variable(
                attention_head, dtype=tf.int32, trainable=False, name="attention_head")
            self._modules[key] = TranslatorModule.from_translator(
                self, attention_layer=attention_layer, attention_head=head,
                copy_unknown=copy_unknown, length_penalty=float(length_penalty))
        module = self._modules[key]
        if attention_head is not None:
            module.attention_head.assign(attention_head)
        return module

    def translate_tokens(
        self,
        token_lists: Sequence[Sequence[str]],
        beam_size: int = BEAM_SIZE,
        max_length: int | None = None,
        attention_layer: int = -1,
        attention_head: int | None = None,
        copy_unknown: bool = True,
        n_best: int | None = None,
        length_penalty: float | None = None,
        no_repeat_ngram: int = 0,
    ) -> list[Translation]:
        """Translates already tokenized, valid sentences in one batch (with `n_best`, each
        `Translation.n_best` lists that many hypotheses, best first; `length_penalty`: beam
        search's, None for the run's; `no_repeat_ngram` n >= 1: no output repeats an n-gram
        of its tokens, `common.decoding`)."""
        from common.export.beam_sizes import check_n_best

        check_n_best(n_best, beam_size)
        max_length = max_length or self.config.model.max_decode_length
        module = self.module(attention_layer, attention_head, copy_unknown, length_penalty)
        tokens = tf.ragged.constant([list(t) for t in token_lists], dtype=tf.string,
                                    ragged_rank=1)
        outputs = module.predict(tokens, None, beam_size, max_length, n_best,
                                 no_repeat_ngram=no_repeat_ngram)
        return [translation_from_outputs(detokenize(t), outputs, row, max_length, n_best)
                for row, t in enumerate(token_lists)]

    def translate(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False,
                  **options: Any) -> list[Translation]:
        """Translates `texts`; bad lines get a `Translation` with `error` set, not an exception.

        Empty or whitespace-only lines and lines longer than `max_source_tokens` are errors;
        unknown words, emoji and control characters are tokenized and translated (unknown
        source words are `<unk>` to the model and may be copied to the output). `options` are
        those of `translate_tokens` (`beam_size`, `max_length`, `attention_layer`,
        `attention_head`, `length_penalty`, `no_repeat_ngram`, `n_best`: with it, each
        `Translation.n_best` lists that many hypotheses, best first).
        """
        from common.decoding.utils import check_no_repeat_ngram
        from common.export.beam_sizes import check_n_best

        max_length = options.get("max_length")
        if max_length is not None and not 1 <= max_length <= self.max_decode_limit:
            raise UserError(f"max decode length {max_length}: expected 1..{self.max_decode_limit} "
                            "for this model")
        check_n_best(options.get("n_best"), options.get("beam_size", BEAM_SIZE))
        check_no_repeat_ngram(options.get("no_repeat_ngram", 0))
        lowercase = self.config.data.lowercase
        token_lists = self.vocabularies.tokenize(list(texts), lowercase) if texts else []
        results, good = screen_lines(texts, token_lists, self.max_source_tokens)
        lengths = [len(tokens) for tokens in token_lists]
        for chunk in chunks(good, batch_size, progress, lengths):
            outs = self.translate_tokens([token_lists[i] for i in chunk], **options)
            for i, out in zip(chunk, outs):
                out.source = texts[i]
                results[i] = out
        return results  # type: ignore[return-value]


def open_model(path: str | Path, attention_layer: int = -1,
               attention_head: int | None = None, checkpoint: str | None = None) -> Any:
    """A `Translator` for a run directory, a `seq2seq.export.ExportedTranslator` for a
    SavedModel, a `seq2seq.ctranslate2_translator.CTranslate2Translator` for a CTranslate2
    export (all translate the same way); a `UserError` for anything else, or for attention
    options given with an export (they are chosen at export time)."""
    from common.export.ctranslate2 import is_ctranslate2
    from common.export.savedmodel import is_saved_model

    path = Path(path)
    if is_ctranslate2(path):  # before the run-directory check: it has a config.json of its own
        from seq2seq.ctranslate2_translator import CTranslate2Translator

        if attention_layer != -1 or attention_head is not None:
            raise UserError("--attention-layer/--attention-head: a CTranslate2 export returns "
                            "the attention chosen at export time; give them to `seq2seq "
                            "export`")
        if checkpoint is not None:
            raise UserError("--checkpoint: a CTranslate2 export holds the weights chosen at "
                            "export time; give it to `seq2seq export`")
        return CTranslate2Translator(path)
    if is_saved_model(path):
        from seq2seq.export import ExportedTranslator

        if attention_layer != -1 or attention_head is not None:
            raise UserError("--attention-layer/--attention-head: a SavedModel returns the "
                            "attention chosen at export time; give them to `seq2seq export`")
        if checkpoint is not None:
            raise UserError("--checkpoint: a SavedModel holds the weights chosen at export "
                            "time; give it to `seq2seq export`")
        return ExportedTranslator(path)
    if not (path / "config.json").is_file():
        raise UserError(f"{path} is not a translator run directory (no config.json) nor an "
                        "exported translator SavedModel (no saved_model.pb)")
    return Translator.from_run_dir(path, checkpoint)
