"""The token loss and its gradient by the logits: the closed form against automatic
differentiation, on the backend Keras runs (TensorFlow by default; `KERAS_BACKEND=jax`).

    python scripts/benchmark_loss.py --tokens 2048 --vocab 32000 --rounds 5 \\
        --out docs/benchmarks/loss_gradient_cpu.json

`seq2seq.losses.token_loss_terms` differentiates through `smoothed_token_nll`, whose gradient
is written in closed form (`softmax - q`, one pass over the logits); `closed_form_gradient=False`
differentiates the same formula automatically. Each form's step (loss sum and its gradient,
compiled: `tf.function` or `jax.jit`) over the same random logits is timed for `--steps` calls
per round, the two forms alternating and their order reversed every other round; prints the
median milliseconds of each and their ratio (autodiff / closed) and, with `--out`, writes them
as JSON, with the largest difference between the two gradients.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

FORMS = {"closed": True, "autodiff": False}


def make_step(closed: bool, targets, label_smoothing: float):
    """`logits -> d loss_sum / d logits`, compiled for the backend."""
    import keras

    from seq2seq.losses import token_loss_terms

    def loss(x):
        return token_loss_terms(x, targets, label_smoothing,
                                closed_form_gradient=closed)["loss_sum"]

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(jax.grad(loss))
    import tensorflow as tf

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(x)
        return tape.gradient(value, x)

    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048, help="rows of logits (B x T)")
    p.add_argument("--vocab", type=int, default=32000, help="columns of logits (V)")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=10, help="timed calls per form and round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    for name in ("tokens", "vocab", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    logits = keras.ops.convert_to_tensor(
        rng.normal(size=(args.tokens, args.vocab)).astype("float32"))
    targets = keras.ops.convert_to_tensor(
        rng.integers(1, args.vocab, size=(args.tokens,)).astype("int32"))
    steps = {name: make_step(closed, targets, args.label_smoothing)
             for name, closed in FORMS.items()}
    grads = {name: np.asarray(step(logits)) for name, step in steps.items()}  # compiles
    times = {name: [] for name in FORMS}
    for round_ in range(args.rounds):
        for name in (FORMS if round_ % 2 == 0 else reversed(list(FORMS))):
            start = time.perf_counter()
            for _ in range(args.steps):
                grad = steps[name](logits)
            np.asarray(grad)  # waits for the last call
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    medians = {name: statistics.median(ms) for name, ms in times.items()}
    report = {"backend": keras.backend.backend(), "tokens": args.tokens, "vocab": args.vocab,
              "label_smoothing": args.label_smoothing, "steps": args.steps,
              "rounds": args.rounds, "ms": times, "median_ms": medians,
              "autodiff_over_closed": medians["autodiff"] / medians["closed"],
              "max_abs_grad_difference": float(np.abs(grads["closed"]
                                                      - grads["autodiff"]).max())}
    print(f"{report['backend']}, logits {args.tokens} x {args.vocab}: closed form "
          f"{medians['closed']:.1f} ms, autodiff {medians['autodiff']:.1f} ms "
          f"(autodiff / closed {report['autodiff_over_closed']:.2f}); gradients differ by "
          f"at most {report['max_abs_grad_difference']:.1e}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
