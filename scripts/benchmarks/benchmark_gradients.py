"""Closed-form gradients against automatic differentiation: the token loss and the layer norm,
on the backend Keras runs (TensorFlow by default; `KERAS_BACKEND=jax`).

    python scripts/benchmarks/benchmark_gradients.py --op loss --rows 2048 --width 32000 \\
        --rounds 5 --out docs/records/benchmarks/loss_gradient_cpu.json
    python scripts/benchmarks/benchmark_gradients.py --op layer-norm --rows 16384 --width 512 \\
        --rounds 5 --out docs/records/benchmarks/layer_norm_gradient_cpu.json

`--op loss`: `seq2seq.losses.token_loss_terms` over `(rows, width)` logits (a `width`-word
vocabulary), its gradient through `smoothed_token_nll`'s closed form (`softmax - q`) or, with
`closed_form_gradient=False`, by automatic differentiation of the same formula. `--op
layer-norm`: `common.layers.layer_norm` over `(rows, width)` activations, its closed-form
gradient, against `keras.ops.layer_normalization` differentiated automatically; the gradient
of `sum(y * w)` by the input, the scale and the offset. Each form's step (compiled:
`tf.function` or `jax.jit`) over the same random inputs is timed for `--steps` calls per
round, the two forms alternating and their order reversed every other round; prints the
median milliseconds of each and their ratio (autodiff / closed) and, with `--out`, writes
them as JSON, with the largest difference between the two forms' gradients.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_file, reported_write

FORMS = ("closed", "autodiff")


def loss_function(closed: bool, rng, rows: int, width: int, label_smoothing: float):
    """`(function of the differentiated inputs, those inputs)` for `--op loss`."""
    from keras import ops

    from seq2seq.losses import token_loss_terms

    targets = ops.convert_to_tensor(rng.integers(1, width, size=(rows,)).astype("int32"))

    def loss(logits):
        return token_loss_terms(logits, targets, label_smoothing,
                                closed_form_gradient=closed)["loss_sum"]

    return loss, [rng.normal(size=(rows, width)).astype("float32")]


def layer_norm_function(closed: bool, rng, rows: int, width: int, label_smoothing: float):
    """`(function of the differentiated inputs, those inputs)` for `--op layer-norm`."""
    from keras import ops

    from common.layers import layer_norm

    w = ops.convert_to_tensor(rng.normal(size=(rows, width)).astype("float32"))

    def loss(x, gamma, beta):
        y = (layer_norm(x, gamma, beta, 1e-5) if closed
             else ops.layer_normalization(x, gamma, beta, epsilon=1e-5))
        return ops.sum(y * w)

    inputs = [rng.normal(size=(rows, width)).astype("float32"),
              (1 + 0.1 * rng.normal(size=(width,))).astype("float32"),
              (0.1 * rng.normal(size=(width,))).astype("float32")]
    return loss, inputs


OPS = {"loss": loss_function, "layer-norm": layer_norm_function}


def compile_gradient(function):
    """`*inputs -> [d function / d input for each]`, compiled for the backend."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(jax.grad(function, argnums=tuple(range(_arity(function)))))
    import tensorflow as tf

    @tf.function
    def step(*inputs):
        with tf.GradientTape() as tape:
            for x in inputs:
                tape.watch(x)
            value = function(*inputs)
        return tape.gradient(value, list(inputs))

    return step


def _arity(function) -> int:
    import inspect

    return len(inspect.signature(function).parameters)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_gradients.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--op", default="loss", choices=sorted(OPS),
                   help="the token loss or the layer norm")
    p.add_argument("--rows", type=int, default=2048, help="rows of the input (B x T tokens)")
    p.add_argument("--width", type=int, default=32000,
                   help="columns: the vocabulary (loss) or the model width (layer-norm)")
    p.add_argument("--label-smoothing", type=float, default=0.1,
                   help="--op loss only: in [0, 1)")
    p.add_argument("--steps", type=int, default=10, help="timed calls per form and round")
    p.add_argument("--rounds", type=int, default=5, help="rounds, the two forms alternating")
    p.add_argument("--out", help="also write the results to this JSON file")
    # Runs on the backend Keras runs: TensorFlow's start-up is hidden only where it is used.
    p.set_defaults(_run=run, _runs_on_jax=True,
                   _uses_tensorflow=os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow")
    return p


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend not in ("tensorflow", "jax"):
        raise UserError(f"runs on KERAS_BACKEND tensorflow or jax, got {backend}")
    for name in ("rows", "width", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.op == "loss" and args.width < 2:
        raise UserError(f"--width must be at least 2 with --op loss (a vocabulary of "
                        f"<pad> and a word), got {args.width}")
    if not 0.0 <= args.label_smoothing < 1.0:
        raise UserError(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    if args.out:
        check_output_file(args.out, "--out")

    import keras
    import numpy as np

    steps, inputs = {}, None
    for closed, name in zip((True, False), FORMS):
        rng = np.random.default_rng(0)  # the same inputs for both forms
        function, arrays = OPS[args.op](closed, rng, args.rows, args.width,
                                        args.label_smoothing)
        inputs = [keras.ops.convert_to_tensor(a) for a in arrays]
        steps[name] = compile_gradient(function)
    grads = {name: [np.asarray(g) for g in step(*inputs)]  # compiles
             for name, step in steps.items()}
    times = {name: [] for name in FORMS}
    for round_ in range(args.rounds):
        for name in (FORMS if round_ % 2 == 0 else FORMS[::-1]):
            start = time.perf_counter()
            for _ in range(args.steps):
                result = steps[name](*inputs)
            np.asarray(result[0])  # waits for the last call
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    medians = {name: statistics.median(ms) for name, ms in times.items()}
    difference = max(float(np.abs(a - b).max())
                     for a, b in zip(grads["closed"], grads["autodiff"]))
    report = {"backend": keras.backend.backend(), "op": args.op, "rows": args.rows,
              "width": args.width, "steps": args.steps, "rounds": args.rounds, "ms": times,
              "median_ms": medians,
              "autodiff_over_closed": medians["autodiff"] / medians["closed"],
              "max_abs_grad_difference": difference}
    if args.op == "loss":
        report["label_smoothing"] = args.label_smoothing
    print(f"{report['backend']}, {args.op} of {args.rows} x {args.width}: closed form "
          f"{medians['closed']:.1f} ms, autodiff {medians['autodiff']:.1f} ms "
          f"(autodiff / closed {report['autodiff_over_closed']:.2f}); gradients differ by "
          f"at most {difference:.1e}")
    if args.out:
        with reported_write(args.out, "--out"), open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
