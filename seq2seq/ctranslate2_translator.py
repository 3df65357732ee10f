"""Translating with a CTranslate2 export, as with a SavedModel: the client and the servable.

`CTranslate2Translator(OUT_DIR)` reads a directory written by
`seq2seq.ctranslate2_export.export_ctranslate2` and translates as a SavedModel's
`seq2seq.export.ExportedTranslator` does: the same `Translation`s (`translate`), the same
signature outputs (`outputs`, from which `translate` builds them with
`translation_from_outputs`), the same REST contract when served (`servable`, `serve`).
`seq2seq translate`, `evaluate` and `serve` take the directory as they take a SavedModel.

This side does what the SavedModel's graph does around the model: tokenization (NFKC, words or
SentencePiece pieces), `<unk>` copied from the attention (Luong et al. 2015; words only),
detokenization, the `n_best` outputs and their ranking. CTranslate2 runs the model and the
search (`translate_batch`), mapped from this package's options:

- the beam size `K` (one of the export's `beam_sizes`) -> `beam_size` (1: greedy);
- `max_length` (at most the model's positions) -> `max_decoding_length`, with
  `min_decoding_length=0` and `return_end_token`: the same steps, `<end>` counted;
- the length penalty alpha, GNMT's `((5 + n) / 6) ** alpha`, is not CTranslate2's
  `n ** alpha`: CTranslate2 decodes with `length_penalty=0` and returns its `K` finished
  hypotheses (`num_hypotheses=K`; its best alone when alpha is 0 and one is asked for) with
  their sums of log-probabilities, ranked here by `score / ((5 + n) / 6) ** alpha` (finished
  before unfinished, as `common.decoding.beam`), `n` counting `<end>`;
- `n_best` (1..K) -> the first `n_best` of that ranking;
- `no_repeat_ngram` -> `no_repeat_ngram_size` (the same rule: over the generated tokens,
  `<end>` never banned);
- `<pad>` and `<start>`, never emitted -> `suppress_sequences`;
- the attention of the export's layer, its heads' average or head 0 -> `return_attention`
  (the spec's `alignment_layer` and `alignment_heads`).

What differs from `common.decoding`: CTranslate2 renormalizes a step's log-probabilities over the
tokens it allows (without `<pad>`, `<start>` and n-grams banned by `no_repeat_ngram`), where
this package's searches keep the model's own, so scores differ in the last digits (more
where a banned token held probability); its beam search finishes a hypothesis only when
`<end>` is among the `K` best candidates of a step (`common.decoding.beam` also keeps one among
the `2K` best) and stops once its best hypothesis has ended (and `num_hypotheses` have). It
finds no better answer than `common.decoding.beam` by the ranking both use, and on a trained
model the same one (`docs/records/results/ctranslate2_dates.json`; tested in
`tests/seq2seq/test_ctranslate2.py`).

Dimensions: `B` batch, `N` hypotheses, `T` target steps (`max_length`), `S` source steps.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import UserError
from common.export import ctranslate2 as ct2
from common.export.beam_sizes import check_n_best, request_options
from common.text.specials import END, PAD, START, UNK
from seq2seq.ctranslate2_export import KIND, WHAT

OPTIONS_SIGNATURE = "translate_with_options"
OPTIONS = ("beam_size", "max_length", "n_best", "no_repeat_ngram")


def _gnmt(length: int, alpha: float) -> float:
    """GNMT's length penalty `((5 + n) / 6) ** alpha` (`common.decoding.utils`)."""
    return 1.0 if alpha == 0 else ((5.0 + length) / 6.0) ** alpha


