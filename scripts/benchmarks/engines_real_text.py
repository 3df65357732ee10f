"""One trained translator on a real test set, every engine in turns: decode time and BLEU.

    python scripts/benchmarks/engines_real_text.py RUN_DIR --data ../shared/data/spa-eng/test.tsv \
        --out docs/records/benchmarks/engines_real_text.json
    python scripts/benchmarks/engines_real_text.py RUN_DIR --data DATA.tsv --limit 64 --quick

`engines.py` times the engines on random weights with every output forced to one length, the
per-token measure; here a trained run (the `spa-eng-cpu` recipe's averaged run) translates a
real split, where sentences end when the model ends them, as a user's do. The run is exported
once (a SavedModel, float32 and int8; CTranslate2, float32 and int8) into a temporary folder;
then for each (beam, batch) cell every engine translates the whole split through the package's
own translators, as `seq2seq evaluate` does:

| engine | what translates |
|---|---|
| `run_directory` | `seq2seq.inference.Translator` of RUN_DIR, in process |
| `savedmodel_float32`, `savedmodel_int8` | `seq2seq.export.ExportedTranslator` of the export |
| `ctranslate2_float32`, `ctranslate2_int8` | `seq2seq.ctranslate2_translator.CTranslate2Translator` |

Each engine first translates a batch of the longest and one of the shortest sentences untimed
(tracing, graph optimization, first-call setup); then the cell's engines run in turns over `--rounds` rounds (the order reversed
every other round), each timed as the wall time of translating every sentence (tokenization,
batching longest first, decoding and detokenization included) and scored with sacreBLEU against
the references. The JSON records each engine's seconds (median and every round), sentences per
second, BLEU, the ratios of seconds to CTranslate2 float32's and the SavedModel's to the run
directory's, how many translations equal the run directory's, the threads (TensorFlow's two
pools and CTranslate2's `intra_threads` are `--threads`, its `inter_threads` 1) and the load
average before and after. Quote ratios measured in one run; absolute times hold only for the
machine and its load.
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

from common.cli import HelpFormatter, Parser, beam_size_list, positive_int, run_cli  # noqa: E402,I001
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

from _lib.benchmark import load_average  # noqa: E402

ENGINES = ("run_directory", "savedmodel_float32", "savedmodel_int8", "ctranslate2_float32",
           "ctranslate2_int8")
REFERENCE = "ctranslate2_float32"
PROG = "engines_real_text.py"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a trained Transformer translator run")
    p.add_argument("--data", required=True, help="a TSV of source<TAB>reference pairs")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help=f"comma-separated, of: {', '.join(ENGINES)}")
    p.add_argument("--beams", type=beam_size_list, default="1,4", help="beam sizes")
    p.add_argument("--batches", type=beam_size_list, default="1,32", help="batch sizes")
    p.add_argument("--rounds", type=positive_int, default=1, help="alternating rounds a cell")
    p.add_argument("--threads", type=positive_int, default=2,
                   help="TensorFlow's pools and CTranslate2's intra_threads")
    p.add_argument("--limit", type=positive_int, help="only the first N pairs")
    p.add_argument("--quick", action="store_true", help="beam 1 and batch 32 only")
    p.add_argument("--out", help="write the results to this JSON file")
    p.set_defaults(_run=run_main)
    return p


def read_pairs(path: str, limit: int | None) -> tuple[list[str], list[str]]:
    from seq2seq.datasets.tsv import read_tsv

    if not Path(path).is_file():
        raise UserError(f"--data {path}: no such file; expected a TSV of source<TAB>reference")
    sources, references, _ = read_tsv(path, size=limit)
    if not sources:
        raise UserError(f"--data {path}: no pairs")
    return sources, references


def open_engines(run_dir: str, names: list[str], folder: Path, threads: int,
                 beams: list[int]) -> dict[str, Any]:
    """Each engine of `names`, its export written into `folder` first."""
    from seq2seq.ctranslate2_export import export_translator
    from seq2seq.ctranslate2_translator import CTranslate2Translator
    from seq2seq.export import ExportedTranslator, TranslatorModule
    from seq2seq.inference import Translator

    engines: dict[str, Any] = {}
    sizes = sorted(set(beams) | {1})
    for name in names:
        if name == "run_directory":
            engines[name] = Translator.from_run_dir(run_dir)
        elif name.startswith("savedmodel_"):
            out = folder / name
            TranslatorModule.export_run(run_dir, out, beam_sizes=sizes,
                                        quantization=name.split("_")[1])
            engines[name] = ExportedTranslator(out)
        else:
            out = folder / name
            export_translator(Translator.from_run_dir(run_dir), out,
                              quantization=name.split("_")[1], beam_sizes=sizes,
                              run_dir=run_dir)
            engines[name] = CTranslate2Translator(out, intra_threads=threads, inter_threads=1)
    return engines


def time_cell(engines: dict[str, Any], sources: list[str], references: list[str], beam: int,
              batch: int, rounds: int, lowercase: bool) -> dict[str, Any]:
    from seq2seq.evaluate import score_translations

    names = list(engines)
    # Untimed first: the batches of the longest and of the shortest sentences, so that the
    # tracing of a new input shape (an in-process function generalizes its shapes at the
    # second), graph optimization and each engine's first-call setup fall outside the timing.
    order = sorted(range(len(sources)), key=lambda i: len(sources[i].split()))
    warm = [sources[i] for i in (order[-batch:] + order[:batch])]
    for name in names:
        engines[name].translate(warm, beam_size=beam, batch_size=batch)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    texts: dict[str, list[str]] = {}
    for round_ in range(rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            out = engines[name].translate(sources, beam_size=beam, batch_size=batch)
            seconds[name].append(time.perf_counter() - start)
            texts[name] = [t.text for t in out]
    rows = {}
    for name in names:
        median = round(statistics.median(seconds[name]), 4)
        scores = score_translations(texts[name], references, lowercase=lowercase)
        rows[name] = {"seconds": median, "rounds_s": [round(s, 4) for s in seconds[name]],
                      "sentences_per_s": round(len(sources) / median, 2),
                      "bleu": round(scores["bleu"], 2)}
        if "run_directory" in texts:
            rows[name]["same_text_as_run_directory"] = sum(
                a == b for a, b in zip(texts[name], texts["run_directory"]))
    ratios = {}
    if REFERENCE in rows:
        for name in names:
            ratios[f"{name}_over_{REFERENCE}"] = round(
                rows[name]["seconds"] / rows[REFERENCE]["seconds"], 3)
    if "run_directory" in rows and "savedmodel_float32" in rows:
        ratios["savedmodel_float32_over_run_directory"] = round(
            rows["savedmodel_float32"]["seconds"] / rows["run_directory"]["seconds"], 3)
    return {"beam_size": beam, "batch_size": batch, "engines": rows, "ratios": ratios}


def run_main(args: argparse.Namespace) -> int:
    names = [n for n in args.engines.split(",") if n]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        raise UserError(f"--engines: unknown {', '.join(unknown)}; choose of {', '.join(ENGINES)}")
    if args.out:
        check_output_file(args.out, "--out")
    beams, batches = (([1], [32]) if args.quick else (args.beams, args.batches))
    sources, references = read_pairs(args.data, args.limit)
    import tensorflow as tf

    try:  # only before TensorFlow's first op (a test's process has run some: its pools stay)
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    except RuntimeError:
        pass
    from common.config import from_dict, load_json
    from seq2seq.config import RunConfig

    config = from_dict(RunConfig, load_json(Path(args.run_dir) / "config.json"))
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="engines-real-") as folder:
        engines = open_engines(args.run_dir, names, Path(folder), args.threads, beams)
        cells = []
        for beam in beams:
            for batch in batches:
                cell = time_cell(engines, sources, references, beam, batch, args.rounds,
                                 config.data.lowercase)
                cells.append(cell)
                print(f"beam {beam}, batch {batch}: " + ", ".join(
                    f"{n} {r['seconds']:.1f} s (BLEU {r['bleu']:.2f})"
                    for n, r in cell["engines"].items()), flush=True)
    if args.out:
        import ctranslate2

        from _lib.benchmark import write_json

        with reported_write(args.out, "--out"):
            write_json(args.out, cells, command=" ".join([PROG, *sys.argv[1:]]),
                       run_dir=str(args.run_dir), data=str(args.data), sentences=len(sources),
                       rounds=args.rounds, threads={
                           "tensorflow_intra_op": args.threads,
                           "tensorflow_inter_op": args.threads,
                           "ctranslate2_intra_threads": args.threads,
                           "ctranslate2_inter_threads": 1},
                       ctranslate2=getattr(ctranslate2, "__version__", None),
                       load_average_before=load_before, load_average_after=load_average())
        print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the benchmark; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
