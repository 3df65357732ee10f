"""`DecodingModule`: one `tf.Module` that decodes and turns ids into words, for every path.

Each family subclasses it once (`captioner.export.CaptionerModule`,
`seq2seq.export.TranslatorModule`) with its pre-processing (image bytes -> pixels; sentences ->
tokens) and its extra outputs. Everything else is written here once and used by both the
export (`serving_default` and the `*_with_options` signature, saved by `save`) and in-process
prediction (`predict`, the same graph without a SavedModel):

- the beam sizes compiled in and the dispatch over them (`common.export.beam_sizes`);
- the search, chosen by name (`common.decoding.methods`);
- the postprocess in TensorFlow: ids -> words (a lookup), cut at `<end>`, special tokens
  dropped, joined (`detokenize_tf`), for the best hypothesis and for the `n_best_*` outputs;
- `info()` for `export_info.json`, `save`, and `export_run`.

`ExportedModel` is the client side: it loads an export, checks a request's options against
its `export_info.json` and runs the options signature on a batch. The result objects
(`Caption`, `Translation`) are built from the output dict by one function per family, used
by both the in-process model and the client.

Dimensions: `B` batch, `N` hypotheses, `T` steps, `R` rows (`B` or `B * N`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from common.decoding import Decoded, default_method, make_strategy
from common.decoding.defaults import BEAM_SIZE, EXPORT_BEAM_SIZES, LENGTH_PENALTY
from common.errors import UserError
from common.export import quantization, savedmodel
from common.export.beam_sizes import (
    check_export_options,
    check_n_best,
    dispatch_n_best,
    graph_checks,
    request_options,
)
from common.export.warmup import WarmupRequest
from common.text import Vocabulary, detokenize_tf

DEFAULT_BEAM_SIZES = EXPORT_BEAM_SIZES  # (`common.decoding.defaults`)
N_BEST_SUFFIXES = ("tokens", "lengths", "scores", "normalized_scores", "finished")


class _Functions:
    """A plain holder for the in-process `tf.function`s: not trackable, so a SavedModel of the
    module never sees them."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, Any] = {}


