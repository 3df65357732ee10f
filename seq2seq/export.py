"""Exporting a translator run as a self-contained SavedModel, and translating with one.

`export_run(RUN_DIR, OUT_DIR)` writes a SavedModel that stock TensorFlow (or TensorFlow
Serving) runs without this project, Keras, keras-hub or tensorflow_text: tokenization
(`common.text.tokenize`), vocabulary lookup (the `Vocabulary` tables), decoding
(`common.decoding`'s `tf.while_loop`s), `<unk>` copying from the attention (as
`seq2seq.inference` does) and detokenization (`detokenize_tf`) are all in the graph.

Signatures:

- `serving_default(sentences (B,) tf.string)`: translated with the beam size and length chosen
  at export (`--beam-size`, `--max-decode-length`). A TensorFlow Serving client that sends
  only the text (`{"instances": ["..."]}`) calls this one.
- `translate_with_options(sentences, beam_size () int32, max_length () int32, n_best () int32)`.
  Beam search needs a Python beam size, so one search is compiled per size in `beam_sizes`
  (default 1..5) and `beam_size` picks one with nested `tf.cond`s (`common.export.beam_sizes`,
  as in the captioner's export); another size is an `InvalidArgumentError` (HTTP 400 from the
  server). `max_length` is a tensor (the output width `T`), at most the model's limit;
  `n_best` (1..beam_size) is how many hypotheses `N` to return. A tf.function with an input
  signature cannot have default values, so the export-time values (`n_best` 1) are written to
  `assets.extra/serving_input_defaults.json`, which `seq2seq serve` reads: its requests may
  leave them out. Stock TensorFlow Serving does not read that file and needs all four.

The functions are traced with `autograph=False`: AutoGraph would turn `max_length or ...`
inside the models into a `tf.cond` on an int32 tensor, which fails inside a branch.

Both return `translations (B,)`, `tokens (B, T)` (padded with ""), `lengths (B,)` (tokens in
`tokens`), `scores (B,)` (sum of log-probabilities), `finished (B,)` (whether `<end>` came
within `max_length`), `attention (B, T, S)` (over the source tokens, zero past each length),
`source_tokens (B, S)` (padded with ""), `source_lengths (B,)` and `copied (B, T)` (the output
positions whose `<unk>` was replaced by the most attended source token), all of the best
translation. `translate_with_options` adds the `N` best, best first (ranked by the
length-normalized score), each with the same copying: `n_best_translations (B, N)`,
`n_best_tokens (B, N, T)`, `n_best_lengths (B, N)`, `n_best_scores (B, N)`,
`n_best_normalized_scores (B, N)` and `n_best_finished (B, N)`; its first hypothesis is the
best translation.

A pointer-generator (`--copy`) computes its copy ids from the source strings in the graph
(`seq2seq.copying.copy_ids_tf`, the same ids as in-process) and maps an extended output id
`V + s` to the source token at `s`. A model without attention (`seq2seq-noattn`) returns an
empty `attention (B, T, 0)` and copies no `<unk>`; `export_info.json` records `attention` and
`copy`.

Not in the graph: Unicode NFKC normalization (core TensorFlow has no op for it). Clients
should send NFKC text; `seq2seq translate` normalizes before calling the SavedModel. Empty
sentences and sentences longer than the model accepts fail the whole call with an
`InvalidArgumentError` naming the limit (the server then retries the others of a merged batch).

Dimensions: `B` batch, `T` target steps, `S` source steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from common.decoding import beam_search, greedy_decode
from common.errors import UserError
from common.export import savedmodel
from common.export.beam_sizes import (
    UNFILLED_SCORE,
    check_export_options,
    check_n_best,
    dispatch_n_best,
    graph_checks,
    request_options,
)
from common.text import Vocabulary, detokenize_tf, normalize, tokenize, tokenize_texts
from seq2seq.copying import copy_ids_tf
from seq2seq.inference import Translation, TranslationHypothesis, Translator, screen_lines

KIND = "seq2seq.translator"
WHAT = "an exported translator (make one with `seq2seq export RUN_DIR OUT_DIR`)"
OPTIONS_SIGNATURE = "translate_with_options"
DEFAULT_BEAM_SIZES = (1, 2, 3, 4, 5)
OUTPUTS = ("translations", "tokens", "lengths", "scores", "finished", "attention",
           "source_tokens", "source_lengths", "copied")
N_BEST_OUTPUTS = ("n_best_translations", "n_best_tokens", "n_best_lengths", "n_best_scores",
                  "n_best_normalized_scores", "n_best_finished")


class TranslatorModule(tf.Module):
    """A translator with its vocabularies and text processing, as one exportable module.

    Args:
        model: a built translator (`seq2seq.models.build_model`) with its weights.
        source_vocab: the source `Vocabulary` (its lookup table goes into the SavedModel).
        target_vocab: the target `Vocabulary`.
        lowercase: whether the run lowercased its text.
        max_source_tokens: the longest source accepted.
        max_decode_length: the default `max_length`.
        max_length_limit: the largest `max_length` accepted (the Transformer's positions).
        beam_sizes: the beam sizes compiled into the graph.
        default_beam_size: the beam size of `serving_default` and the served default.
        length_penalty: the GNMT length penalty of beam search.
        attention_layer: Transformer: the decoder layer whose cross-attention is returned.
        attention_head: Transformer: that head, or None for the average of the heads.

    Example:
    >>> module = TranslatorModule.from_translator(Translator.from_run_dir("runs/dates"))  # doctest: +SKIP
    >>> module.serving_default(tf.constant(["25/11/2026"]))["translations"]  # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'2026-11-25'], dtype=object)>
    """

    def __init__(
        self,
        model: Any,
        source_vocab: Vocabulary,
        target_vocab: Vocabulary,
        lowercase: bool,
        max_source_tokens: int,
        max_decode_length: int,
        max_length_limit: int,
        beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
        default_beam_size: int = 1,
        length_penalty: float = 0.6,
        attention_layer: int = -1,
        attention_head: int | None = None,
    ):
        super().__init__(name="translator")
        beam_sizes = check_export_options(beam_sizes, default_beam_size, max_decode_length,
                                          max_length_limit)
        self.model = model
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.lowercase = bool(lowercase)
        self.max_source_tokens = int(max_source_tokens)
        self.max_decode_length = int(max_decode_length)
        self.max_length_limit = int(max_length_limit)
        self.beam_sizes = beam_sizes
        self.default_beam_size = int(default_beam_size)
        self.length_penalty = float(length_penalty)
        self.attention_layer = attention_layer
        self.attention_head = attention_head
        model.make_step(attention_layer=attention_layer, attention_head=attention_head)  # checks
        self.serving_default = tf.function(
            self._serve_defaults, autograph=False,
            input_signature=[tf.TensorSpec([None], tf.string, name="sentences")],
        )
        self.translate_with_options = tf.function(
            self._serve_options, autograph=False,
            input_signature=[
                tf.TensorSpec([None], tf.string, name="sentences"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.int32, name="max_length"),
                tf.TensorSpec([], tf.int32, name="n_best"),
            ],
        )

    @classmethod
    def from_translator(cls, translator: Translator, **kwargs: Any) -> TranslatorModule:
        """The module for an in-process `Translator` (same model, vocabularies and limits)."""
        config = translator.config
        kwargs.setdefault("max_decode_length", config.model.max_decode_length)
        return cls(translator.model, translator.source_vocab, translator.target_vocab,
                   lowercase=config.data.lowercase, max_source_tokens=translator.max_source_tokens,
                   max_length_limit=translator.max_decode_limit, **kwargs)

    # -- the graph -------------------------------------------------------------------------

    def _serve_defaults(self, sentences):
        return self._translate(sentences, self.default_beam_size,
                               tf.constant(self.max_decode_length, tf.int32))

    def _serve_options(self, sentences, beam_size, max_length, n_best):
        return self._translate(sentences, beam_size, max_length, n_best)

    def _decode(self, source, source_copy, beam_size: int, max_length, n_best: int):
        """`inference.decode_batch` for a `max_length` tensor: tokens `(B, N, T)`, lengths,
        scores, normalized scores `(B, N)`, attention `(B, N, T, S)`, finished `(B, N)`."""
        vocab, model = self.target_vocab, self.model
        step = model.make_step(attention_layer=self.attention_layer,
                               attention_head=self.attention_head)
        batch = tf.shape(source)[0]
        options = {"source_copy": source_copy} if source_copy is not None else {}
        if hasattr(model, "max_length"):
            # The Transformer's cache size must be a Python int: build the largest one and
            # cut it to `max_length` steps, the cache `decode_batch` builds in-process.
            state = model.initial_state(source, max_length=self.max_length_limit, **options)
            state = dict(state, self_cache=tuple(
                cache[:, :, :max_length] for cache in state["self_cache"]))
        else:
            state = model.initial_state(source, **options)
        if beam_size == 1:
            decoded = greedy_decode(step, state, batch, vocab.start_id, vocab.end_id, max_length)
        else:
            decoded = beam_search(step, state, batch, vocab.start_id, vocab.end_id, max_length,
                                  beam_size, length_penalty=self.length_penalty, n_best=n_best)
        return (decoded.tokens, decoded.lengths, decoded.scores, decoded.normalized_scores,
                tf.cast(decoded.attention, tf.float32), decoded.finished)

    def _translate(self, sentences, beam_size, max_length, n_best=None) -> dict[str, tf.Tensor]:
        """The whole pipeline: `(B,)` text -> the outputs described in the module doc (the
        `n_best_*` ones when `n_best`, a tensor, is given)."""
        words = tokenize(sentences, lowercase=self.lowercase)
        n_source = tf.cast(words.row_lengths(), tf.int32)
        checks = [
            tf.debugging.assert_positive(
                n_source, message="empty sentence: nothing to translate"),
            tf.debugging.assert_less_equal(
                n_source, self.max_source_tokens,
                message=f"a sentence is longer than {self.max_source_tokens} tokens, the most "
                        "this model accepts"),
            *graph_checks(beam_size, max_length, self.beam_sizes, self.max_length_limit,
                          n_best),
        ]
        with tf.control_dependencies(checks):
            batch = tf.shape(sentences)[0]
            longest = tf.reduce_max(tf.concat([n_source, [1]], 0))
            # As `inference.pad_batch`: S rounded up to a multiple of 8 (the same numbers).
            width = tf.minimum((longest + 7) // 8 * 8,
                               tf.maximum(longest, self.max_source_tokens))
            source = self.source_vocab.encode_tf(words).to_tensor(0, shape=[batch, width])
            source_tokens = words.to_tensor("", shape=[batch, width])
        source_copy = None
        if getattr(self.model, "copy", False):  # the pointer-generator's extended ids
            source_copy = copy_ids_tf(source_tokens, self.target_vocab)
        if n_best is None:
            decoded = self._decode(source, source_copy, beam_size, max_length, 1)
        else:
            decoded = dispatch_n_best(
                beam_size, n_best, self.beam_sizes,
                lambda size, k: self._decode(source, source_copy, size, max_length, k))
        ids, lengths, scores, normalized, attention, finished = decoded
        outputs = self._postprocess(ids[:, 0], lengths[:, 0], scores[:, 0], attention[:, 0],
                                    finished[:, 0], source_tokens, n_source)
        if n_best is not None:
            outputs.update(self._n_best(decoded, source_tokens, n_source))
        return outputs

    def _n_best(self, decoded, source_tokens, n_source) -> dict[str, tf.Tensor]:
        """The `n_best_*` outputs: every hypothesis of `decoded` `(B, N, ...)`, best first,
        through the same `_postprocess` (each with the source of its sentence)."""
        ids, lengths, scores, normalized, attention, finished = decoded
        shape = tf.shape(ids)  # (B, N, T)
        k = shape[1]

        def rows(t):  # (B, N, ...) -> (B * N, ...), keeping the static trailing dimensions
            flat = tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
            flat.set_shape([None, *t.shape[2:]])
            return flat

        flat = self._postprocess(rows(ids), rows(lengths), rows(scores), rows(attention),
                                 rows(finished), tf.repeat(source_tokens, k, axis=0),
                                 tf.repeat(n_source, k, axis=0))
        return {
            "n_best_translations": tf.reshape(flat["translations"], shape[:2]),
            "n_best_tokens": tf.reshape(flat["tokens"], shape),
            "n_best_lengths": tf.reshape(flat["lengths"], shape[:2]),
            "n_best_scores": scores,
            "n_best_normalized_scores": normalized,
            "n_best_finished": finished,
        }

    def _postprocess(self, ids, lengths, scores, attention, finished, source_tokens, n_source):
        vocab = self.target_vocab
        steps = tf.shape(ids)[1]
        n = lengths - tf.cast(finished, tf.int32)  # drop <end>
        within = tf.range(steps)[None, :] < n[:, None]
        size = len(vocab)
        pointed = ids >= size  # a pointer-generator's extended id: the source token at id - V
        words = tf.gather(tf.constant(vocab.tokens, tf.string),
                          tf.where(pointed, vocab.unk_id, ids))
        width = tf.shape(source_tokens)[1]
        words = tf.where(pointed, tf.gather(source_tokens, tf.clip_by_value(
            ids - size, 0, width - 1), batch_dims=1), words)
        if attention.shape[-1] == 0:  # no attention (seq2seq-noattn): nothing to copy from
            copied = tf.zeros_like(within)
        else:
            # <unk> -> the source token attended to most (padded keys have zero weight).
            copied = within & tf.equal(ids, vocab.unk_id) & (n_source[:, None] > 0)
            best = tf.argmax(attention, axis=-1, output_type=tf.int32)
            words = tf.where(copied, tf.gather(source_tokens, best, batch_dims=1), words)
        special = (tf.equal(ids, vocab.pad_id) | tf.equal(ids, vocab.start_id)
                   | tf.equal(ids, vocab.end_id))
        keep = within & (copied | ~special)
        kept = tf.ragged.boolean_mask(words, keep)
        return {
            "translations": detokenize_tf(kept),
            "tokens": kept.to_tensor("", shape=tf.shape(ids)),
            "lengths": tf.cast(kept.row_lengths(), tf.int32),
            "scores": scores,
            "finished": finished,
            "attention": attention * tf.cast(within, attention.dtype)[:, :, None],
            "source_tokens": source_tokens,
            "source_lengths": n_source,
            "copied": copied,
        }

    def info(self) -> dict[str, Any]:
        """What `export_info.json` records (the CLI reads the limits from it)."""
        return {
            "lowercase": self.lowercase, "max_source_tokens": self.max_source_tokens,
            "max_decode_length": self.max_decode_length,
            "max_length_limit": self.max_length_limit, "beam_sizes": list(self.beam_sizes),
            "default_beam_size": self.default_beam_size,
            "length_penalty": self.length_penalty, "attention_layer": self.attention_layer,
            "attention_head": self.attention_head,
            "attention": bool(getattr(self.model, "has_attention", True)),
            "copy": bool(getattr(self.model, "copy", False)),
            "source_vocab_size": len(self.source_vocab),
            "target_vocab_size": len(self.target_vocab), "outputs": list(OUTPUTS),
            "n_best_outputs": list(N_BEST_OUTPUTS),
        }


def export_translator(
    translator: Translator,
    out_dir: str | os.PathLike,
    beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
    default_beam_size: int = 1,
    max_decode_length: int | None = None,
    attention_layer: int = -1,
    attention_head: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `translator` as a SavedModel into `out_dir` (see the module doc for signatures).

    Returns:
        The export directory.
    """
    kwargs: dict[str, Any] = {}
    if max_decode_length:
        kwargs["max_decode_length"] = max_decode_length
    module = TranslatorModule.from_translator(
        translator, beam_sizes=beam_sizes, default_beam_size=default_beam_size,
        attention_layer=attention_layer, attention_head=attention_head, **kwargs,
    )
    return savedmodel.save_decoding_module(module, out_dir, KIND, OPTIONS_SIGNATURE,
                                           overwrite=overwrite)


def export_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """`seq2seq export RUN_DIR OUT_DIR`: load the run's latest checkpoint and export it.

    Keyword arguments are those of `export_translator`.

    Example:
    >>> export_run("runs/dates", "export/dates", beam_sizes=(1, 4))  # doctest: +SKIP
    PosixPath('export/dates')
    """
    return export_translator(Translator.from_run_dir(run_dir), out_dir, **kwargs)


class ExportedTranslator:
    """`Translator.translate` on an exported SavedModel (loaded with `tf.saved_model.load`).

    Args:
        export_dir: a directory written by `export_run`.

    Raises:
        UserError: `export_dir` is not a SavedModel, or is one of another kind (a captioner).
    """

    def __init__(self, export_dir: str | os.PathLike):
        self.info = savedmodel.require_kind(export_dir, KIND, WHAT)
        self.export_dir = Path(export_dir)
        self.loaded = tf.saved_model.load(str(export_dir))
        self.signature = self.loaded.signatures[savedmodel.options_signature(self.info)]
        self.takes_n_best = "n_best" in self.signature.structured_input_signature[1]
        self.max_source_tokens = int(self.info["max_source_tokens"])
        self.beam_sizes = tuple(self.info["beam_sizes"])

    def translate(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        batch_size: int = 64,
        max_length: int | None = None,
        n_best: int | None = None,
    ) -> list[Translation]:
        """As `Translator.translate`: bad lines get a `Translation` with `error` set.

        Text is NFKC-normalized here (the graph cannot), then sent in batches.
        """
        beam_size, max_length = request_options(self.info, beam_size, max_length)
        check_n_best(n_best, beam_size)
        if n_best and n_best > 1 and not self.takes_n_best:
            raise UserError(f"{self.export_dir} was exported without n-best outputs; export "
                            "the run again to get several translations per sentence")
        token_lists = tokenize_texts(list(texts), lowercase=bool(self.info["lowercase"]))
        results, good = screen_lines(texts, token_lists, self.max_source_tokens)
        for start in range(0, len(good), batch_size):
            chunk = good[start : start + batch_size]
            inputs = {
                "sentences": tf.constant([normalize(texts[i]) for i in chunk], tf.string),
                "beam_size": tf.constant(beam_size, tf.int32),
                "max_length": tf.constant(max_length, tf.int32),
            }
            if self.takes_n_best:
                inputs["n_best"] = tf.constant(n_best or 1, tf.int32)
            outputs = {name: value.numpy() for name, value in self.signature(**inputs).items()}
            for row, i in enumerate(chunk):
                results[i] = _translation(texts[i], outputs, row, max_length, n_best)
        return results  # type: ignore[return-value]


def _translation(text: str, outputs: dict[str, np.ndarray], row: int,
                 max_length: int, n_best: int | None = None) -> Translation:
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
        result.n_best = []
        for k in range(n_best):
            score = float(outputs["n_best_scores"][row, k])
            if score <= UNFILLED_SCORE:
                continue
            length = int(outputs["n_best_lengths"][row, k])
            result.n_best.append(TranslationHypothesis(
                outputs["n_best_translations"][row, k].decode("utf-8"),
                [t.decode("utf-8") for t in outputs["n_best_tokens"][row, k, :length]],
                score, float(outputs["n_best_normalized_scores"][row, k]),
                bool(outputs["n_best_finished"][row, k])))
    return result
