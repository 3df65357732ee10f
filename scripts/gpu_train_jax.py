"""The GPU check of issue 17: train the spa-eng Transformer on one GPU for a fixed time on
Keras's JAX backend (bf16, XLA), from a prepared folder, and bring back throughput, MFU and the
weights.

    # anywhere with the package (TensorFlow): the folder the GPU machine gets
    seq2seq prepare --dataset tsv --data DATA --arch transformer --out PREPARED  # docs/jax.md
    # on the GPU machine (JAX, no TensorFlow):
    KERAS_BACKEND=jax PYTHONPATH=. python scripts/gpu_train_jax.py --prepared PREPARED --minutes 8 --out $OUT
    # back on CPU: join the weights, import them into TensorFlow, export and score
    cat $OUT/run/model.weights.h5.part-* > RUN/model.weights.h5   # docs/jax.md

Writes to `--out`: `gpu_train_jax.json` (device, steps, examples/s, target tokens/s, model
TFLOP/s, MFU, first and last loss) and `run/` (the run's `config.json`, vocabularies and
`model.weights.h5` split into parts under 16 MiB, `model.weights.h5.part-000`, ...).

FLOPs are counted from the model's sizes and each step's padded shape
(`common.training.flops.transformer_training_flops`); the peak is the chip's dense bf16 peak
(`common.training.flops.PEAK_TFLOPS`, matched on JAX's device kind) unless `--peak-tflops`
is given. The clock starts after the first step of each bucket's shape (compilation).

`--quick` runs on CPU in seconds (float32, a few steps): the CI check that the script works.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

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
    from common.training.jax_trainer import JaxTrainer
    from common.training.prepare import load_prepared
    from seq2seq.config import RunConfig

    if keras.backend.backend() != "jax":
        raise SystemExit(f"error: needs KERAS_BACKEND=jax, got {keras.backend.backend()}")
    prepared = load_prepared(args.prepared)
    if prepared.family != "seq2seq" or prepared.config["model"]["arch"] != "transformer":
        raise SystemExit(f"error: {args.prepared} is not a Transformer translation folder")
    config = from_dict(RunConfig, prepared.config)
    training = from_dict(TrainingConfig, {
        **prepared.config["training"], "precision": args.precision, "seed": args.seed,
        **({"batch_size": args.batch_size} if args.batch_size else {})})
    out = Path(args.out)
    run_dir = out / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    trainer = JaxTrainer(prepared, run_dir, training, distribute="none")
    vocab = len(prepared.vocabularies["target"])
    device = jax.devices()[0]
    seen_shapes: set = set()
    steps = timed_steps = 0
    timed_seconds = timed_flops = timed_examples = timed_tokens = 0.0
    first_loss = last_loss = None
    deadline = time.perf_counter() + 60 * args.minutes
    epoch = 0
    while time.perf_counter() < deadline and steps < args.max_steps:
        for batch in prepared.batches("train", training.batch_size, training.seed, epoch):
            shape = (batch["source"].shape, batch["target_in"].shape)
            started = time.perf_counter()
            loss = float(trainer.step(batch)["loss"])  # waits: each step is timed alone
            seconds = time.perf_counter() - started
            steps += 1
            first_loss = loss if first_loss is None else first_loss
            last_loss = loss
            if shape in seen_shapes:  # the first step of a shape compiles
                timed_steps += 1
                timed_seconds += seconds
                timed_flops += step_flops(config, batch, vocab)
                timed_examples += len(batch["source"])
                timed_tokens += float((batch["target_out"] > 0).sum())
            seen_shapes.add(shape)
            if time.perf_counter() >= deadline or steps >= args.max_steps:
                break
        epoch += 1
    peak = args.peak_tflops or peak_tflops(device.device_kind)
    achieved = timed_flops / timed_seconds if timed_seconds else None
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer.save_weights(run_dir / "model.weights.h5")
    for file in ["config.json", *prepared.vocab_files.values()]:
        shutil.copyfile(prepared.path / file, run_dir / file)
    parts = split_file(run_dir / "model.weights.h5")
    report = {
        "device": device.device_kind, "platform": device.platform, "jax": jax.__version__,
        "keras": keras.__version__, "precision": training.precision,
        "batch_size": training.batch_size, "minutes": args.minutes, "steps": steps,
        "timed_steps": timed_steps, "compiled_shapes": len(seen_shapes),
        "examples_per_s": timed_examples / timed_seconds if timed_seconds else None,
        "target_tokens_per_s": timed_tokens / timed_seconds if timed_seconds else None,
        "model_tflops_per_s": achieved / 1e12 if achieved else None,
        "peak_tflops": peak,
        "mfu": mfu(timed_flops / timed_steps, timed_steps / timed_seconds, peak)
        if timed_steps else None,
        "first_loss": first_loss, "last_loss": last_loss,
        "weights": [p.name for p in parts],
    }
    (out / "gpu_train_jax.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepared", required=True, help="a prepared Transformer folder")
    parser.add_argument("--out", default=os.environ.get("OUT", "runs/gpu_train_jax"),
                        help="where the report and the weights go (default: $OUT)")
    parser.add_argument("--minutes", type=float, default=8.0, help="training time")
    parser.add_argument("--max-steps", type=int, default=10**9, help="stop after this many")
    parser.add_argument("--batch-size", type=int, help="default: the folder's config")
    parser.add_argument("--precision", default="mixed_bfloat16",
                        choices=("mixed_bfloat16", "float32"))
    parser.add_argument("--peak-tflops", type=float,
                        help="the chip's dense bf16 peak (default: from its device kind)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="CPU smoke run: float32, at most 6 steps and 1 minute")
    args = parser.parse_args(argv)
    if args.quick:
        args.precision, args.max_steps, args.minutes = "float32", 6, min(args.minutes, 1.0)
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported
    report = run(args)
    mfu_text = f"{100 * report['mfu']:.1f}%" if report["mfu"] is not None else "n/a"
    print(f"{report['device']}: {report['steps']} steps, "
          f"{report['examples_per_s'] or 0:.0f} pairs/s, MFU {mfu_text}, "
          f"loss {report['first_loss']:.3f} -> {report['last_loss']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
