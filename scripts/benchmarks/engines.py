"""One Transformer, three engines: decoding throughput in process, as a SavedModel and in
CTranslate2, float32 and int8.

    pip install -r scripts/benchmarks/requirements-engines.txt     # CTranslate2, the peer
    python scripts/benchmarks/engines.py --out docs/records/benchmarks/engines_cpu.json
    python scripts/benchmarks/engines.py --quick                   # tiny model, 1 round

Each size of `--sizes` (`_lib.translators.TRANSLATOR_SIZES`: `spa-eng-cpu` is 3 + 3 layers of
width 192 with vocabularies of 12,000, `base` Transformer-base, 6 + 6 of width 512 with
32,000) is built once with random weights (seed 0) and word vocabularies `w4 ... w{V-1}`, and
decodes the same random `--source-length`-token sentences through every engine:

| engine | what decodes | input -> output |
|---|---|---|
| `inprocess` | the Keras model's step under `common.decoding` in one `tf.function` (`_lib.decoding`, `benchmark_latency.py`'s decoder) | ids -> ids |
| `inprocess_xla` | the same with `jit_compile=True`; greedy only (beam search under XLA is not offered: `--xla-beam` times it too) | ids -> ids |
| `savedmodel_float32` | `seq2seq.export`'s SavedModel of the model, loaded with `tf.saved_model.load`, its `translate_with_options` signature | text -> text |
| `savedmodel_int8` | the same of the model quantized by `common.export.quantization` (`export --quantization int8`) | text -> text |
| `ctranslate2_float32` | `seq2seq export --format ctranslate2 --quantization float32`'s directory in `ctranslate2.Translator.translate_batch` | tokens -> tokens |
| `ctranslate2_int8` | the same with `--quantization int8` (CTranslate2's own int8 weights and products) | tokens -> tokens |

Every output is forced to exactly `--tokens` tokens, the same way on each side: `<end>` (and
`<pad>`, and where text comes out `<start>`) can never be chosen. In the SavedModel the step's
logits of those three ids get -1e9 added (its module is `seq2seq.export.TranslatorModule` with
its step wrapped so, and otherwise the export's graph: tokenization, lookup, search, `<unk>`
copying, detokenization), in process those of `<pad>` and `<end>` (`_lib.decoding`: ids out,
so a `<start>` counts as a token); CTranslate2 gets `min_decoding_length = max_decoding_length
= --tokens` (it masks `<end>` before the minimum length) and `suppress_sequences` `<pad>`,
`<start>` (as `seq2seq.ctranslate2_translator` does). Each output's length is checked.
CTranslate2 returns no attention (`return_attention` off, as a user of the engine alone runs
it); the SavedModel always computes its attention output.

Threads: TensorFlow's intra- and inter-op pools and CTranslate2's `intra_threads` are
`--threads` (CTranslate2's `inter_threads` 1: one batch at a time); the JSON records them.
For each (size, batch, beam) the engines are timed in turns (`_lib.benchmark.alternate`: the
order reversed every other round), after one untimed call each (tracing, graph optimization),
over `--rounds` rounds: medians, target tokens/s (batch x tokens / median) and ms per sentence,
and the ratios of the medians (`ratios`). The JSON also records the load average before and
after the run (the CPU may be shared), the exports' sizes, and whether the issue 39 targets
were met in each cell (`targets`). `--profile` adds where the SavedModels' time goes (a
TensorFlow profiler trace of one call per cell, summed by op group by `_lib.profiling`, as
`profile_translator.py` sums a training step's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, apply_quick, beam_size_list, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

from _lib.benchmark import load_average  # noqa: E402
from _lib.decoding import make_decoder  # noqa: E402
from _lib.translators import TRANSLATOR_SIZES  # noqa: E402

ENGINES = ("inprocess", "inprocess_xla", "savedmodel_float32", "savedmodel_int8",
           "ctranslate2_float32", "ctranslate2_int8")
REQUIREMENTS = "scripts/benchmarks/requirements-engines.txt"
SPECIALS = ["<pad>", "<start>", "<end>", "<unk>"]
BANNED = (0, 1, 2)  # <pad>, <start>, <end>: never chosen, so every output is full length
#: (numerator, denominator) engines of each ratio of tokens/s in `ratios`.
RATIOS = {
    "savedmodel_float32_over_ctranslate2_float32": ("savedmodel_float32", "ctranslate2_float32"),
    "savedmodel_int8_over_ctranslate2_int8": ("savedmodel_int8", "ctranslate2_int8"),
    "savedmodel_int8_over_savedmodel_float32": ("savedmodel_int8", "savedmodel_float32"),
    "ctranslate2_int8_over_ctranslate2_float32": ("ctranslate2_int8", "ctranslate2_float32"),
    "savedmodel_float32_over_inprocess": ("savedmodel_float32", "inprocess"),
    "inprocess_xla_over_inprocess": ("inprocess_xla", "inprocess"),
}
#: Issue 39's targets: the ratio, and the least it should be in every cell.
TARGETS = {"savedmodel_float32_over_ctranslate2_float32": 1.0,
           "savedmodel_int8_over_ctranslate2_int8": 0.8}
COLUMNS = ["size", "batch", "beam", "engine", "median_ms", "ms_per_sentence", "tokens_per_s"]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="engines.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--sizes", default="spa-eng-cpu,base",
                   help=f"comma-separated, of: {', '.join(TRANSLATOR_SIZES)}")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help=f"comma-separated, of: {', '.join(ENGINES)}")
    p.add_argument("--batches", type=beam_size_list, default="1,32",
                   help="comma-separated batch sizes")
    p.add_argument("--beams", type=beam_size_list, default="1,4",
                   help="comma-separated beam sizes (1: greedy)")
    p.add_argument("--tokens", type=int, default=20, help="output tokens per sentence (forced)")
    p.add_argument("--source-length", type=int, default=20, help="source tokens per sentence")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per cell")
    p.add_argument("--threads", type=int, default=2,
                   help="TensorFlow's intra- and inter-op threads, CTranslate2's intra_threads")
    p.add_argument("--xla-beam", action="store_true",
                   help="also time beam search in process under XLA (slow: see the docstring)")
    p.add_argument("--profile", action="store_true",
                   help="trace one call of each SavedModel per cell: where its time goes")
    p.add_argument("--quick", action="store_true",
                   help="the tiny size, batch 2, greedy, 1 round (options given win): "
                        "a smoke test")
    p.add_argument("--out", help="write the results (and device info) to this JSON file")
    p.set_defaults(_run=run_main)
    return p


# -- the engines -----------------------------------------------------------------------------


def make_translator(size: str, quantized: bool) -> Any:
    """A `seq2seq.inference.Translator` of random weights (seed 0) at `size`, with word
    vocabularies `w4 ... w{V-1}`; its model quantized to int8 when `quantized`."""
    import keras

    from common.export.quantization import quantize_model
    from common.text import Vocabulary
    from seq2seq.inference import Translator
    from seq2seq.models import build_model
    from seq2seq.train import make_run_config

    preset, overrides, vocab = TRANSLATOR_SIZES[size]
    config = make_run_config("transformer", "dates", preset, {**overrides, "dropout": 0.0})
    keras.utils.set_random_seed(0)
    model = build_model(config.model, vocab, vocab)
    model.build()
    if quantized:
        quantize_model(model, "int8")
    tokens = SPECIALS + [f"w{i}" for i in range(len(SPECIALS), vocab)]
    return Translator(model, Vocabulary(tokens), Vocabulary(tokens), config)


def forced_module(translator: Any, beams: list[int], tokens: int) -> Any:
    """`seq2seq.export.TranslatorModule` of `translator` whose step can never choose
    `BANNED`: every output is `tokens` long (the module doc)."""
    import tensorflow as tf

    from seq2seq.export import TranslatorModule

    class ForcedModule(TranslatorModule):
        def search_inputs(self, search, max_length):
            step, state, batch = super().search_inputs(search, max_length)
            ban = -1e9 * tf.reduce_sum(tf.one_hot(BANNED, len(self.target_vocab)), axis=0)

            def forced(ids, step_state, index):
                logits, step_state, attention = step(ids, step_state, index)
                return tf.cast(logits, tf.float32) + ban, step_state, attention

            return forced, state, batch

    return ForcedModule.from_translator(translator, beam_sizes=beams, default_beam_size=beams[0],
                                        max_decode_length=tokens)


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


class Engines:
    """Every engine of one size, ready to decode (`call(engine, cell)` -> the outputs' token
    counts), and what was built (`info`)."""

    def __init__(self, size: str, args: argparse.Namespace, folder: Path):
        import ctranslate2
        import tensorflow as tf

        from seq2seq.ctranslate2_export import export_translator

        self.size, self.args, self.engines = size, args, set(args.engines)
        self.tokens, self.beams = args.tokens, sorted(set(args.beams))
        self.float_translator = make_translator(size, quantized=False)
        self.vocab = len(self.float_translator.target_vocab)
        self.info: dict[str, Any] = {
            "params": int(self.float_translator.model.count_params()), "vocab": self.vocab}
        self.savedmodels, self.ct2 = {}, {}
        for weights in ("float32", "int8"):
            if f"savedmodel_{weights}" in self.engines:
                translator = (self.float_translator if weights == "float32"
                              else make_translator(size, quantized=True))
                path = folder / f"{size}-savedmodel-{weights}"
                start = time.perf_counter()
                forced_module(translator, self.beams, self.tokens).save(path)
                self.info[f"savedmodel_{weights}"] = {
                    "export_s": time.perf_counter() - start, "bytes": folder_bytes(path),
                    "variables_bytes": folder_bytes(path / "variables")}
                signature = tf.saved_model.load(str(path)).signatures["translate_with_options"]
                self.savedmodels[weights] = signature
            if f"ctranslate2_{weights}" in self.engines:
                path = folder / f"{size}-ctranslate2-{weights}"
                export_translator(self.float_translator, path, quantization=weights,
                                  beam_sizes=self.beams, default_beam_size=self.beams[0],
                                  max_decode_length=self.tokens)
                engine = ctranslate2.Translator(str(path), device="cpu", compute_type="default",
                                                intra_threads=args.threads, inter_threads=1)
                self.ct2[weights] = engine
                self.info[f"ctranslate2_{weights}"] = {
                    "bytes": folder_bytes(path), "compute_type": engine.compute_type,
                    "intra_threads": args.threads, "inter_threads": 1}
        self.decoders: dict[tuple[str, int], Any] = {}

    def inputs(self, batch: int, seed: int) -> dict[str, Any]:
        """Random sentences of `--source-length` words, as ids, text and tokens."""
        import numpy as np
        import tensorflow as tf

        ids = np.random.default_rng(seed).integers(len(SPECIALS), self.vocab,
                                                   (batch, self.args.source_length))
        words = [[f"w{i}" for i in row] for row in ids]
        return {"ids": tf.constant(ids, tf.int32), "words": words,
                "text": tf.constant([" ".join(row) for row in words])}

    def _decoder(self, beam: int, xla: bool) -> Any:
        import tensorflow as tf

        key = (beam, xla)
        if key not in self.decoders:
            decode = make_decoder(
                self.float_translator.model, "transformer", self.vocab,
                "greedy" if beam == 1 else "beam", beam, self.tokens, uncached=False)
            self.decoders[key] = (tf.function(decode.python_function, jit_compile=True) if xla
                                  else decode)
        return self.decoders[key]

    def applies(self, engine: str, beam: int) -> bool:
        return engine in self.engines and (
            engine != "inprocess_xla" or beam == 1 or self.args.xla_beam)

    def call(self, engine: str, beam: int, inputs: dict[str, Any]) -> list[int]:
        """One decode of the batch; the number of tokens of each output."""
        import tensorflow as tf

        if engine.startswith("inprocess"):
            out = self._decoder(beam, engine == "inprocess_xla")(inputs["ids"]).numpy()
            return [int((row[0] != 0).sum()) for row in out]
        kind, weights = engine.split("_")
        if kind == "savedmodel":
            out = self.savedmodels[weights](
                sentences=inputs["text"], beam_size=tf.constant(beam, tf.int32),
                max_length=tf.constant(self.tokens, tf.int32), n_best=tf.constant(1, tf.int32),
                no_repeat_ngram=tf.constant(0, tf.int32))
            out["translations"].numpy()  # the text, read back as the client would
            return [int(n) for n in out["lengths"].numpy()]
        results = self.ct2[weights].translate_batch(
            inputs["words"], beam_size=beam, num_hypotheses=1, length_penalty=0.0,
            max_input_length=0, min_decoding_length=self.tokens,
            max_decoding_length=self.tokens, suppress_sequences=[["<pad>"], ["<start>"]],
            return_scores=True)
        [" ".join(result.hypotheses[0]) for result in results]  # the text, as the SavedModel's
        return [len(result.hypotheses[0]) for result in results]


# -- timing ----------------------------------------------------------------------------------


def time_cell(engines: Engines, batch: int, beam: int, seed: int) -> list[dict[str, Any]]:
    """The engines of one (batch, beam) timed in turns: one row per engine."""
    from _lib.benchmark import alternate

    inputs = engines.inputs(batch, seed)
    names = [e for e in ENGINES if engines.applies(e, beam)]
    first, lengths = {}, {}
    for name in names:  # untimed: tracing, graph optimization; and the outputs' lengths
        start = time.perf_counter()
        lengths[name] = engines.call(name, beam, inputs)
        first[name] = time.perf_counter() - start

    def measure(name: str):
        def once() -> float:
            start = time.perf_counter()
            engines.call(name, beam, inputs)
            return time.perf_counter() - start
        return once

    figures = alternate({name: measure(name) for name in names}, engines.args.rounds)
    rows = []
    for name in names:
        seconds = statistics.median(figures[name])
        rows.append({
            "size": engines.size, "batch": batch, "beam": beam, "engine": name,
            "tokens": engines.tokens, "rounds_s": figures[name], "median_ms": 1000 * seconds,
            "ms_per_sentence": 1000 * seconds / batch,
            "tokens_per_s": batch * engines.tokens / seconds, "first_call_s": first[name],
            "full_length": all(n == engines.tokens for n in lengths[name])})
    return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (size, batch, beam): each ratio of `RATIOS` whose two engines were timed."""
    cells: dict[tuple, dict[str, float]] = {}
    for row in rows:
        cells.setdefault((row["size"], row["batch"], row["beam"]), {})[row["engine"]] = (
            row["tokens_per_s"])
    out = []
    for (size, batch, beam), speeds in cells.items():
        entry = {"size": size, "batch": batch, "beam": beam}
        for name, (top, bottom) in RATIOS.items():
            if top in speeds and bottom in speeds:
                entry[name] = speeds[top] / speeds[bottom]
        out.append(entry)
    return out


