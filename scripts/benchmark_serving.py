"""Benchmark: one-input latency of an exported SavedModel vs the in-process Keras model.

RUN_DIR is a translator or a captioner run (its `config.json` says which). For each beam size,
the same sentence (or image) is translated (or captioned) N times, after warm-up calls, by

- savedmodel: the export's signature with options (`caption_with_options` /
  `translate_with_options`, with `n_best` 1), loaded with `tf.saved_model.load` and
  called in this process (the graph does tokenization, lookup, decoding, copying and
  detokenization; for the captioner, image decoding, resizing, decoding and detokenization);
- keras: `seq2seq.inference.Translator.translate` on the run directory (Python tokenization
  and post-processing around a `tf.function` decoder), or for the captioner
  `captioner.inference.read_image` (Pillow, from the same encoded bytes in memory) and
  `CaptionerRun.caption_batch` (a `tf.function` decoder).

It reports the median and 90th percentile in milliseconds, checks that both give the same
text, prints a table and writes the figures as JSON (`--out`). Without `--export`, the run is
exported first into a temporary directory with the beam sizes measured.

Usage:
    python scripts/benchmark_serving.py RUN_DIR [--export EXPORT_DIR] --out bench.json
    python scripts/benchmark_serving.py CAPTIONER_RUN --image assets/samples/shapes_2.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a translator or captioner run directory")
    p.add_argument("--export", help="its export (default: export it now to a temporary dir)")
    p.add_argument("--sentence", default="the 25th of November 2026")
    p.add_argument("--image", default="assets/samples/shapes_2.png",
                   help="the image a captioner run captions")
    p.add_argument("--beam-sizes", default="1,4", help="comma-separated beam sizes to time")
    p.add_argument("--runs", type=int, default=50, help="timed calls per path and beam size")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    p.add_argument("--out", help="write the figures to this JSON file")
    return p.parse_args(argv)


def timed(fn, runs: int, warmup: int) -> dict:
    """Median and p90 wall time of `fn()` in milliseconds, and its last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    return {"median_ms": statistics.median(times), "p90_ms": p90, "runs": runs,
            "result": result}


@contextlib.contextmanager
def serving_signature(args: argparse.Namespace, export_run, beam_sizes: list[int]):
    """The signature with options (beam size, length, n-best) of `--export`, or of the run
    exported now into a temporary dir."""
    import tensorflow as tf

    from common.export.savedmodel import options_signature, read_info

    with tempfile.TemporaryDirectory() as tmp:
        export_dir = args.export
        if export_dir is None:
            export_dir = os.path.join(tmp, "export")
            export_run(args.run_dir, export_dir, beam_sizes=beam_sizes)
        name = options_signature(read_info(export_dir))
        yield tf.saved_model.load(export_dir).signatures[name]


def captioner_rows(args: argparse.Namespace, beam_sizes: list[int]) -> list[dict]:
    """The savedmodel and keras rows for one image, per beam size."""
    import tensorflow as tf

    from captioner.export import export_run
    from captioner.inference import CaptionerRun, read_image

    run = CaptionerRun(args.run_dir)
    with open(args.image, "rb") as f:
        data = f.read()
    rows = []
    with serving_signature(args, export_run, beam_sizes) as signature:
        images = tf.constant([data])
        max_length = tf.constant(run.config.decoder.max_length)
        for beam in beam_sizes:

            def exported(beam=beam):
                out = signature(images=images, beam_size=tf.constant(beam),
                                max_length=max_length, n_best=tf.constant(1))
                return out["captions"].numpy()[0].decode("utf-8")

            def keras_path(beam=beam):
                pixels = read_image(data, run.image_size)[None]
                return run.caption_batch(pixels, beam_size=beam)[0].text

            for name, fn in (("savedmodel", exported), ("keras", keras_path)):
                rows.append({"path": name, "beam_size": beam,
                             **timed(fn, args.runs, args.warmup)})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    import tensorflow as tf

    beam_sizes = sorted({int(b) for b in args.beam_sizes.split(",")})
    with open(os.path.join(args.run_dir, "config.json"), encoding="utf-8") as f:
        captioner = json.load(f).get("family") == "captioner"
    if captioner:
        rows = captioner_rows(args, beam_sizes)
        subject = {"image": args.image}
    else:
        rows = translator_rows(args, beam_sizes)
        subject = {"sentence": args.sentence}
    same = all(
        r["result"] == next(o["result"] for o in rows
                            if o["beam_size"] == r["beam_size"] and o["path"] == "keras")
        for r in rows
    )
    what = "caption" if captioner else "translation"
    shown = f"image: {args.image!r}" if captioner else f"sentence: {args.sentence!r}"
    print(f"{shown}; {args.runs} runs after {args.warmup} warm-up; same {what}s: {same}")
    print(f"{'path':<11} {'beam':>4} {'median ms':>10} {'p90 ms':>8}  {what}")
    for r in rows:
        print(f"{r['path']:<11} {r['beam_size']:>4} {r['median_ms']:>10.2f} "
              f"{r['p90_ms']:>8.2f}  {r['result']}")
    report = {
        **subject, "runs": args.runs, "warmup": args.warmup,
        f"same_{what}s": same, "results": rows,
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0],
                    "tensorflow": tf.__version__, "cpus": os.cpu_count()},
    }
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
    return 0 if same else 1


def translator_rows(args: argparse.Namespace, beam_sizes: list[int]) -> list[dict]:
    """The savedmodel and keras rows for one sentence, per beam size."""
    import tensorflow as tf

    from common.text import normalize
    from seq2seq.export import export_run
    from seq2seq.inference import Translator

    translator = Translator.from_run_dir(args.run_dir)
    with serving_signature(args, export_run, beam_sizes) as signature:
        max_length = translator.config.model.max_decode_length
        sentence = tf.constant([normalize(args.sentence)])
        rows = []
        for beam in beam_sizes:

            def exported(beam=beam):
                out = signature(sentences=sentence, beam_size=tf.constant(beam),
                                max_length=tf.constant(max_length), n_best=tf.constant(1))
                return out["translations"].numpy()[0].decode("utf-8")

            def keras_path(beam=beam):
                return translator.translate([args.sentence], beam_size=beam)[0].text

            for name, fn in (("savedmodel", exported), ("keras", keras_path)):
                figures = timed(fn, args.runs, args.warmup)
                rows.append({"path": name, "beam_size": beam, **figures})
    return rows


if __name__ == "__main__":
    sys.exit(main())
