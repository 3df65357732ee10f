"""What `--deterministic` costs: training-step time of the captioner demo with and without it.

    python scripts/benchmarks/benchmark_determinism.py --rounds 3 --steps 30 \\
        --out docs/records/benchmarks/determinism_cpu.json

`--deterministic` turns Grappler (TensorFlow's graph optimizer) off for the whole process, so
the two settings cannot share one: each measurement is a child process that builds the
`demo` preset's captioner (soft or `--attention hard`), runs `--warmup` untimed training steps
on synthetic batches and then times `--steps`. The parent alternates the two settings, the
order reversed every other round (so a change in the machine's load falls on both alike), and
reports the median milliseconds per step of each and their ratio. Prints a table and writes
JSON with `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_file, reported_write

SETTINGS = ("default", "deterministic")


def child(setting: str, attention: str, steps: int, warmup: int, batch_size: int) -> dict:
    """Builds the model and times its training step; returns milliseconds per step."""
    import keras
    import numpy as np
    import tensorflow as tf

    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from captioner.train import apply_overrides, build_model
    from common.training.step import make_train_step
    from common.training.trainer import make_deterministic

    make_deterministic(0, strict=setting == "deterministic")
    config = apply_overrides(apply_overrides(CaptionerRunConfig(), get_preset("demo")),
                             # coverage is soft attention's (the preset's own)
                             {"decoder": {"attention": attention,
                                          "coverage": attention == "soft"}})
    vocab, length = 40, config.data.max_length
    rng = np.random.default_rng(0)
    caption = rng.integers(4, vocab, size=(batch_size, length + 1)).astype("int32")
    caption[:, 0] = 1
    height, width = config.encoder.image_size
    batch = {"image": rng.uniform(0, 255, (batch_size, height, width, 3)).astype("float32"),
             "caption_in": caption[:, :-1], "caption_out": caption[:, 1:]}
    strategy = tf.distribute.get_strategy()
    model = build_model(config, vocab)
    optimizer = keras.optimizers.Adam(1e-3)
    model.loss_terms(batch, training=False)
    optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, strategy)
    batches = iter(tf.data.Dataset.from_tensors(batch).repeat())
    for _ in range(warmup):
        step(next(batches))["loss"].numpy()
    start = time.perf_counter()
    for _ in range(steps):
        result = step(next(batches))
    result["loss"].numpy()
    return {"setting": setting, "ms_per_step": 1000 * (time.perf_counter() - start) / steps}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_determinism.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--attention", choices=("soft", "hard"), default="hard",
                   help="the captioner's attention")
    p.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step")
    p.add_argument("--rounds", type=int, default=3, help="measurements of each setting")
    p.add_argument("--out", help="also write the results to this JSON file")
    p.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    # The parent only starts children: TensorFlow is imported by each child (`child`).
    p.set_defaults(_run=run, _uses_tensorflow=False)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    parser = build_parser()
    parser.set_defaults(_argv=list(sys.argv[1:] if argv is None else argv))  # for the record
    return run_cli(parser, argv)


def run(args: argparse.Namespace) -> int:
    for name in ("steps", "batch_size", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got "
                            f"{getattr(args, name)}")
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    if args.child:
        print(json.dumps(child(args.child, args.attention, args.steps, args.warmup,
                               args.batch_size)))
        return 0
    if args.out:
        check_output_file(args.out, "--out")

    from _lib.benchmark import alternate

    def measure(setting: str):
        def once() -> float:
            done = subprocess.run(
                [sys.executable, __file__, "--child", setting, "--attention", args.attention,
                 "--steps", str(args.steps), "--warmup", str(args.warmup),
                 "--batch-size", str(args.batch_size)],
                capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            if done.returncode != 0:
                raise SystemExit(f"benchmark_determinism: the {setting} child failed:\n"
                                 f"{done.stderr[-2000:]}")
            return json.loads(done.stdout.strip().splitlines()[-1])["ms_per_step"]
        return once

    figures = alternate({s: measure(s) for s in SETTINGS}, args.rounds)
    medians = {s: statistics.median(v) for s, v in figures.items()}
    result = {"command": " ".join(["python", "scripts/benchmarks/benchmark_determinism.py",
                                   *args._argv]),
              "attention": args.attention, "batch_size": args.batch_size, "steps": args.steps,
              "rounds": args.rounds, "ms_per_step": figures, "median_ms_per_step": medians,
              "slowdown": medians["deterministic"] / medians["default"]}
    for setting in SETTINGS:
        print(f"{setting:>13}: {medians[setting]:8.1f} ms/step (median of "
              f"{', '.join(f'{v:.1f}' for v in figures[setting])})")
    print(f"--deterministic takes {result['slowdown']:.2f}x the time of a step")
    if args.out:
        with reported_write(args.out, "--out"), open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
