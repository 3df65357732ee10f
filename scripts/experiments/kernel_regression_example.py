"""Nadaraya–Watson regression as attention pooling: fixed kernels against a learned width.

The experiment of the lecture notes (after "Dive into Deep Learning", §11.2): the function
`y = 2 sin(x) + x + ε` is sampled at `--n-train` points drawn uniformly in `[0, 4]` (sorted),
with Gaussian noise `ε ~ N(0, --noise-std²)` (the notes: zero mean, unit variance), and
regressed with `common.layers.kernel_pooling.KernelPooling`: the test inputs are the queries,
the training inputs the keys, the noisy targets the values.

Fits:
- every kernel in `--kernels` (gaussian, boxcar, epanechnikov, triangular) at every width in
  `--widths` (the Gaussian's σ, the half-width of the others);
- a Gaussian whose width is learned by full-batch gradient descent (Adam) on the
  leave-one-out squared error over the training points (each point predicted from the others;
  without leaving it out the best width is 0, which just returns the noisy targets).

Writes a figure (one panel per kernel: the truth, the noisy points, the fits) and a JSON file
with the mean squared error of every fit against the noiseless truth on `--test-points` evenly
spaced inputs in `[0, 4]`, and prints the same table. A test input with no training point
inside a compact kernel's support gets the prediction 0 (counted in the JSON as
`test_points_without_support`). Everything is seeded by `--seed`.

Usage:
    python scripts/experiments/kernel_regression_example.py --out assets/kernel_regression.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


from common.cli import (  # noqa: E402
    HelpFormatter,
    Parser,
    non_negative_float,
    positive_float,
    positive_int,
    run_cli,
)
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write, same_file  # noqa: E402

KERNEL_NAMES = ("gaussian", "boxcar", "epanechnikov", "triangular")  # = KERNELS.names()
LOW, HIGH = 0.0, 4.0


class _Formatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, and the module docstring (the epilog) kept as it is laid out."""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="kernel_regression_example.py",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=_Formatter,
    )
    p.add_argument("--out", default="assets/kernel_regression.png",
                   help="the figure (PNG, or another format matplotlib writes, by its suffix)")
    p.add_argument("--json", help="the MSE table as JSON (default: --out with a .json suffix)")
    p.add_argument("--kernels", nargs="+", choices=KERNEL_NAMES, metavar="KERNEL",
                   help=f"kernels to fit, of: {', '.join(KERNEL_NAMES)} (default: all)")
    p.add_argument("--widths", nargs="+", type=positive_float, default=[0.1, 0.3, 1.0],
                   help="kernel widths")
    p.add_argument("--n-train", type=positive_int, default=100,
                   help="training points, uniform in [0, 4] (at least 2: the learned width "
                        "predicts each from the others)")
    p.add_argument("--noise-std", type=non_negative_float, default=1.0,
                   help="standard deviation of the noise ε (1: the notes)")
    p.add_argument("--test-points", type=positive_int, default=200,
                   help="evenly spaced test inputs in [0, 4]")
    p.add_argument("--initial-width", type=positive_float, default=1.0,
                   help="starting width of the learned Gaussian")
    p.add_argument("--steps", type=positive_int, default=200,
                   help="gradient steps for the learned width")
    p.add_argument("--learning-rate", type=positive_float, default=0.05,
                   help="Adam learning rate for the learned width")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.set_defaults(_run=run_main)
    return p


RESULT_KEYS = ("experiment", "mse_vs_truth")  # an earlier JSON of this script may be replaced


def check_args(args: argparse.Namespace) -> tuple[Path, Path]:
    """Refuses bad values and outputs before any fitting; returns the figure and JSON paths."""
    from matplotlib.backend_bases import FigureCanvasBase

    if args.n_train < 2:
        raise UserError(f"--n-train must be >= 2 (the learned width predicts each training "
                        f"point from the others), got {args.n_train}")
    out = check_output_file(args.out, "--out")
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise UserError(f"--out {out}: expected a figure file name ending in one of "
                        f"{', '.join('.' + f for f in sorted(formats))}; got "
                        f"{out.suffix or 'no suffix'}")
    json_path = Path(args.json) if args.json else out.with_suffix(".json")
    option = "--json" if args.json else "--out (its .json beside it)"
    if same_file(json_path, out):
        raise UserError(f"{option} {json_path}: is also the figure (--out); choose another file")
    check_output_file(json_path, option, result_keys=RESULT_KEYS)
    return out, json_path


def truth(x):
    import numpy as np

    return 2.0 * np.sin(x) + x


def make_data(n_train: int, noise_std: float, test_points: int, seed: int):
    """`(x_train, y_train, x_test, y_test)`: sorted noisy samples and the noiseless grid."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x_train = np.sort(rng.uniform(LOW, HIGH, n_train)).astype("float32")
    y_train = (truth(x_train) + rng.normal(0.0, noise_std, n_train)).astype("float32")
    x_test = np.linspace(LOW, HIGH, test_points, dtype="float32")
    return x_train, y_train, x_test, truth(x_test).astype("float32")


def fit(layer, x_train, y_train, x_query, mask=None):
    """Predictions `(N,)` of a `KernelPooling` layer at `x_query`, from the training set, and
    the number of queries with no training point inside the kernel's support (predicted 0)."""
    import numpy as np

    prediction, weights = layer(x_query[None], x_train[None], y_train[None], mask=mask)
    empty = int(np.sum(np.asarray(weights)[0].sum(-1) == 0.0))
    return np.asarray(prediction)[0], empty


