"""Benchmark: one-input latency of an exported SavedModel vs the in-process Keras model.

RUN_DIR is a translator or a captioner run (its `config.json` says which). Both sides take the
same input and give the same kind of result, so that neither is charged for work the other
skips:

- savedmodel: the export loaded by its client (`captioner.export.ExportedCaptioner.caption_bytes`
  on the encoded image bytes, `seq2seq.export.ExportedTranslator.translate` on the sentence): one
  call of the signature with options (image decoding and resizing, or tokenization; the search;
  ids -> words in the graph), the outputs turned into `Caption` / `Translation` objects;
- keras: the run directory in process (`captioner.inference.read_image` with Pillow on the same
  bytes, then `CaptionerRun.caption_batch`; `seq2seq.inference.Translator.translate`): Python
  pre- and post-processing around the module's `tf.function`.

For each beam size both sides are warmed up (tracing), then timed in turns
(`_lib.benchmark.alternate`, the order reversed every other round): one round of a
side is the median of `--runs` calls; a side's figure is the median of its `--rounds` round
medians, and `ratio` (SavedModel / in-process) is the ratio of those two medians. The words
and the text of both sides are compared. The JSON (`--out`) records the machine and its load
average (`_lib.benchmark.device_info`). Without `--export`, the run is exported
first into a temporary directory with the beam sizes measured.

Usage:
    python scripts/benchmarks/benchmark_serving.py RUN_DIR [--export EXPORT_DIR] --out bench.json
    python scripts/benchmarks/benchmark_serving.py CAPTIONER_RUN \\
        --image assets/samples/shapes_2.png --beam-sizes 1,3 \\
        --out docs/records/benchmarks/serving_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, apply_quick, beam_size_list, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

SENTENCE = "the 25th of November 2026"
IMAGE = "assets/samples/shapes_2.png"  # in the repository, wherever the script is run from
ROOT = Path(__file__).resolve().parents[2]
# `config.json`'s family -> the name used in the report.
FAMILIES = {"captioner": "captioner", "seq2seq": "translator"}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_serving.py", description=__doc__.split("\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a translator or captioner run directory")
    p.add_argument("--export", metavar="EXPORT_DIR",
                   help="its export (default: export it now to a temporary dir)")
    p.add_argument("--sentence", help=f"the sentence a translator run translates (default: "
                   f"{SENTENCE!r})")
    p.add_argument("--image", help=f"the image a captioner run captions (default: the "
                   f"repository's {IMAGE})")
    p.add_argument("--beam-sizes", type=beam_size_list, default="1,3",
                   help="comma-separated beam sizes to time")
    p.add_argument("--runs", type=int, default=30, help="timed calls per side in one round")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds per beam size, the sides alternating (at least 3)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls of each side first")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 3 rounds of 2 calls after 1 warm-up call (options "
                        "given win)")
    p.add_argument("--out", help="write the figures to this JSON file")
    p.set_defaults(_run=run)
    return p


def check_args(args: argparse.Namespace) -> str:
    """Applies `--quick` and checks every option and path before any work; returns the run's
    family ("captioner" or "translator")."""
    from common.config import load_json

    apply_quick(args, {"rounds": 3, "runs": 2, "warmup": 1})
    if args.rounds < 3:
        raise UserError(f"--rounds must be at least 3 (medians of rounds), got {args.rounds}")
    if args.runs < 1 or args.warmup < 0:
        raise UserError(f"--runs must be at least 1 and --warmup at least 0, got --runs "
                        f"{args.runs}, --warmup {args.warmup}")
    args.beam_sizes = sorted(set(args.beam_sizes))
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(f"RUN_DIR {run_dir}: no such folder; expected a translator or "
                        "captioner run directory")
    config = load_json(run_dir / "config.json", "a run's config (RUN_DIR: a translator or "
                       "captioner run directory)")
    family = FAMILIES.get(config.get("family") if isinstance(config, dict) else None)
    if family is None:
        raise UserError(f"RUN_DIR {run_dir}: its config.json names no translator or captioner "
                        "run")
    if family == "captioner":
        from common.images import load_image

        if args.sentence is not None:
            raise UserError(f"--sentence is for a translator run; {run_dir} is a captioner run "
                            "(it captions --image)")
        args.image = str(ROOT / IMAGE) if args.image is None else args.image
        if not Path(args.image).is_file():
            raise UserError(f"--image {args.image}: no such file; expected an image")
        load_image(args.image)  # a DataError naming the file when it is not one
    else:
        if args.image is not None:
            raise UserError(f"--image is for a captioner run; {run_dir} is a translator run "
                            "(it translates --sentence)")
        args.sentence = SENTENCE if args.sentence is None else args.sentence
    if args.export is not None:
        check_export(args.export, family, args.beam_sizes)
    if args.out:
        check_output_file(args.out, "--out", inputs=[args.image, run_dir / "config.json"])
    return family


def check_export(export: str, family: str, beam_sizes: list[int]) -> None:
    """`--export` is an export of the run's family with every beam size to time."""
    import importlib

    from common.export import savedmodel

    module = importlib.import_module("captioner.export" if family == "captioner"
                                     else "seq2seq.export")
    try:
        info = savedmodel.require_kind(export, module.KIND, module.WHAT)
    except UserError as error:
        raise UserError(f"--export {error}") from None
    missing = [b for b in beam_sizes if b not in info.get("beam_sizes", ())]
    if missing:
        raise UserError(f"--beam-sizes {','.join(map(str, missing))}: the export {export} has "
                        f"beam sizes {info.get('beam_sizes')} (export it with them, or leave "
                        "out --export)")