def targets(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 39's targets: in how many cells each was met, and which were not."""
    out = {}
    for name, least in TARGETS.items():
        measured = [c for c in cells if name in c]
        missed = [{"size": c["size"], "batch": c["batch"], "beam": c["beam"],
                   "ratio": c[name]} for c in measured if c[name] < least]
        out[name] = {"at_least": least, "cells": len(measured),
                     "met": len(measured) - len(missed), "missed": missed}
    return out


def profile_savedmodels(engines: Engines, batch: int, beam: int, seed: int) -> dict[str, Any]:
    """Where one call of each SavedModel spends its time: op time by group (summed over
    threads) and the top op types, from a TensorFlow profiler trace."""
    import collections

    import tensorflow as tf

    from _lib.profiling import classify, op_times

    inputs = engines.inputs(batch, seed)
    out = {}
    for weights in engines.savedmodels:
        name = f"savedmodel_{weights}"
        engines.call(name, beam, inputs)  # warm
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            start = time.perf_counter()
            engines.call(name, beam, inputs)
            wall = time.perf_counter() - start
            tf.profiler.experimental.stop()
            by_op = op_times(logdir)
        groups: collections.Counter = collections.Counter()
        types: collections.Counter = collections.Counter()
        for (op_name, op_type), seconds in by_op.items():
            groups[classify(op_name, op_type)] += seconds
            types[op_type] += seconds
        total = sum(groups.values())
        out[name] = {"wall_ms": 1000 * wall, "op_ms": 1000 * total,
                     "groups": {g: {"ms": 1000 * s, "share": s / max(total, 1e-12)}
                                for g, s in groups.most_common()},
                     "top_ops_ms": {t: 1000 * s for t, s in types.most_common(12)}}
    return {"size": engines.size, "batch": batch, "beam": beam, **out}


# -- the command -----------------------------------------------------------------------------


def check_args(args: argparse.Namespace) -> None:
    args.sizes = args.sizes.split(",") if isinstance(args.sizes, str) else list(args.sizes)
    args.engines = (args.engines.split(",") if isinstance(args.engines, str)
                    else list(args.engines))
    for size in args.sizes:
        if size not in TRANSLATOR_SIZES:
            raise UserError(f"unknown size {size!r}; choose from: {', '.join(TRANSLATOR_SIZES)}")
    for engine in args.engines:
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r}; choose from: {', '.join(ENGINES)}")
    for option in ("tokens", "source_length", "rounds", "threads"):
        if getattr(args, option) < 1:
            raise UserError(f"--{option.replace('_', '-')} must be >= 1, "
                            f"got {getattr(args, option)}")
    if any(e.startswith("ctranslate2") for e in args.engines):
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            raise UserError(f"the CTranslate2 engines need the ctranslate2 package; install "
                            f"the benchmark's requirements (pip install -r {REQUIREMENTS}) or "
                            "leave them out of --engines") from None


