"""Exporting a translator run as a self-contained SavedModel, and translating with one.

`export_run(RUN_DIR, OUT_DIR)` writes a SavedModel that stock TensorFlow (or TensorFlow
Serving) runs without this project, Keras, keras-hub or (for words) tensorflow_text: tokenization
(`common.text.tokenize`), vocabulary lookup (the `Vocabulary` tables), decoding
(`common.decoding`'s `tf.while_loop`s), `<unk>` copying from the attention (as
`seq2seq.inference` does) and detokenization (`detokenize_tf`) are all in the graph.

Signatures:

- `serving_default(sentences (B,) tf.string)`: translated with the beam size and length chosen
  at export (`--beam-size`, `--max-decode-length`). A TensorFlow Serving client that sends
  only the text (`{"instances": ["..."]}`) calls this one.
- `translate_with_options(sentences, beam_size () int32, max_length () int32, n_best () int32,
  no_repeat_ngram () int32)`. Greedy decoding serves size 1 and one beam search, the size a
  tensor, every other size in `beam_sizes` (default 1..5), a `tf.cond` between the two
  (`common.export.beam_sizes`, as in the captioner's export); another size is an
  `InvalidArgumentError` (HTTP 400 from the server). `max_length` is a tensor (the output
  width `T`), at most the model's limit;
  `n_best` (1..beam_size) is how many hypotheses `N` to return; `no_repeat_ngram` the n-gram
  size no translation repeats (0: off; `common.decoding`). A tf.function with an input
  signature cannot have default values, so the export-time values (`n_best` 1,
  `no_repeat_ngram` 0) are written to `assets.extra/serving_input_defaults.json`, which
  `seq2seq serve` reads: its requests may leave them out. Stock TensorFlow Serving does not
  read that file and needs all five.

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

A subword run (`--vocab sentencepiece`, `seq2seq.vocabularies`) has SentencePiece in the graph
instead of the word tokenizer and detokenizer: sentences -> ids by `SubwordVocabulary.encode_tf`
(its source tokens are the pieces of those ids), the kept output ids -> text by `decode_tf`
(`TranslatorModule.join`); no `<unk>` copying. Those are tensorflow-text ops: such an export
loads after `import tensorflow_text` (`export_info.json` lists it under `op_libraries`, and
`common.export.savedmodel.load` imports it), and keeps its source model in `assets.extra/`
for the client's length check.

Not in the graph: Unicode NFKC normalization (core TensorFlow has no op for it). Clients
should send NFKC text; `seq2seq translate` normalizes before calling the SavedModel. Empty
sentences and sentences longer than the model accepts fail the whole call with an
`InvalidArgumentError` naming the limit (the server then retries the others of a merged batch).

Dimensions: `B` batch, `T` target steps, `S` source steps.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from common.config import to_dict
from common.decoding.defaults import BEAM_SIZE, LENGTH_PENALTY
from common.errors import UserError
from common.export.module import DEFAULT_BEAM_SIZES, DecodingModule, ExportedModel
from common.text import Vocabulary, normalize, tokenize, tokenize_texts
from seq2seq.copying import copy_ids_tf
from seq2seq.inference import (
    Translation,
    Translator,
    chunks,
    initial_state,
    screen_lines,
    translation_from_outputs,
)
from seq2seq.vocabularies import Vocabularies

KIND = "seq2seq.translator"
WHAT = "an exported translator (make one with `seq2seq export RUN_DIR OUT_DIR`)"
OPTIONS_SIGNATURE = "translate_with_options"
SOURCE_SUBWORDS = "vocab.source.model"  # in `assets.extra/` of a subword export


class TranslatorModule(DecodingModule):
    """A translator with its vocabularies and text processing, as one exportable module.

    `Translator.translate` calls its `predict` on tokens; the export saves its signatures
    (see the module doc and `common.export.module.DecodingModule`).

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
        copy_unknown: replace an output `<unk>` by the most attended source token (always in
            an export; `Translator.translate_tokens(copy_unknown=False)` turns it off). Words
            only: subwords have no `<unk>` to replace in practice.
        source_subwords: a subword run's source `SubwordVocabulary` (None: words): sentences
            -> ids in the graph, and `source_vocab` holds its pieces.
        target_subwords: its target `SubwordVocabulary`: ids -> text in the graph.

    Example:
    >>> module = TranslatorModule.from_translator(Translator.from_run_dir("runs/dates"))  # doctest: +SKIP
    >>> module.serving_default(tf.constant(["25/11/2026"]))["translations"]  # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'2026-11-25'], dtype=object)>
    """

    KIND = KIND
    WHAT = WHAT
    SEVERAL = "translations per sentence"
    INPUT = "sentences"
    TEXT = "translations"
    OPTIONS_SIGNATURE = OPTIONS_SIGNATURE
    OUTPUTS = ("translations", "tokens", "lengths", "scores", "finished", "attention",
               "source_tokens", "source_lengths", "copied")

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
        default_beam_size: int = BEAM_SIZE,
        length_penalty: float = LENGTH_PENALTY,
        attention_layer: int = -1,
        attention_head: int | None = None,
        copy_unknown: bool = True,
        source_subwords: Any = None,
        target_subwords: Any = None,
    ):
        self.model = model
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.lowercase = bool(lowercase)
        self.max_source_tokens = int(max_source_tokens)
        self.attention_layer = attention_layer
        self.attention_head = attention_head
        self.copy_unknown = bool(copy_unknown) and target_subwords is None
        self.source_subwords = source_subwords
        self.target_subwords = target_subwords
        for subwords in {id(v): v for v in (source_subwords, target_subwords) if v}.values():
            subwords.tokenizer  # noqa: B018 - made now, so the SavedModel tracks it
        super().__init__("translator", target_vocab, max_decode_length, max_length_limit,
                         beam_sizes, default_beam_size, length_penalty)
        model.make_step(attention_layer=attention_layer, attention_head=attention_head)  # checks

    @classmethod
    def from_translator(cls, translator: Translator, **kwargs: Any) -> TranslatorModule:
        """The module for an in-process `Translator` (same model, vocabularies and limits)."""
        config = translator.config
        kwargs.setdefault("max_decode_length", config.model.max_decode_length)
        kwargs.setdefault("length_penalty", config.model.length_penalty)
        vocabs = translator.vocabularies
        module = cls(translator.model, vocabs.source, vocabs.target,
                     lowercase=config.data.lowercase,
                     max_source_tokens=translator.max_source_tokens,
                     max_length_limit=translator.max_decode_limit,
                     source_subwords=vocabs.source_subwords,
                     target_subwords=vocabs.target_subwords, **kwargs)
        # What `seq2seq evaluate EXPORT` reads the references with (the run's data settings);
        # JSON text, which `tf.Module` keeps as it is (a dict it would wrap for tracking).
        module.run_config_json = json.dumps(to_dict(config))
        checkpoint = getattr(translator, "checkpoint", None)  # absolute: read from anywhere
        module.checkpoint = None if checkpoint is None else os.path.abspath(checkpoint)
        return module

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike, checkpoint: str | None = None,
                     **kwargs: Any) -> TranslatorModule:
        return cls.from_translator(Translator.from_run_dir(run_dir, checkpoint), **kwargs)

    def read_inputs(self, sentences) -> tf.RaggedTensor:
        """`(B,)` text -> `(B, None)` tokens (words, or the pieces of the SentencePiece ids),
        failing the call for an empty sentence or one longer than the model accepts."""
        if self.source_subwords is None:
            words = tokenize(sentences, lowercase=self.lowercase)
        else:
            ids = self.source_subwords.encode_tf(sentences)
            words = tf.gather(tf.constant(self.source_vocab.tokens, tf.string), ids)
        n_source = tf.cast(words.row_lengths(), tf.int32)
        checks = [
            tf.debugging.assert_positive(
                n_source, message="empty sentence: nothing to translate"),
            tf.debugging.assert_less_equal(
                n_source, self.max_source_tokens,
                message=f"a sentence is longer than {self.max_source_tokens} tokens, the most "
                        "this model accepts"),
        ]
        with tf.control_dependencies(checks):
            return tf.nest.map_structure(tf.identity, words, expand_composites=True)

    def prepare(self, words):
        """Tokens `(B, None)` -> `((source (B, S), copy ids or None), rows)`."""
        n_source = tf.cast(words.row_lengths(), tf.int32)
        batch = words.nrows(out_type=tf.int32)
        longest = tf.reduce_max(tf.concat([n_source, [1]], 0))
        # As `inference.pad_batch`: S rounded up to a multiple of 8 (the same numbers).
        width = tf.minimum((longest + 7) // 8 * 8, tf.maximum(longest, self.max_source_tokens))
        source = self.source_vocab.encode_tf(words).to_tensor(0, shape=[batch, width])
        source_tokens = words.to_tensor("", shape=[batch, width])
        source_copy = None
        if getattr(self.model, "copy", False):  # the pointer-generator's extended ids
            source_copy = copy_ids_tf(source_tokens, self.target_vocab)
        return (source, source_copy), {"source_tokens": source_tokens, "n_source": n_source}

    def search_inputs(self, search, max_length):
        source, source_copy = search
        step = self.model.make_step(attention_layer=self.attention_layer,
                                    attention_head=self.attention_head)
        # A growing self-attention cache: each step attends over, writes and reorders only
        # the positions decoded so far (the module runs in TensorFlow graphs, never XLA).
        return step, initial_state(self.model, source, source_copy, max_length,
                                   self.max_length_limit, growing=True), tf.shape(source)[0]

    def words(self, decoded, within, rows):
        """Extended ids mapped to the source token they point to; `<unk>` replaced by the
        source token attended to most (Luong et al. 2015), unless the model has no attention."""
        ids, attention, vocab = decoded.tokens, decoded.attention, self.target_vocab
        source_tokens, n_source = rows["source_tokens"], rows["n_source"]
        size = len(vocab)
        pointed = ids >= size  # a pointer-generator's extended id: the source token at id - V
        words = tf.gather(tf.constant(vocab.tokens, tf.string),
                          tf.where(pointed, vocab.unk_id, ids))
        width = tf.shape(source_tokens)[1]
        words = tf.where(pointed, tf.gather(source_tokens, tf.clip_by_value(
            ids - size, 0, width - 1), batch_dims=1), words)
        if attention.shape[-1] == 0 or not self.copy_unknown:  # nothing to copy from
            return words, tf.zeros_like(within)
        # <unk> -> the source token attended to most (padded keys have zero weight).
        copied = within & tf.equal(ids, vocab.unk_id) & (n_source[:, None] > 0)
        best = tf.argmax(attention, axis=-1, output_type=tf.int32)
        return tf.where(copied, tf.gather(source_tokens, best, batch_dims=1), words), copied

    def join(self, kept, ids, keep):
        """Subwords: the SentencePiece text of the kept ids; words: joined (`detokenize_tf`)."""
        if self.target_subwords is None:
            return super().join(kept, ids, keep)
        return self.target_subwords.decode_tf(tf.where(keep, ids, self.target_vocab.pad_id))

    def extra_outputs(self, decoded, within, copied, rows):
        attention = decoded.attention
        return {"attention": attention * tf.cast(within, attention.dtype)[:, :, None],
                "source_tokens": rows["source_tokens"], "source_lengths": rows["n_source"],
                "copied": copied}

    def family_info(self) -> dict[str, Any]:
        return {
            "lowercase": self.lowercase, "max_source_tokens": self.max_source_tokens,
            "attention_layer": self.attention_layer, "attention_head": self.attention_head,
            "attention": bool(getattr(self.model, "has_attention", True)),
            "copy": bool(getattr(self.model, "copy", False)),
            "source_vocab_size": len(self.source_vocab),
            "target_vocab_size": len(self.target_vocab),
            "vocab": "word" if self.source_subwords is None else "sentencepiece",
            # The SentencePiece ops are tensorflow-text's: a loader imports it first.
            "op_libraries": [] if self.source_subwords is None else ["tensorflow_text"],
            **({"run_config": json.loads(self.run_config_json), "checkpoint": self.checkpoint}
               if getattr(self, "run_config_json", None) is not None else {}),
        }

    def warmup_input(self) -> str:
        """A one-word sentence (an `<unk>` where the vocabulary lacks it) for the warm-up
        requests: within every model's source length."""
        return "hello"

    def extra_files(self) -> dict[str, bytes]:
        """A subword export keeps its source SentencePiece model, so that a client counts the
        pieces of a sentence as the graph does."""
        if self.source_subwords is None:
            return {}
        return {SOURCE_SUBWORDS: self.source_subwords.proto}