def median_ms(fn, runs: int) -> float:
    """The median wall time of `runs` calls of `fn()`, in milliseconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def compare(sides: dict, args: argparse.Namespace, beam: int) -> dict:
    """Times the two `sides` (name -> a call returning `(text, words)`) for one beam size."""
    from _lib.benchmark import alternate

    results = {}
    for name, fn in sides.items():
        for _ in range(max(1, args.warmup)):
            results[name] = fn()
    rounds = alternate({name: (lambda fn=fn: median_ms(fn, args.runs))
                        for name, fn in sides.items()}, args.rounds)
    saved, keras = (statistics.median(rounds[name]) for name in ("savedmodel", "keras"))
    return {
        "beam_size": beam,
        "savedmodel_ms": saved,
        "keras_ms": keras,
        "ratio": saved / keras,
        "savedmodel_rounds_ms": rounds["savedmodel"],
        "keras_rounds_ms": rounds["keras"],
        "same_output": results["savedmodel"] == results["keras"],
        "text": results["keras"][0],
        "words": list(results["keras"][1]),
        "savedmodel_output": [results["savedmodel"][0], list(results["savedmodel"][1])],
    }


@contextlib.contextmanager
def export_dir(args: argparse.Namespace, export_run):
    """`--export`, or the run exported now (the beam sizes measured) into a temporary dir."""
    if args.export is not None:
        yield args.export
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "export")
        export_run(args.run_dir, out, beam_sizes=args.beam_sizes)
        yield out


def captioner_rows(args: argparse.Namespace) -> list[dict]:
    """One row per beam size: the export and the run directory captioning `--image`."""
    from captioner.export import ExportedCaptioner, export_run
    from captioner.inference import CaptionerRun, read_image

    run = CaptionerRun(args.run_dir)
    with open(args.image, "rb") as f:
        data = f.read()
    rows = []
    with export_dir(args, export_run) as path:
        exported = ExportedCaptioner(path)
        for beam in args.beam_sizes:

            def savedmodel(beam=beam):
                caption = exported.caption_bytes([data], beam_size=beam)[0]
                return caption.text, caption.words

            def keras(beam=beam):
                pixels = read_image(data, run.image_size)[None]
                caption = run.caption_batch(pixels, beam_size=beam)[0]
                return caption.text, caption.words

            rows.append(compare({"savedmodel": savedmodel, "keras": keras}, args, beam))
    return rows


def translator_rows(args: argparse.Namespace) -> list[dict]:
    """One row per beam size: the export and the run directory translating `--sentence`."""
    from seq2seq.export import ExportedTranslator, export_run
    from seq2seq.inference import Translator

    translator = Translator.from_run_dir(args.run_dir)
    rows = []
    with export_dir(args, export_run) as path:
        exported = ExportedTranslator(path)
        for beam in args.beam_sizes:

            def savedmodel(beam=beam):
                out = exported.translate([args.sentence], beam_size=beam)[0]
                return out.text, out.tokens

            def keras(beam=beam):
                out = translator.translate([args.sentence], beam_size=beam)[0]
                return out.text, out.tokens

            rows.append(compare({"savedmodel": savedmodel, "keras": keras}, args, beam))
    return rows


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option or path prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    captioner = check_args(args) == "captioner"
    from _lib.benchmark import write_json

    rows = captioner_rows(args) if captioner else translator_rows(args)
    image = IMAGE if args.image == str(ROOT / IMAGE) else args.image  # as the docs name it
    subject = {"image": image} if captioner else {"sentence": args.sentence}
    same = all(row["same_output"] for row in rows)
    print(f"{'image' if captioner else 'sentence'}: {next(iter(subject.values()))!r}; "
          f"{args.rounds} rounds of {args.runs} calls per side after {args.warmup} warm-up; "
          f"same output: {same}")
    print(f"{'beam':>4} {'savedmodel ms':>14} {'in-process ms':>14} {'ratio':>6}  output")
    for r in rows:
        print(f"{r['beam_size']:>4} {r['savedmodel_ms']:>14.2f} {r['keras_ms']:>14.2f} "
              f"{r['ratio']:>6.2f}  {r['text']}")
    if args.out:
        with reported_write(args.out, "--out"):
            path = write_json(args.out, rows, family="captioner" if captioner else "translator",
                              run_dir=str(args.run_dir), **subject, runs=args.runs,
                              rounds=args.rounds, warmup=args.warmup, same_output=same)
        print(f"wrote {path}")
    if not same:
        print("error: the SavedModel and the in-process model gave different outputs",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
