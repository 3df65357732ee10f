"""Where a translator's training step spends its time: a TensorFlow profiler trace of a few
steps, summed per op kind.

    python scripts/benchmarks/profile_translator.py --size keras-io --attention fused,keras
    python scripts/benchmarks/profile_translator.py --size spa-eng-cpu --precision mixed_bfloat16 \
        --steps 5 --out docs/records/benchmarks/profile_translator_spa-eng-cpu.json

The step is `benchmark_training.py`'s, beside this script (the Trainer's `make_train_step` on
synthetic batches of `--length` random ids); after `--warmup` untimed steps, `--steps` steps run
under `tf.profiler.experimental` and the trace's op events (each TensorFlow op the executor ran,
on any thread) are summed by op type into the groups of `_lib.profiling.GROUPS` (matrix
products, softmax, dropout's random numbers, layer norm, embedding lookups and their gradient,
optimizer update, ...). Op times are summed over threads, so their total can exceed the wall time of the steps
(ops run side by side); the shares are of that total. Wall time per step is printed beside it.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

from _lib.profiling import classify, op_times  # noqa: E402
from _lib.translators import TRANSLATOR_SIZES  # noqa: E402


def profile(size: str, precision: str, jit_compile: bool, batch_size: int, length: int,
            steps: int, warmup: int, attention: str = "fused") -> dict[str, Any]:
    """Profiles `steps` training steps of the Transformer at `size`: -> a dict of the wall
    time per step and the op time by group and by op type. `attention`: "fused" (the
    attention's fused projections) or "keras" (keras' attention `call`, the default)."""
    # The step and batches are benchmark_training.py's own (one harness, not a copy), loaded
    # from its file; moving that harness into `_lib` beside it is left to do.
    import importlib.util

    import tensorflow as tf

    spec = importlib.util.spec_from_file_location(
        "benchmark_training", Path(__file__).resolve().with_name("benchmark_training.py"))
    harness = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("benchmark_training", harness)  # its dataclasses look it up
    spec.loader.exec_module(harness)
    prepare, use_keras_attention = harness.prepare, harness.use_keras_attention

    from common.training import make_strategy

    _, network, step, batches = prepare("translator", "transformer", size, "synthetic",
                                        batch_size, length, precision, jit_compile,
                                        make_strategy("none"))
    use_keras_attention(network, keras_call=attention == "keras")
    for _ in range(warmup):
        float(step(next(batches))["loss"])
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for _ in range(steps):
            float(step(next(batches))["loss"])
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        by_op = op_times(logdir)
    by_group: collections.Counter = collections.Counter()
    by_type: collections.Counter = collections.Counter()
    backward = 0.0
    for (op_name, op_type), seconds in by_op.items():
        by_group[classify(op_name, op_type)] += seconds
        by_type[op_type] += seconds
        if "gradient" in op_name.lower():
            backward += seconds
    total = sum(by_group.values())
    return {"size": size, "attention": attention, "precision": precision, "jit": jit_compile,
            "batch": batch_size,
            "length": length, "steps": steps, "params": int(network.count_params()),
            "wall_ms_per_step": 1000 * wall / steps,
            "op_ms_per_step": 1000 * total / steps,
            "backward_share": backward / max(total, 1e-12),
            "groups": {g: {"ms_per_step": 1000 * s / steps, "share": s / max(total, 1e-12)}
                       for g, s in by_group.most_common()},
            "top_ops": {t: 1000 * s / steps for t, s in by_type.most_common(15)},
            "top_op_names": {f"{n}:{t}": 1000 * s / steps
                             for (n, t), s in by_op.most_common(40)}}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="profile_translator.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--size", default="keras-io", help=f"one of: {', '.join(TRANSLATOR_SIZES)}")
    p.add_argument("--precision", default="float32",
                   help="float32, mixed_bfloat16 or mixed_float16")
    p.add_argument("--jit-compile", action="store_true",
                   help="compile the step with XLA (the trace then shows XLA clusters, "
                   "not ops)")
    p.add_argument("--attention", default="fused",
                   help="comma-separated: fused (the attention's fused projections), keras "
                   "(keras' attention call, the default)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step")
    p.add_argument("--length", type=int, default=20, help="source and target tokens")
    p.add_argument("--steps", type=int, default=3, help="profiled steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--out", help="also write the profile (and device info) to this JSON file")
    p.set_defaults(_run=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.size not in TRANSLATOR_SIZES:
        raise UserError(f"unknown size {args.size!r}; "
                        f"choose one of: {', '.join(TRANSLATOR_SIZES)}")
    for name in ("batch_size", "length", "steps"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    if args.precision not in ("float32", "mixed_bfloat16", "mixed_float16"):
        raise UserError(f"--precision must be float32, mixed_bfloat16 or mixed_float16, "
                        f"got {args.precision}")
    attentions = args.attention.split(",")
    for attention in attentions:
        if attention not in ("fused", "keras"):
            raise UserError(f"--attention takes fused and/or keras, got {attention!r}")
    if args.out:
        check_output_file(args.out, "--out")
    results = []
    for attention in attentions:
        result = profile(args.size, args.precision, args.jit_compile, args.batch_size,
                         args.length, args.steps, args.warmup, attention)
        results.append(result)
        print(f"{args.size}, {attention} attention, {args.precision}"
              f"{', XLA' if args.jit_compile else ''}: "
              f"{result['wall_ms_per_step']:.0f} ms per step (wall), "
              f"{result['op_ms_per_step']:.0f} ms of ops (summed over threads), "
              f"{result['backward_share']:.0%} of them in the gradient")
        for group, figures in result["groups"].items():
            print(f"  {figures['share']:6.1%}  {figures['ms_per_step']:8.1f} ms  {group}")
        print("  top op types (ms per step): " + ", ".join(
            f"{t} {ms:.0f}" for t, ms in result["top_ops"].items()))
    if args.out:
        from _lib.benchmark import write_json

        with reported_write(args.out, "--out"):
            write_json(args.out, results, command=" ".join(sys.argv))
        print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and profiles; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