OUTPUTS = TranslatorModule.OUTPUTS
N_BEST_OUTPUTS = TranslatorModule.n_best_outputs()


#: `seq2seq export RUN_DIR OUT_DIR`: load the run's latest checkpoint and export it, e.g.
#: `export_run("runs/dates", "export/dates", beam_sizes=(1, 4))`.
export_run = TranslatorModule.export_run


class ExportedTranslator(ExportedModel):
    """`Translator.translate` on an export written by `export_run` (see `ExportedModel`;
    a SavedModel of a captioner is a `UserError`)."""

    MODULE = TranslatorModule

    @property
    def max_source_tokens(self) -> int:
        return int(self.info["max_source_tokens"])

    @property
    def checkpoint(self) -> str | None:
        """The weights exported: the checkpoint's absolute path (relative to where the export
        was made in an export made before; None in an older one)."""
        return self.info.get("checkpoint")

    @functools.cached_property
    def config(self) -> Any:
        """The run's `seq2seq.config.RunConfig`, its longest output the export's default (what
        `seq2seq evaluate` reads the references with); exports made before it was recorded
        are a one-line `UserError`."""
        import dataclasses

        from common.config import from_dict
        from seq2seq.config import RunConfig

        if "run_config" not in self.info:
            raise UserError(f"{self.export_dir} was exported before exports recorded their "
                            "run's settings; export the run again to evaluate it")
        config = from_dict(RunConfig, self.info["run_config"])
        return dataclasses.replace(config, model=dataclasses.replace(
            config.model, max_decode_length=int(self.info["max_decode_length"]),
            length_penalty=float(self.info["length_penalty"])))

    @functools.cached_property
    def _subwords(self) -> Vocabularies | None:
        """A subword export's source vocabulary (None: words)."""
        if self.info.get("vocab", "word") == "word":
            return None
        from common.export.savedmodel import EXTRA_DIR
        from common.text.subwords import SubwordVocabulary

        subwords = SubwordVocabulary.load(self.export_dir / EXTRA_DIR / SOURCE_SUBWORDS)
        return Vocabularies.of_subwords(subwords, subwords)

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        """The tokens the graph makes of `texts` (to screen them as `Translator` does)."""
        if self._subwords is None:
            return tokenize_texts(texts, lowercase=bool(self.info["lowercase"]))
        return self._subwords.tokenize(texts)

    def translate(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        batch_size: int = 64,
        max_length: int | None = None,
        n_best: int | None = None,
        no_repeat_ngram: int = 0,
        progress: bool = False,
        length_penalty: float | None = None,
        attention_layer: int = -1,
        attention_head: int | None = None,
    ) -> list[Translation]:
        """As `Translator.translate`: bad lines get a `Translation` with `error` set (an
        export made before the `no_repeat_ngram` input refuses n > 0 in one line).

        Text is NFKC-normalized here (the graph cannot), then sent in batches (`progress`: a
        progress bar). The length penalty and the attention returned were chosen at export:
        `length_penalty` other than the export's, or attention options other than the
        defaults, are a one-line `UserError`.
        """
        exported_penalty = float(self.info["length_penalty"])
        if length_penalty is not None and float(length_penalty) != exported_penalty:
            raise UserError(f"length penalty {length_penalty}: this export searches with "
                            f"{exported_penalty:g}, chosen at export (`seq2seq export` takes "
                            "the run's; train --length-penalty sets it)")
        if attention_layer != -1 or attention_head is not None:
            raise UserError("--attention-layer/--attention-head: an export returns the "
                            "attention chosen at export time; give them to `seq2seq export`")
        beam_size, max_length = self._options(beam_size, max_length, n_best, no_repeat_ngram)
        token_lists = self._tokenize(list(texts))
        results, good = screen_lines(texts, token_lists, self.max_source_tokens)
        for chunk in chunks(good, batch_size, progress,
                            [len(tokens) for tokens in token_lists]):
            outputs = self._run([normalize(texts[i]) for i in chunk], beam_size, max_length,
                                n_best, no_repeat_ngram)
            for row, i in enumerate(chunk):
                results[i] = translation_from_outputs(texts[i], outputs, row, max_length,
                                                      n_best)
        return results  # type: ignore[return-value]