def learn_width(x_train, y_train, initial_width: float, steps: int, learning_rate: float):
    """A Gaussian `KernelPooling` whose width minimises the leave-one-out squared error."""
    import keras
    import numpy as np
    import tensorflow as tf

    from common.layers.kernel_pooling import KernelPooling

    layer = KernelPooling("gaussian", width=initial_width, trainable_width=True)
    leave_one_out = ~np.eye(len(x_train), dtype=bool)[None]
    query, targets = tf.constant(x_train[None]), tf.constant(y_train[None])
    optimizer = keras.optimizers.Adam(learning_rate)
    layer(query, query, targets, mask=leave_one_out)  # build
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            prediction, _ = layer(query, query, targets, mask=leave_one_out)
            loss = tf.reduce_mean(tf.square(prediction - targets))
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights),
                                      layer.trainable_weights))
        losses.append(float(loss))
    return layer, losses


def run(args: argparse.Namespace) -> dict:
    """Fits everything, draws the figure, writes the JSON; returns the JSON's contents."""
    import numpy as np

    from common.layers.kernel_pooling import KernelPooling

    x_train, y_train, x_test, y_test = make_data(
        args.n_train, args.noise_std, args.test_points, args.seed
    )
    predictions, mse, empty = {}, {}, {}
    for kernel in args.kernels:
        predictions[kernel], mse[kernel], empty[kernel] = {}, {}, {}
        for width in args.widths:
            y_hat, no_support = fit(KernelPooling(kernel, width=width), x_train, y_train, x_test)
            predictions[kernel][width] = y_hat
            mse[kernel][str(width)] = float(np.mean((y_hat - y_test) ** 2))
            empty[kernel][str(width)] = no_support
    layer, losses = learn_width(
        x_train, y_train, args.initial_width, args.steps, args.learning_rate
    )
    learned, _ = fit(layer, x_train, y_train, x_test)
    learned_width = float(np.asarray(layer.current_width()))
    results = {
        "experiment": "y = 2 sin(x) + x + eps, Nadaraya-Watson attention pooling",
        "n_train": args.n_train,
        "noise_std": args.noise_std,
        "x_range": [LOW, HIGH],
        "test_points": args.test_points,
        "seed": args.seed,
        "mse_vs_truth": mse,
        "test_points_without_support": empty,
        "learned_gaussian": {
            "initial_width": args.initial_width,
            "width": learned_width,
            "steps": args.steps,
            "learning_rate": args.learning_rate,
            "leave_one_out_loss": [losses[0], losses[-1]],
            "mse_vs_truth": float(np.mean((learned - y_test) ** 2)),
        },
        "noise_floor_mse": float(np.mean((y_train - truth(x_train)) ** 2)),
    }
    with reported_write(args.out, "--out"):
        draw(args.out, x_train, y_train, x_test, y_test, predictions, mse, learned, results)
    json_path = Path(args.json) if args.json else Path(args.out).with_suffix(".json")
    with reported_write(json_path, "--json"):
        json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def draw(out, x_train, y_train, x_test, y_test, predictions, mse, learned, results) -> None:
    """One panel per kernel: the truth, the noisy training points and the fits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = list(predictions)
    columns = min(2, len(kernels))
    rows = (len(kernels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False,
                             sharex=True, sharey=True)
    for ax, kernel in zip(axes.flat, kernels):
        ax.scatter(x_train, y_train, s=8, color="0.6", label="noisy training points")
        ax.plot(x_test, y_test, color="black", linewidth=2, label="truth 2 sin x + x")
        for width, y_hat in predictions[kernel].items():
            ax.plot(x_test, y_hat, label=f"width {width:g} (MSE {mse[kernel][str(width)]:.3f})")
        if kernel == "gaussian":
            learned_info = results["learned_gaussian"]
            ax.plot(x_test, learned, "--", color="crimson", linewidth=2,
                    label=f"learned width {learned_info['width']:.3f} "
                          f"(MSE {learned_info['mse_vs_truth']:.3f})")
        ax.set_title(f"{kernel} kernel")
        ax.set_xlabel("x")
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(kernels):]:
        ax.axis("off")
    fig.suptitle(f"Nadaraya–Watson regression, {results['n_train']} points, "
                 f"noise σ = {results['noise_std']:g}")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def print_table(results: dict) -> None:
    mse = results["mse_vs_truth"]
    widths = list(next(iter(mse.values())))
    print("MSE against the truth" + "".join(f"  width {w:>5}" for w in widths))
    for kernel, row in mse.items():
        print(f"{kernel:<21}" + "".join(f"  {row[w]:11.4f}" for w in widths))
    empty = {f"{k} {w}": n for k, row in results["test_points_without_support"].items()
             for w, n in row.items() if n}
    if empty:
        print("test points with no training point in the support (predicted 0): "
              + ", ".join(f"{name}: {n}" for name, n in empty.items()))
    learned = results["learned_gaussian"]
    print(f"learned gaussian width {learned['width']:.4f}: MSE {learned['mse_vs_truth']:.4f} "
          f"(leave-one-out loss {learned['leave_one_out_loss'][0]:.4f} -> "
          f"{learned['leave_one_out_loss'][1]:.4f})")
    print(f"noise floor (mean ε² on the training points): {results['noise_floor_mse']:.4f}")


def run_main(args: argparse.Namespace) -> int:
    args.kernels = args.kernels or list(KERNEL_NAMES)
    check_args(args)
    print_table(run(args))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the experiment; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
