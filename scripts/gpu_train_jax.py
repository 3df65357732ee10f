"""The GPU check of issue 17: train the spa-eng Transformer on one GPU on Keras's JAX backend
(bf16, XLA) with the project's JAX trainer, from a prepared folder, and bring back throughput,
MFU and the weights (the last and the average of the last checkpoints).

    # anywhere with the package (TensorFlow): the folder the GPU machine gets
    seq2seq prepare --dataset tsv --data DATA --arch transformer --preset spa-eng-cpu --out PREPARED
    # on the GPU machine (JAX, no TensorFlow):
    KERAS_BACKEND=jax PYTHONPATH=. python scripts/gpu_train_jax.py --prepared PREPARED --out $OUT
    # back on CPU: join the weights, import them into TensorFlow, export and score
    cat $OUT/run/model.weights.h5.part-* > RUN/model.weights.h5   # docs/jax.md

It runs `JaxTrainer.fit` as `seq2seq train --prepared` does (the folder's epochs and
steps, checkpoints and validation loss; `--epochs` or `--minutes` shorten it), then averages
the newest `--average` checkpoints (`JaxTrainer.average_checkpoints`, as `seq2seq average
--last N` does for TensorFlow runs).

Writes to `--out`: `gpu_train_jax.json` (device, steps, wall time, examples/s, target
tokens/s, model TFLOP/s, MFU, the first logged loss (the mean of the first `log_every` steps)
and the last epoch's, validation loss per epoch) and `run/` (the
run's `config.json`, vocabularies, `history.jsonl`, and `model.weights.h5` and
`model.avgN.weights.h5` each split into parts under 16 MiB, `NAME.part-000`, ...).

Throughput is measured over the epochs after the first. Before training, the step is
compiled for every batch shape (one per bucket, `JaxTrainer.compile_steps`), so no timed epoch
compiles one, whichever buckets its batches come from; the trainer reads each step's loss one
step late, so the device is not held up by Python. FLOPs are counted from the model's sizes
and the padded shape of every batch those epochs trained on
(`common.training.flops.transformer_training_flops`); the peak is the chip's dense bf16 peak
(`common.training.flops.PEAK_TFLOPS`, matched on JAX's device kind) unless `--peak-tflops` is
given.

`--quick` runs on CPU in seconds (float32, 2 epochs of 3 steps, compiled with few
optimizations: JAX's `jax_disable_most_optimizations`): the CI check that the script works.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from common.cli import HelpFormatter, Parser, apply_quick, positive_float, positive_int, run_cli
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write
from common.training.config import DROPOUT_RNG_CHOICES

PART_BYTES = 15 * 2**20  # under the 16 MiB a device check may bring back per file


def split_file(path: Path, max_bytes: int = PART_BYTES) -> list[Path]:
    """Cut `path` into `path.part-000`, ... of at most `max_bytes` each and remove it;
    `cat path.part-* > path` joins them again."""
    parts = []
    with open(path, "rb") as f:
        while chunk := f.read(max_bytes):
            part = path.with_name(f"{path.name}.part-{len(parts):03d}")
            part.write_bytes(chunk)
            parts.append(part)
    path.unlink()
    return parts


def step_flops(config, batch: dict, target_vocab: int) -> float:
    """Training FLOPs of one Transformer step on `batch`'s padded shape."""
    from common.training.flops import transformer_training_flops

    sizes = config.model.transformer
    heads_width = sizes.num_heads * (sizes.head_dim or sizes.hidden_dim // sizes.num_heads)
    batch_size, source_length = batch["source"].shape
    return transformer_training_flops(
        sizes.num_layers, sizes.hidden_dim, sizes.intermediate_dim, target_vocab,
        batch_size, source_length, batch["target_in"].shape[1], heads_width)


def run(args: argparse.Namespace) -> dict:
    import jax
    import keras

    from common.config import from_dict
    from common.training.config import TrainingConfig
    from common.training.flops import mfu, peak_tflops
    from common.training.jax_trainer import JaxTrainer, complete_jax_checkpoints
    from common.training.prepare import load_prepared
    from seq2seq.config import RunConfig

    if keras.backend.backend() != "jax":
        raise UserError(f"needs KERAS_BACKEND=jax, got {keras.backend.backend()}")
    if args.quick:  # a smoke run: its speed is not what it checks; compiling is most of its time
        jax.config.update("jax_disable_most_optimizations", True)
    prepared = load_prepared(args.prepared)
    if prepared.family != "seq2seq" or prepared.config["model"]["arch"] != "transformer":
        raise UserError(f"{args.prepared} is not a Transformer translation folder; expected "
                        "`seq2seq prepare --arch transformer`")
    config = from_dict(RunConfig, prepared.config)
    overrides = {"precision": args.precision, "seed": args.seed}
    for name in ("batch_size", "epochs", "steps_per_epoch", "dropout_rng"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    training = from_dict(TrainingConfig, {**prepared.config["training"], **overrides})
    out = Path(args.out)
    run_dir = out / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    trainer = JaxTrainer(prepared, run_dir, training, distribute="none")
    if args.minutes:  # keep the epochs that fit, at the rate of a few timed steps
        trainer.config = training = replace(training, epochs=epochs_within(
            trainer, args.minutes, training.epochs))
    vocab = len(prepared.vocabularies["target"])
    device = jax.devices()[0]
    started = time.perf_counter()
    compiled = trainer.compile_steps()  # so that no timed epoch compiles a new shape
    compile_s = time.perf_counter() - started
    records = trainer.fit(verbose=1)
    wall = time.perf_counter() - started
    weights = run_dir / "model.weights.h5"  # written by fit: the last step's weights
    # A run shortened by --minutes or --epochs may have fewer checkpoints than --average: the
    # newest it has are averaged (the report's "averaged" names them), rather than losing the
    # trained run to an error.
    available = len(complete_jax_checkpoints(trainer.checkpoints))
    if available < args.average:
        print(f"gpu_train_jax: {available} checkpoint(s) to average, not {args.average}",
              file=sys.stderr)
    averaged_from = trainer.average_checkpoints(min(args.average, available))
    average = run_dir / f"model.avg{len(averaged_from)}.weights.h5"
    with reported_write(average, "--out"):
        trainer.save_weights(average)
    # Throughput over the epochs after the first, from the exact batches each trained on.
    steady = records[1:] or records
    seconds = sum(r["time_s"] for r in steady)
    flops = examples = tokens = 0.0
    steps = 0
    for record in steady:
        for batch in trainer.epoch_batches(record["epoch"] - 1):  # records count from 1
            flops += step_flops(config, batch, vocab)
            examples += trainer.prepared.real_rows(batch)  # not a last batch's padding rows
            tokens += float((batch["target_out"] > 0).sum())
            steps += 1
    peak = args.peak_tflops or peak_tflops(device.device_kind)
    parts = {}
    for name, path in (("last", weights), ("average", average)):
        with reported_write(path, "--out"):
            parts[name] = [p.name for p in split_file(path)]
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    step_losses = [h["loss"] for h in history if h.get("kind") == "step"]
    report = {
        "device": device.device_kind, "platform": device.platform, "jax": jax.__version__,
        "keras": keras.__version__, "precision": training.precision, "seed": training.seed,
        "batch_size": training.batch_size, "epochs": training.epochs,
        "steps": trainer.position["step"], "wall_s": wall, "compiled_shapes": compiled,
        "compile_s": compile_s,
        "timed_epochs": len(steady), "timed_steps": steps, "timed_s": seconds,
        "examples_per_s": examples / seconds, "target_tokens_per_s": tokens / seconds,
        "model_tflops_per_s": flops / seconds / 1e12, "peak_tflops": peak,
        "mfu": mfu(flops / steps, steps / seconds, peak) if peak else None,
        "first_loss": step_losses[0] if step_losses else records[0]["loss"],
        "last_loss": records[-1]["loss"],
        "val_loss": [r.get("val_loss") for r in records],
        "averaged": [Path(p).name for p in averaged_from],
        "weights": parts["last"], "average_weights": parts["average"],
    }
    with reported_write(out / "gpu_train_jax.json", "--out"):
        (out / "gpu_train_jax.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def epochs_within(trainer, minutes: float, epochs: int) -> int:
    """How many of `epochs` fit in `minutes`, timing one warm-up step per batch shape of
    the first epoch and then a few steps (the trainer's state is put back afterwards)."""
    import jax

    state, position = trainer.state, dict(trainer.position)
    trainer.state = jax.tree.map(lambda x: x.copy(), state)  # the step donates its input
    shapes, timed, seconds = set(), 0, 0.0
    for batch in trainer.epoch_batches(0):
        shape = (batch["source"].shape, batch["target_in"].shape)
        started = time.perf_counter()
        float(trainer.step(batch)["loss"])
        if shape in shapes:
            timed, seconds = timed + 1, seconds + time.perf_counter() - started
        shapes.add(shape)
        if timed >= 20:
            break
    trainer.state, trainer.position = state, position
    steps = trainer.config.steps_per_epoch or sum(1 for _ in trainer.epoch_batches(0))
    per_epoch = seconds / max(timed, 1) * steps
    return max(1, min(epochs, int(60 * minutes / max(per_epoch, 1e-9))))


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="gpu_train_jax.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--prepared", required=True, metavar="DIR",
                   help="a prepared Transformer folder (`seq2seq prepare --arch transformer`)")
    p.add_argument("--out", default=os.environ.get("OUT", "runs/gpu_train_jax"),
                   help="where the report and the weights go (its run/ is replaced; "
                        "default: %(default)s, from $OUT when it is set)")
    p.add_argument("--minutes", type=positive_float,
                   help="train at most the epochs that fit in this time (default: all)")
    p.add_argument("--epochs", type=positive_int, help="default: the folder's config")
    p.add_argument("--steps-per-epoch", type=positive_int, help="default: the folder's config")
    p.add_argument("--batch-size", type=positive_int, help="default: the folder's config")
    p.add_argument("--average", type=positive_int, default=5, metavar="N",
                   help="average the newest N checkpoints")
    p.add_argument("--precision", default="mixed_bfloat16",
                   choices=("mixed_bfloat16", "float32"), help="the training precision")
    p.add_argument("--peak-tflops", type=positive_float,
                   help="the chip's dense bf16 peak (default: from its device kind)")
    p.add_argument("--seed", type=int, default=0, help="the training seed")
    p.add_argument("--dropout-rng", choices=DROPOUT_RNG_CHOICES,
                   help="dropout's random bits (default: the folder's config; rbg: XLA's "
                        "RngBitGenerator, cheaper on a GPU)")
    p.add_argument("--quick", action="store_true",
                   help="CPU smoke run: float32, 2 epochs of 3 steps (so 2 checkpoints to "
                        "average; options given win), compiled with few optimizations")
    # Runs on Keras's JAX backend, where the GPU machine has no TensorFlow.
    p.set_defaults(_run=run_main, _uses_tensorflow=False, _runs_on_jax=True)
    return p


def check_paths(args: argparse.Namespace) -> None:
    """Refuses, before Keras is imported, a missing `--prepared` and an `--out` that cannot
    be written or whose run/ (removed first) would take the prepared folder with it."""
    prepared = Path(args.prepared)
    if not prepared.is_dir():
        raise UserError(f"--prepared {prepared}: "
                        f"{'is not a folder' if prepared.exists() else 'no such prepared folder'}")
    out = check_output_folder(args.out, "--out")
    run_dir = out / "run"
    check_output_folder(run_dir, "--out")
    source, replaced = prepared.resolve(), run_dir.resolve()
    if source == out.resolve():
        raise UserError(f"--out {out}: is the --prepared folder; choose another --out")
    if source == replaced or replaced in source.parents:
        raise UserError(f"--out {out}: its run/, replaced by this run, holds the --prepared "
                        f"folder {prepared}; choose another --out")
    if out.is_dir():
        check_output_file(out / "gpu_train_jax.json", "--out")


def run_main(args: argparse.Namespace) -> int:
    apply_quick(args, {"precision": "float32", "epochs": 2, "steps_per_epoch": 3,
                       "minutes": None})
    backend = os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported
    if backend != "jax":
        raise UserError(f"needs KERAS_BACKEND=jax, got KERAS_BACKEND={backend}")
    check_paths(args)
    report = run(args)
    mfu_text = f"{100 * report['mfu']:.1f}%" if report["mfu"] is not None else "n/a"
    print(f"{report['device']}: {report['steps']} steps in {report['wall_s']:.0f} s, "
          f"{report['examples_per_s']:.0f} pairs/s, MFU {mfu_text}, "
          f"loss {report['first_loss']:.3f} -> {report['last_loss']:.3f}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and trains; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