def run_main(args: argparse.Namespace) -> int:
    apply_quick(args, {"sizes": "tiny", "batches": [2], "beams": [1], "rounds": 1})
    check_args(args)
    if args.out:
        check_output_file(args.out, "--out")
    import tensorflow as tf

    from _lib.benchmark import format_table, write_json

    try:  # only before TensorFlow's first op (a test's process has run some: its pools stay)
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    except RuntimeError:
        pass
    # A decoder is traced once per batch size: TensorFlow's retracing warning says so, no more.
    tf.get_logger().setLevel("ERROR")
    before, started = load_average(), time.perf_counter()
    rows, built, profiles = [], {}, []
    with tempfile.TemporaryDirectory(prefix="engines-") as tmp:
        for size in args.sizes:
            engines = Engines(size, args, Path(tmp))
            built[size] = engines.info
            for batch in sorted(set(args.batches)):
                for beam in sorted(set(args.beams)):
                    cell = time_cell(engines, batch, beam, seed=batch)
                    rows += cell
                    for row in cell:
                        print(format_table([row], COLUMNS).splitlines()[-1], flush=True)
                    if args.profile and engines.savedmodels:
                        profiles.append(profile_savedmodels(engines, batch, beam, seed=batch))
            del engines
    cells = ratios(rows)
    met = targets(cells)
    after = load_average()
    print()
    print(format_table(rows, COLUMNS))
    print()
    for name, figures in met.items():
        print(f"{name} >= {figures['at_least']}: met in {figures['met']} of {figures['cells']} "
              "cells")
    if args.out:
        threads = {"tensorflow_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                   "tensorflow_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                   "ctranslate2_intra_threads": args.threads, "ctranslate2_inter_threads": 1}
        import ctranslate2

        with reported_write(args.out, "--out"):
            write_json(args.out, rows, command=" ".join(sys.argv), quick=args.quick,
                       tokens=args.tokens, source_length=args.source_length,
                       rounds=args.rounds, threads=threads,
                       ctranslate2=getattr(ctranslate2, "__version__", None),
                       load_average_before=before, load_average_after=after,
                       wall_s=time.perf_counter() - started,
                       forcing={"savedmodel": "logits of <pad>, <start>, <end> get -1e9 at "
                                "every step", "inprocess": "logits of <pad>, <end> get -1e9 at "
                                "every step (_lib.decoding; ids, so <start> is a token too)",
                                "ctranslate2": "min_decoding_length = max_decoding_length = "
                                "tokens; suppress_sequences <pad>, <start>"},
                       models=built, ratios=cells, targets=met, profiles=profiles)
        print(f"wrote {args.out}")
    short = [r for r in rows if not r["full_length"]]
    if short:
        print(f"error: {len(short)} setting(s) gave outputs of other than {args.tokens} "
              "tokens", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the benchmark; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