class DecodingModule(tf.Module):
    """What both families' export modules share (see the module doc).

    Subclasses set the class attributes and implement `read_inputs`, `prepare`,
    `search_inputs` and `extra_outputs` (and `words` for more than a vocabulary lookup).

    Class attributes:
        KIND: the family marker of `export_info.json`.
        WHAT: an export of the family, for errors ("an exported captioner (make one ...)").
        SEVERAL: what a request for several hypotheses asks for ("captions per image").
        INPUT: the name of the signatures' input (`"images"`, `"sentences"`).
        TEXT: the name of the text output (`"captions"`); `n_best_` + it for the n best.
        OPTIONS_SIGNATURE: the name of the signature with the options.
        OUTPUTS: the outputs of both signatures, for `info()`.

    Attributes:
        model: the Keras model the signatures decode with, set by the subclass (None: no
            Keras model, as a test's table of logits; `info()` then records float32 weights).

    Args:
        name: the module's name.
        vocab: the output `Vocabulary`.
        max_decode_length: the default `max_length`.
        max_length_limit: the largest `max_length` accepted.
        beam_sizes: the beam sizes compiled into the graph.
        default_beam_size: the beam size of `serving_default` and the served default.
        length_penalty: the GNMT length penalty of beam search.
    """

    KIND: ClassVar[str] = ""
    WHAT: ClassVar[str] = ""
    SEVERAL: ClassVar[str] = ""
    INPUT: ClassVar[str] = ""
    TEXT: ClassVar[str] = ""
    OPTIONS_SIGNATURE: ClassVar[str] = ""
    OUTPUTS: ClassVar[tuple[str, ...]] = ()
    model: Any = None

    def __init__(self, name: str, vocab: Vocabulary, max_decode_length: int,
                 max_length_limit: int, beam_sizes: Sequence[int] = DEFAULT_BEAM_SIZES,
                 default_beam_size: int = BEAM_SIZE, length_penalty: float = LENGTH_PENALTY):
        super().__init__(name=name)
        self.beam_sizes = check_export_options(beam_sizes, default_beam_size,
                                               max_decode_length, max_length_limit)
        self.vocab = vocab
        self.max_decode_length = int(max_decode_length)
        self.max_length_limit = int(max_length_limit)
        self.default_beam_size = int(default_beam_size)
        self.length_penalty = float(length_penalty)
        self._in_process = _Functions()
        # autograph=False: the models' Python conditionals (`max_length or ...`) stay Python;
        # AutoGraph would turn them into a `tf.cond` on an int32 tensor, which fails in a branch.
        raw = tf.TensorSpec([None], tf.string, name=self.INPUT)
        self.serving_default = tf.function(self._serve_defaults, autograph=False,
                                           input_signature=[raw])
        options = [raw, tf.TensorSpec([], tf.int32, name="beam_size"),
                   tf.TensorSpec([], tf.int32, name="max_length"),
                   tf.TensorSpec([], tf.int32, name="n_best"),
                   tf.TensorSpec([], tf.int32, name="no_repeat_ngram")]
        setattr(self, self.OPTIONS_SIGNATURE, tf.function(
            self._serve_options, autograph=False, input_signature=options))

    @classmethod
    def n_best_outputs(cls) -> tuple[str, ...]:
        return tuple(f"n_best_{name}" for name in (cls.TEXT, *N_BEST_SUFFIXES))

    # -- the family's side -----------------------------------------------------------------

    def read_inputs(self, raw: tf.Tensor) -> Any:
        """The signatures' `(B,)` strings -> the features `predict` takes (pixels, tokens)."""
        raise NotImplementedError

    def prepare(self, features: Any) -> tuple[Any, dict[str, tf.Tensor]]:
        """Features -> `(search, rows)`: what `search_inputs` needs, and per-example tensors
        (leading `B`) that `words` and `extra_outputs` need for each hypothesis."""
        raise NotImplementedError

    def search_inputs(self, search: Any, max_length: Any) -> tuple[Any, Any, Any]:
        """`(step, initial_state, batch_size)` of the model for `max_length` (an int in
        process, a scalar tensor in the signatures)."""
        raise NotImplementedError

    def words(self, decoded: Decoded, within: tf.Tensor,
              rows: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """`(R, T)` words of the ids and the `(R, T)` positions whose word was copied from the
        input (kept even if the id is a special token). Here: a vocabulary lookup."""
        words = tf.gather(tf.constant(self.vocab.tokens, tf.string), decoded.tokens)
        return words, tf.zeros_like(within)

    def join(self, kept: tf.RaggedTensor, ids: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
        """`(R,)` texts of the `(R, None)` words `kept` (the `(R, T)` `ids` where `keep`).
        Here: `detokenize_tf` (a subword vocabulary decodes the ids instead)."""
        return detokenize_tf(kept)

    def extra_outputs(self, decoded: Decoded, within: tf.Tensor, copied: tf.Tensor,
                      rows: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The family's outputs of one hypothesis per row (attention, ...)."""
        return {}

    def family_info(self) -> dict[str, Any]:
        """The family's entries of `export_info.json` (`op_libraries`: the modules a loader
        imports first, for ops outside core TensorFlow)."""
        return {}

    def extra_files(self) -> dict[str, bytes]:
        """Files written to the export's `assets.extra/` for clients (name -> contents)."""
        return {}

    def warmup_input(self) -> bytes | str | None:
        """One input the signatures accept (an image's bytes, a sentence), for the warm-up
        requests (None: the export has no warm-up file)."""
        return None

    def warmup_requests(self) -> list[WarmupRequest]:
        """TensorFlow Serving's warm-up requests (`common.export.warmup`): `serving_default`,
        then the options signature at each exported beam size (`n_best` 1, and the whole beam
        at the largest). The first call of a signature instantiates and optimizes its whole
        graph (seconds); the others (milliseconds each) run each search's kernels once."""
        example = self.warmup_input()  # (the captioner's encodes a PNG: once)
        if example is None:
            return []
        raw = np.array([example], dtype=object)

        def options(beam_size: int, n_best: int) -> WarmupRequest:
            values = {"beam_size": beam_size, "max_length": self.max_decode_length,
                      "n_best": n_best, "no_repeat_ngram": 0}
            return WarmupRequest(self.OPTIONS_SIGNATURE, {
                self.INPUT: raw, **{k: np.array(v, np.int32) for k, v in values.items()}})

        largest = max(self.beam_sizes)
        sizes = sorted(self.beam_sizes, key=lambda size: size != self.default_beam_size)
        requests = [WarmupRequest("serving_default", {self.INPUT: raw})]
        requests += [options(size, 1) for size in sizes]
        if largest > 1:
            requests.append(options(largest, largest))
        return requests

    # -- the graph ---------------------------------------------------------------------------

    def _serve_defaults(self, raw):
        """The options signature's function called with the export-time options, its best
        hypothesis' outputs: one graph in the SavedModel for both signatures (a search of
        its own made the export a third larger to load)."""
        options = getattr(self, self.OPTIONS_SIGNATURE)(
            raw, tf.constant(self.default_beam_size, tf.int32),
            tf.constant(self.max_decode_length, tf.int32), tf.constant(1, tf.int32),
            tf.constant(0, tf.int32))
        return {name: options[name] for name in self.OUTPUTS}

    def _serve_options(self, raw, beam_size, max_length, n_best, no_repeat_ngram):
        return self._serve(raw, beam_size, max_length, n_best, no_repeat_ngram)

    def _serve(self, raw, beam_size, max_length, n_best,
               no_repeat_ngram: int | tf.Tensor = 0) -> dict[str, tf.Tensor]:
        ban = None if isinstance(no_repeat_ngram, int) else no_repeat_ngram  # a graph input
        checks = graph_checks(beam_size, max_length, self.beam_sizes, self.max_length_limit,
                              n_best, ban)
        with tf.control_dependencies(checks):
            features = self.read_inputs(raw)
        search, rows = self.prepare(features)
        # The encoder runs once, outside the `tf.cond` between the searches (in both branches,
        # its graph was there twice).
        problem = self.search_inputs(search, max_length)

        def decode(size: int | tf.Tensor, k: int | tf.Tensor) -> Decoded:
            # A tensor size is one beam search for every exported size above 1.
            method = default_method(size) if isinstance(size, int) else "beam"
            strategy = make_strategy(method, beam_size=size,
                                     length_penalty=self.length_penalty, n_best=k,
                                     no_repeat_ngram=no_repeat_ngram)
            return self._search(problem, strategy, max_length)

        if n_best is None:
            return self._outputs(decode(beam_size, 1), rows, n_best=None)
        decoded = dispatch_n_best(beam_size, n_best, self.beam_sizes, decode)
        return self._outputs(decoded, rows, n_best=n_best)

    def _decode(self, search: Any, strategy: Any, max_length: Any) -> Decoded:
        return self._search(self.search_inputs(search, max_length), strategy, max_length)

    def _search(self, problem: tuple[Any, Any, Any], strategy: Any, max_length: Any) -> Decoded:
        """`strategy` over `search_inputs`' `(step, initial_state, batch_size)`."""
        step, state, batch = problem
        decoded = strategy(step, state, batch, self.vocab.start_id, self.vocab.end_id,
                           max_length)
        return decoded._replace(attention=tf.cast(decoded.attention, tf.float32))

    def _outputs(self, decoded: Decoded, rows: dict[str, tf.Tensor],
                 n_best: int | tf.Tensor | None) -> dict[str, tf.Tensor]:
        """The outputs of the best hypothesis, and the `n_best_*` ones unless `n_best` is
        None. For `n_best` 1 (the usual request; a scalar tensor in the signatures) those are
        the best hypothesis' outputs with an `N` axis, so its post-processing is not run a
        second time (`tf.cond` picks at run time)."""
        outputs = self._postprocess(Decoded(*(t[:, 0] for t in decoded)), rows)
        if n_best is None:
            return outputs
        if isinstance(n_best, int):
            several = (self._n_best(decoded, rows) if n_best > 1
                       else self._one_best(decoded, outputs))
        else:
            several = tf.cond(tf.equal(n_best, 1), lambda: self._one_best(decoded, outputs),
                              lambda: self._n_best(decoded, rows))
        outputs.update(several)
        return outputs

    def _one_best(self, decoded: Decoded, best: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The `n_best_*` outputs with `N = 1`, from the best hypothesis' `outputs`: what
        `_n_best` computes for one hypothesis, without post-processing it again."""
        return {
            f"n_best_{self.TEXT}": best[self.TEXT][:, None],
            "n_best_tokens": best["tokens"][:, None],
            "n_best_lengths": best["lengths"][:, None],
            "n_best_scores": decoded.scores[:, :1],
            "n_best_normalized_scores": decoded.normalized_scores[:, :1],
            "n_best_finished": decoded.finished[:, :1],
        }

    def _postprocess(self, decoded: Decoded, rows: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """One hypothesis per row, `(R, ...)`: ids -> words, cut before `<end>`, specials
        dropped (unless copied), joined; and the family's outputs."""
        ids, vocab = decoded.tokens, self.vocab
        n = decoded.lengths - tf.cast(decoded.finished, tf.int32)  # the words: <end> dropped
        within = tf.range(tf.shape(ids)[1])[None, :] < n[:, None]
        words, copied = self.words(decoded, within, rows)
        special = (tf.equal(ids, vocab.pad_id) | tf.equal(ids, vocab.start_id)
                   | tf.equal(ids, vocab.end_id))
        keep = within & (copied | ~special)
        kept = tf.ragged.boolean_mask(words, keep)
        return {
            self.TEXT: self.join(kept, ids, keep),
            "tokens": kept.to_tensor("", shape=tf.shape(ids)),
            "lengths": tf.cast(kept.row_lengths(), tf.int32),
            "scores": decoded.scores,
            "finished": decoded.finished,
            **self.extra_outputs(decoded, within, copied, rows),
        }

    def _n_best(self, decoded: Decoded, rows: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The `n_best_*` outputs: every hypothesis of `(B, N, ...)`, best first, through the
        same `_postprocess` (each with the rows of its example)."""
        shape = tf.shape(decoded.tokens)  # (B, N, T)

        def flat(t):  # (B, N, ...) -> (B * N, ...), keeping the static trailing dimensions
            out = tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
            out.set_shape([None, *t.shape[2:]])
            return out

        repeated = {key: tf.repeat(value, shape[1], axis=0) for key, value in rows.items()}
        done = self._postprocess(Decoded(*(flat(t) for t in decoded)), repeated)
        return {
            f"n_best_{self.TEXT}": tf.reshape(done[self.TEXT], shape[:2]),
            "n_best_tokens": tf.reshape(done["tokens"], shape),
            "n_best_lengths": tf.reshape(done["lengths"], shape[:2]),
            "n_best_scores": decoded.scores,
            "n_best_normalized_scores": decoded.normalized_scores,
            "n_best_finished": decoded.finished,
        }

    # -- in process ----------------------------------------------------------------------------

    def predict(self, features: Any, method: str | None = None, beam_size: int = BEAM_SIZE,
                max_length: int | None = None, n_best: int | None = None,
                **options: Any) -> dict[str, np.ndarray]:
        """The signatures' outputs for features (`read_inputs`'s output) with any method of
        `common.decoding.methods` (`method` None: greedy for one beam, else beam search) and
        its `options` (`temperature`, `seed`, ...); the `n_best_*` outputs when `n_best` is
        given. One `tf.function` per choice of options, kept for the next call, traced once
        for every batch size (and, for text, every sentence length: `_any_batch`), so that
        a file's batches of other lengths and its last, shorter batch do not trace again."""
        method = method or default_method(beam_size)
        max_length = int(max_length or self.max_decode_length)
        key = (method, beam_size, max_length, n_best, tuple(sorted(options.items())))
        function = self._in_process.by_key.get(key)
        if function is None:
            strategy = make_strategy(method, beam_size=beam_size, n_best=n_best or 1,
                                     length_penalty=self.length_penalty, **options)

            def run(features):
                search, rows = self.prepare(features)
                return self._outputs(self._decode(search, strategy, max_length), rows,
                                     n_best=n_best)

            signature = _any_batch(features)
            function = (tf.function(run, autograph=False, input_signature=[signature])
                        if signature is not None
                        else tf.function(run, autograph=False, reduce_retracing=True))
            self._in_process.by_key[key] = function
        return {name: value.numpy() for name, value in function(features).items()}

    # -- export ----------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """What `export_info.json` records (`ExportedModel` reads the limits from it)."""
        return {
            **self.family_info(),
            "max_decode_length": self.max_decode_length,
            "max_length_limit": self.max_length_limit, "beam_sizes": list(self.beam_sizes),
            "default_beam_size": self.default_beam_size, "length_penalty": self.length_penalty,
            "outputs": list(self.OUTPUTS), "n_best_outputs": list(self.n_best_outputs()),
            **quantization.summary(self.model),
        }

    def save(self, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
        """Writes the SavedModel (both signatures, `export_info.json`, input defaults)."""
        return savedmodel.save_decoding_module(self, out_dir, self.KIND, self.OPTIONS_SIGNATURE,
                                               overwrite=overwrite)

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike, checkpoint: str | None = None,
                     **kwargs: Any) -> DecodingModule:
        """The module of a run directory's `checkpoint` (None: the best when the run keeps
        one, else the last; the family's loader)."""
        raise NotImplementedError

    @classmethod
    def export_run(cls, run_dir: str | os.PathLike, out_dir: str | os.PathLike,
                   overwrite: bool = False, max_decode_length: int | None = None,
                   **kwargs: Any) -> Path:
        """`FAMILY export RUN_DIR OUT_DIR`: load the run's checkpoint (`checkpoint=` among the
        keyword arguments: best, last, a number or a path; default the best when kept, else
        the last) and save it.

        Keyword arguments are those of the module (`beam_sizes`, `default_beam_size`, ...);
        `max_decode_length` None keeps the run's; `quantization` `"int8"` quantizes the
        restored weights with Keras before the signatures are traced
        (`common.export.quantization`; None or `"float32"`: as trained).
        """
        mode = quantization.check_quantization(kwargs.pop("quantization", None))
        savedmodel.check_target(out_dir, overwrite)  # before the minutes of loading and tracing
        if max_decode_length:
            kwargs["max_decode_length"] = max_decode_length
        module = cls.from_run_dir(run_dir, **kwargs)
        quantization.quantize_model(module.model, mode)
        return module.save(out_dir, overwrite=overwrite)


class ExportedModel:
    """The client of an export written by a `DecodingModule`: loading, request options, and
    one call of the options signature (`tf.saved_model.load`, no project code in the graph).

    Args:
        export_dir: a directory written by the family's `export_run`.

    Raises:
        UserError: `export_dir` is not a SavedModel, or is one of another kind.
    """

    #: the family's module class: its KIND, WHAT, SEVERAL and INPUT.
    MODULE: ClassVar[type[DecodingModule]] = DecodingModule

    def __init__(self, export_dir: str | os.PathLike):
        self.info = savedmodel.require_kind(export_dir, self.MODULE.KIND, self.MODULE.WHAT)
        self.export_dir = Path(export_dir)
        self.loaded = savedmodel.load(export_dir)
        self.signature = self.loaded.signatures[savedmodel.options_signature(self.info)]
        inputs = self.signature.structured_input_signature[1]
        self.takes_n_best = "n_best" in inputs
        self.takes_no_repeat_ngram = "no_repeat_ngram" in inputs  # older exports: no such input
        self.beam_sizes = tuple(self.info["beam_sizes"])
        self._calls = 0

    def _options(self, beam_size: int | None, max_length: int | None,
                 n_best: int | None = None, no_repeat_ngram: int = 0) -> tuple[int, int]:
        """`(beam_size, max_length)` with the export's defaults; a `UserError` for a choice
        the export does not have."""
        from common.decoding.utils import check_no_repeat_ngram

        beam_size, max_length = request_options(self.info, beam_size, max_length)
        check_n_best(n_best, beam_size)
        check_no_repeat_ngram(no_repeat_ngram)
        if n_best and n_best > 1 and not self.takes_n_best:
            raise UserError(f"{self.export_dir} was exported without n-best outputs; export "
                            f"the run again to get several {self.MODULE.SEVERAL}")
        if no_repeat_ngram and not self.takes_no_repeat_ngram:
            raise UserError(f"{self.export_dir} was exported without the no_repeat_ngram "
                            "input; export the run again to ban repeated n-grams")
        return beam_size, max_length

    def _run(self, raw: Sequence[Any], beam_size: int, max_length: int,
             n_best: int | None, no_repeat_ngram: int = 0) -> dict[str, np.ndarray]:
        """The options signature on `raw` (image bytes, sentences), as NumPy arrays."""
        inputs = {self.MODULE.INPUT: tf.constant(list(raw), tf.string),
                  "beam_size": tf.constant(beam_size, tf.int32),
                  "max_length": tf.constant(max_length, tf.int32)}
        if self.takes_n_best:
            inputs["n_best"] = tf.constant(n_best or 1, tf.int32)
        if self.takes_no_repeat_ngram:
            inputs["no_repeat_ngram"] = tf.constant(no_repeat_ngram, tf.int32)
        # The first call of a signature instantiates its graph, and grappler's optimization of
        # it is most of that time (1.2 of 2.1 s of CPU for a dates Transformer) for no gain on
        # one batch: the first call runs without it, later ones with it (then instantiated
        # again, once), where it makes a spa-eng-cpu Transformer's beam search 15-20% faster.
        with _graph_optimization(self._calls > 0):
            outputs = self.signature(**inputs)
        self._calls += 1
        return {name: value.numpy() for name, value in outputs.items()}


@contextlib.contextmanager
def _graph_optimization(enabled: bool) -> Iterator[None]:
    """Runs the block's function calls with grappler on or off (this thread's calls; the
    setting before is restored after)."""
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not enabled})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})


def _any_batch(features: Any) -> tf.TypeSpec | None:
    """The input signature of `features` for every batch: a tensor's (`(B, H, W, 3)` images)
    with any number of rows, a ragged tensor's (`(B, None)` tokens) with any rows and lengths;
    None for another structure (then `tf.function` relaxes shapes as it meets them)."""
    if isinstance(features, np.ndarray):
        features = tf.convert_to_tensor(features)
    spec = tf.type_spec_from_value(features)
    if isinstance(spec, tf.RaggedTensorSpec):
        return tf.RaggedTensorSpec([None] * spec.shape.rank, spec.dtype, spec.ragged_rank,
                                   spec.row_splits_dtype)
    if isinstance(spec, tf.TensorSpec) and spec.shape.rank:
        return tf.TensorSpec([None, *spec.shape[1:]], spec.dtype)
    return None