class CTranslate2Translator:
    """A CTranslate2 export, translating as a `Translator` or an `ExportedTranslator` does.

    It has the run's `config` (a `seq2seq.config.RunConfig`) and `checkpoint` (the weights
    exported), so that `seq2seq.evaluate` scores it as it scores the run.

    Args:
        path: a directory written by `seq2seq export RUN_DIR OUT_DIR --format ctranslate2`.
        intra_threads: CTranslate2's threads per translation (0: its default).
        inter_threads: the translations CTranslate2 runs at once (0: its default, 1): a
            batch of more sentences is split into that many parts, translated in parallel.

    Raises:
        UserError: not such a directory, or no `ctranslate2` package.

    Example:
    >>> translator = CTranslate2Translator("export/dates-ct2")  # doctest: +SKIP
    >>> translator.translate(["25th of November 2026"], beam_size=4)[0].text  # doctest: +SKIP
    '2026-11-25'
    """

    def __init__(self, path: str | os.PathLike, intra_threads: int = 0, inter_threads: int = 0):
        import dataclasses

        from common.config import from_dict
        from seq2seq.config import RunConfig

        self.info = ct2.require_kind(path, KIND, WHAT)
        self.export_dir = Path(path)
        config = from_dict(RunConfig, self.info["run_config"])
        # The export's default longest output (`--max-decode-length` at export), as the run's.
        self.config = dataclasses.replace(config, model=dataclasses.replace(
            config.model, max_decode_length=int(self.info["max_decode_length"])))
        self.checkpoint = self.info.get("checkpoint")
        self.beam_sizes = tuple(int(b) for b in self.info["beam_sizes"])
        self.max_source_tokens = int(self.info["max_source_tokens"])
        self.max_decode_limit = int(self.info["max_length_limit"])
        self.length_penalty = float(self.info["length_penalty"])
        self.engine = ct2.load_translator(self.export_dir, intra_threads, inter_threads)
        self.inter_threads = max(1, int(inter_threads))

    @functools.cached_property
    def _vocabularies(self) -> Any:
        """A subword export's `Vocabularies` (None: words)."""
        if self.info.get("vocab", "word") == "word":
            return None
        from common.text.subwords import SubwordVocabulary
        from seq2seq.vocabularies import Vocabularies

        loaded = [SubwordVocabulary.load(self.export_dir / name)
                  for name in self._subword_files()]
        return Vocabularies.of_subwords(loaded[0], loaded[-1])

    def _subword_files(self) -> list[str]:
        from common.training.run_dir import RunDir

        names = set(self.info.get("subwords", ()))
        if RunDir.shared_subwords in names:
            return [RunDir.shared_subwords]
        return [RunDir.source_subwords, RunDir.target_subwords]

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The source tokens of `texts` (NFKC; words, or the pieces of their SentencePiece
        ids), as the run and its SavedModel make them."""
        if self._vocabularies is None:
            from common.text import tokenize_texts

            return tokenize_texts(list(texts), lowercase=bool(self.info["lowercase"]))
        return self._vocabularies.tokenize(list(texts))

    # -- decoding ---------------------------------------------------------------------------

    def outputs(self, token_lists: Sequence[Sequence[str]], beam_size: int, max_length: int,
                n_best: int | None = None, no_repeat_ngram: int = 0,
                length_penalty: float | None = None) -> dict[str, np.ndarray]:
        """A SavedModel signature's outputs for valid tokenized sentences (see
        `seq2seq.export`): the best translation's, and the `n_best_*` ones unless `n_best` is
        None. `beam_size`, `max_length` and `no_repeat_ngram` are taken as given (checked by
        the callers); `length_penalty` None is the run's."""
        alpha = self.length_penalty if length_penalty is None else float(length_penalty)
        keep = n_best or 1
        # CTranslate2 stops once its best hypothesis has ended and `num_hypotheses` have: its
        # K hypotheses where the ranking here may prefer another (a length penalty, n-best),
        # else its best one (by score, the same answer, found sooner).
        several = beam_size if keep > 1 or alpha > 0 else 1
        # With several translators (`inter_threads`), CTranslate2 runs the parts of a batch cut
        # at `max_batch_size` at once (one call holds them all; 0: the batch whole).
        part = -(-len(token_lists) // self.inter_threads) if self.inter_threads > 1 else 0
        results = self.engine.translate_batch(
            [list(t) for t in token_lists], max_batch_size=part, beam_size=beam_size,
            num_hypotheses=several, length_penalty=0.0, no_repeat_ngram_size=no_repeat_ngram,
            suppress_sequences=[[PAD], [START]], return_end_token=True, max_input_length=0,
            max_decoding_length=max_length, min_decoding_length=0, return_scores=True,
            return_attention=True)
        batch = len(token_lists)
        longest = max([len(t) for t in token_lists] + [1])
        width = min((longest + 7) // 8 * 8, max(longest, self.max_source_tokens))
        source = np.full((batch, width), b"", object)
        for row, tokens in enumerate(token_lists):
            source[row, : len(tokens)] = [t.encode("utf-8") for t in tokens]
        hypotheses = [self._ranked(result, beam_size, alpha, keep) for result in results]
        done = [[self._postprocess(h, token_lists[row]) for h in hypotheses[row]]
                for row in range(batch)]
        out = {
            "translations": np.array([d[0]["text"] for d in done], object),
            "tokens": self._padded([d[0]["tokens"] for d in done], max_length),
            "lengths": np.array([len(d[0]["tokens"]) for d in done], np.int32),
            "scores": np.array([h[0]["score"] for h in hypotheses], np.float32),
            "finished": np.array([h[0]["finished"] for h in hypotheses], bool),
            "attention": np.zeros((batch, max_length, width), np.float32),
            "source_tokens": source,
            "source_lengths": np.array([len(t) for t in token_lists], np.int32),
            "copied": np.zeros((batch, max_length), bool),
        }
        for row, d in enumerate(done):
            rows = d[0]["attention"]
            out["attention"][row, : rows.shape[0], : rows.shape[1]] = rows
            out["copied"][row, d[0]["copied"]] = True
        if n_best is None:
            return out
        out.update({
            "n_best_translations": np.array([[x["text"] for x in d] for d in done], object),
            "n_best_tokens": np.stack([self._padded([x["tokens"] for x in d], max_length)
                                       for d in done]),
            "n_best_lengths": np.array([[len(x["tokens"]) for x in d] for d in done], np.int32),
            "n_best_scores": np.array([[h["score"] for h in hs] for hs in hypotheses],
                                      np.float32),
            "n_best_normalized_scores": np.array(
                [[h["normalized_score"] for h in hs] for hs in hypotheses], np.float32),
            "n_best_finished": np.array([[h["finished"] for h in hs] for hs in hypotheses],
                                        bool),
        })
        return out

    @staticmethod
    def _ranked(result: Any, beam_size: int, alpha: float, keep: int) -> list[dict[str, Any]]:
        """The `keep` best of CTranslate2's hypotheses as `common.decoding` ranks them:
        finished before unfinished, then by `score / lp(length)` (greedy: by score); slots it
        has no hypothesis for are filled as beam search fills them (scored -1e9)."""
        filler = {"tokens": [], "score": -1e9, "normalized_score": -1e9, "finished": False,
                  "attention": []}
        hypotheses = []
        for tokens, score, attention in zip(result.hypotheses, result.scores,
                                            result.attention, strict=True):
            finished = bool(tokens) and tokens[-1] == END
            normalized = score if beam_size == 1 else score / _gnmt(len(tokens), alpha)
            hypotheses.append({"tokens": list(tokens), "score": float(score),
                               "normalized_score": float(normalized), "finished": finished,
                               "attention": attention})
        ranked = sorted(hypotheses, key=lambda h: (not h["finished"], -h["normalized_score"]))
        return (ranked + [filler] * keep)[:keep]

    def _postprocess(self, hypothesis: dict[str, Any], source: Sequence[str]) -> dict[str, Any]:
        """One hypothesis as the export's graph makes it: its words before `<end>`, each
        `<unk>` replaced by the source token it attended to most (words), specials dropped
        (unless copied), the text; its attention rows `(n, S)`."""
        words = hypothesis["tokens"][: len(hypothesis["tokens"]) - hypothesis["finished"]]
        n_source = len(source)
        attention = np.asarray(hypothesis["attention"], np.float32)
        if attention.ndim != 2 or attention.shape[0] < len(words):
            attention = np.zeros((len(words), n_source), np.float32)
        attention = attention[: len(words), :n_source]
        copied = []
        if self._vocabularies is None:
            for position, word in enumerate(words):
                if word == UNK and n_source:
                    words[position] = source[int(np.argmax(attention[position]))]
                    copied.append(position)
        kept = [w for i, w in enumerate(words) if i in copied or w not in (PAD, START, END)]
        if self._vocabularies is None:
            from common.text import detokenize

            text = detokenize(kept)
        else:
            vocab = self._vocabularies.target
            text = self._vocabularies.target_subwords.decode(vocab.encode(kept))
        return {"tokens": kept, "text": text.encode("utf-8"), "copied": copied,
                "attention": attention}

    @staticmethod
    def _padded(token_lists: Sequence[Sequence[str]], width: int) -> np.ndarray:
        out = np.full((len(token_lists), width), b"", object)
        for row, tokens in enumerate(token_lists):
            out[row, : len(tokens)] = [t.encode("utf-8") for t in tokens]
        return out

    # -- the client ---------------------------------------------------------------------------

    def translate(
        self,
        texts: Sequence[str],
        beam_size: int | None = None,
        batch_size: int = 64,
        max_length: int | None = None,
        n_best: int | None = None,
        no_repeat_ngram: int = 0,
        length_penalty: float | None = None,
        attention_layer: int = -1,
        attention_head: int | None = None,
        progress: bool = False,
    ) -> list[Any]:
        """As `Translator.translate`: one `Translation` per text, bad lines with `error` set.

        The beam sizes and the longest output are the export's (`UserError` for another);
        `length_penalty` None is the run's (any alpha >= 0: the ranking is done here). The
        attention is the one chosen at export: `attention_layer`/`attention_head` other than
        their defaults are refused.
        """
        from common.decoding.utils import check_no_repeat_ngram
        from seq2seq.inference import chunks, screen_lines, translation_from_outputs

        if attention_layer != -1 or attention_head is not None:
            raise UserError("--attention-layer/--attention-head: a CTranslate2 export returns "
                            "the attention chosen at export time; give them to `seq2seq "
                            "export`")
        if length_penalty is not None and not length_penalty >= 0:
            raise UserError(f"length_penalty must be a number >= 0; got {length_penalty!r}")
        beam_size, max_length = request_options(self.info, beam_size, max_length)
        check_n_best(n_best, beam_size)
        check_no_repeat_ngram(no_repeat_ngram)
        token_lists = self.tokenize(texts) if texts else []
        results, good = screen_lines(texts, token_lists, self.max_source_tokens)
        for chunk in chunks(good, batch_size, progress,
                            [len(tokens) for tokens in token_lists]):
            outputs = self.outputs([token_lists[i] for i in chunk], beam_size, max_length,
                                   n_best, no_repeat_ngram, length_penalty)
            for row, i in enumerate(chunk):
                results[i] = translation_from_outputs(texts[i], outputs, row, max_length,
                                                      n_best)
        return results  # type: ignore[return-value]

    # -- serving ------------------------------------------------------------------------------

    def call(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A SavedModel export's signature on a batch (`sentences (B,)` bytes and, for the
        options signature, its scalar options): the same outputs, and a `RequestError` with
        the graph's message for what it refuses."""
        from common.serving.json_codec import RequestError

        sentences = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
                     for s in np.asarray(inputs["sentences"], object).reshape(-1)]
        n_best = None
        beam_size, max_length = int(self.info["default_beam_size"]), \
            int(self.info["max_decode_length"])
        no_repeat_ngram = 0
        if signature == OPTIONS_SIGNATURE:
            beam_size, max_length, n_best, no_repeat_ngram = (int(inputs[n]) for n in OPTIONS)
            if not 1 <= max_length <= self.max_decode_limit:
                raise RequestError(f"max_length must be 1..{self.max_decode_limit}; got "
                                   f"{max_length}")
            if beam_size not in self.beam_sizes:
                raise RequestError(f"beam_size must be one of {list(self.beam_sizes)} (the "
                                   f"exported sizes); got {beam_size}")
            if not 1 <= n_best <= beam_size:
                raise RequestError(f"n_best must be 1..beam_size ({beam_size}); got {n_best}")
            if no_repeat_ngram < 0:
                raise RequestError(f"no_repeat_ngram must be >= 0 (0: off); got "
                                   f"{no_repeat_ngram}")
        token_lists = self.tokenize(sentences)
        for tokens in token_lists:
            if not tokens:
                raise RequestError("empty sentence: nothing to translate")
            if len(tokens) > self.max_source_tokens:
                raise RequestError(f"a sentence is longer than {self.max_source_tokens} "
                                   "tokens, the most this model accepts")
        return self.outputs(token_lists, beam_size, max_length, n_best, no_repeat_ngram)

    def servable(self, version: int = 1, max_instances: int | None = None) -> Any:
        """This export as a served model version (`common.serving.engine_servable`): the two
        signatures of a SavedModel export, the same inputs, defaults and outputs."""
        import tensorflow as tf

        from common.serving.engine_servable import EngineServable
        from seq2seq.export import N_BEST_OUTPUTS, OUTPUTS

        sentences = tf.TensorSpec([None], tf.string, name="sentences")
        options = {name: tf.TensorSpec([], tf.int32, name=name) for name in OPTIONS}
        specs = {"serving_default": {"sentences": sentences},
                 OPTIONS_SIGNATURE: {"sentences": sentences, **options}}
        ranks = {"translations": 1, "tokens": 2, "lengths": 1, "scores": 1, "finished": 1,
                 "attention": 3, "source_tokens": 2, "source_lengths": 1, "copied": 2}
        dtypes = {"translations": tf.string, "tokens": tf.string, "lengths": tf.int32,
                  "scores": tf.float32, "finished": tf.bool, "attention": tf.float32,
                  "source_tokens": tf.string, "source_lengths": tf.int32, "copied": tf.bool}
        best = {name: (dtypes[name], ranks[name]) for name in OUTPUTS}
        several = {name: (dtypes.get(name[len("n_best_"):], tf.float32),
                          ranks.get(name[len("n_best_"):], 1) + 1) for name in N_BEST_OUTPUTS}
        defaults = {"beam_size": int(self.info["default_beam_size"]),
                    "max_length": int(self.info["max_decode_length"]), "n_best": 1,
                    "no_repeat_ngram": 0}
        return EngineServable(specs, {"serving_default": best,
                                      OPTIONS_SIGNATURE: {**best, **several}},
                              self.call, defaults, version=version, max_instances=max_instances)


def serve(path: str | os.PathLike, model_name: str, host: str = "127.0.0.1", port: int = 8501,
          max_request_instances: int = 1024, intra_threads: int = 0, inter_threads: int = 0,
          **options: Any) -> None:
    """`seq2seq serve OUT_DIR` for a CTranslate2 export: TensorFlow Serving's REST API, as for
    a SavedModel export (version 1), the engine with `intra_threads` and `inter_threads`
    (`serve --intra-threads/--inter-threads`; `CTranslate2Translator`); `options` are
    `common.serving.app.serve`'s."""
    from common.serving.app import check_address
    from common.serving.app import serve as serve_app

    check_address(host, port)  # before the model loads
    servable = CTranslate2Translator(path, intra_threads, inter_threads).servable(
        max_instances=max_request_instances)
    serve_app(path, model_name, host=host, port=port, versions={1: servable},
              max_request_instances=max_request_instances, **options)

