"""Training throughput: examples/s, target tokens/s and the share of time waiting on input.

    python scripts/benchmarks/benchmark_training.py --arch transformer --size keras-io --steps 20
    python scripts/benchmarks/benchmark_training.py --arch transformer,bahdanau --size spa-eng-cpu \
        --precision float32 --out runs/bench.json
    python scripts/benchmarks/benchmark_training.py --size base --length 64 \
        --precision mixed_bfloat16 --jit-compile --out runs/base.json  # on a GPU: MFU, bf16 peak
    python scripts/benchmarks/benchmark_training.py --model captioner --size demo,coco \
        --batch-size 16
    python scripts/benchmarks/benchmark_training.py --vs-peer --steps 5 --rounds 3 \
        --out docs/records/benchmarks/training_cpu.json  # against the keras-io example, same size
    python scripts/benchmarks/benchmark_training.py --vs-keras-attention --size spa-eng-cpu

Each (model, architecture, size, precision) is built with the project's own builders and
timed through the Trainer's step (`common.training.step.make_train_step`) on synthetic batches
of `--length` tokens served by `tf.data` (random ids, no padding), warm-up steps excluded (see
`_lib.benchmark`). Sizes:

| size | what |
|---|---|
| `keras-io` | the keras-io English-Spanish Transformer's sizes: 1 + 1 layers, embed 256, feed-forward 2048, 8 heads of 256 (its `MultiHeadAttention(num_heads=8, key_dim=256)`: attention 2048 wide), learned positions for 20 tokens, dropout 0.5, vocabularies of 15,000; 19,946,240 weights, the example's 19,960,216 less its output bias (15,000) plus the project's two final layer norms (1,024) (Transformer only) |
| `spa-eng-cpu` | the `spa-eng-cpu` preset (vocabularies of 12,000) |
| `dates-demo` | the `dates-demo` preset (vocabularies of 64) |
| `base` | Transformer-base (Vaswani et al. 2017): 6 + 6 layers, width 512, feed-forward 2048, 8 heads, dropout 0.1, vocabularies of 32,000 (Transformer only) |
| `tiny` | the `tiny` preset (for tests) |

Captioner sizes (`--model captioner`; synthetic images and captions of `--length` tokens,
default the preset's longest caption; `--arch` is ignored):

| size | what |
|---|---|
| `demo` | the `demo` preset: `small-cnn` on 64x64 images, trained with the decoder (vocabulary 64) |
| `coco` | the `coco` preset's sizes: VGG-19 on 224x224 images, random weights, frozen (so it runs forward only), LSTM 1024, vocabulary 10,000 |
| `coco-cached` | the same decoder on cached VGG-19 features `(B, 196, 512)`, as `coco` trains |
| `tiny` | the `tiny` preset (for tests) |

Model-FLOPs utilization: each step's training FLOPs are counted from the model's sizes
(`common.training.flops`: 3 × the forward matrix products and convolutions, attention
included) for synthetic data, and `mfu` = FLOPs per step × steps/s / `--peak-tflops` (by
default the GPU's dense bf16 peak when its name is known, e.g. 989 TFLOP/s on an H100 or
H200; none on a CPU).

`--vs-peer` times the keras-io example itself (`../shared/peers/keras_io_nmt.py`, as
published: heads of 256) and the project's `keras-io` size alternately in one process, at
batch 64 and 20 + 20 tokens: `--rounds` rounds (>= 3) of `--steps` timed steps per side after
`--warmup` untimed ones, medians over rounds, and prints both, their examples/s ratio and FLOP
rates (the same FLOP formula for both). A third side, timed in the same turns, is the
project's model through keras' own attention `call`; the "project" side has the attention's
fused projections on (`MultiHeadAttention.fused_projections`, off by default: they pay at
this size, not at `spa-eng-cpu`). Without the peer folder
(`--peers`) the project is timed alone (both ways) and no ratio to the example is given. No
other program's figure is ever written into a ratio.

`--vs-keras-attention` times the Transformer at one `--size` (on `--data`, synthetic or a
TSV through the training pipeline) with its attention's fused projections and through keras'
attention `call`, alternately in one process, and gives the steps/s of each and their ratio:

    python scripts/benchmarks/benchmark_training.py --vs-keras-attention --size spa-eng-cpu \
        --data ../shared/data/spa-eng/train.tsv --steps 10 --rounds 3

A model family is one entry of `MODELS`: `(arch, size, data, batch_size, length) -> Bench`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, apply_quick, positive_float, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402
from common.registry import Registry  # noqa: E402

from _lib.translators import TRANSLATOR_SIZES  # noqa: E402

MODELS = Registry("benchmark model")

# size -> (preset, overrides, vocabulary size, train from cached features)
CAPTIONER_SIZES: dict[str, tuple[str, dict[str, Any], int, bool]] = {
    "demo": ("demo", {}, 64, False),
    "coco": ("coco", {"encoder": {"weights": "none"}, "data": {"cache_features": False}},
             10000, False),
    # Random weights cannot be cached (captioner.config refuses it), and need not be here: the
    # features are random too, and the encoder, frozen below, never runs.
    "coco-cached": ("coco", {"encoder": {"weights": "none"}, "data": {"cache_features": False}},
                    10000, True),
    "tiny": ("tiny", {}, 32, False),
}

COLUMNS = ["model", "arch", "size", "data", "precision", "jit", "batch", "length", "params",
           "examples_per_s", "tokens_per_s", "input_wait_share", "median_step_ms", "tflops",
           "mfu"]


@dataclasses.dataclass(frozen=True)
class Bench:
    """What a model family hands the benchmark.

    Args:
        build_model: `() -> keras.Model` implementing `loss_terms` (called in the scope).
        make_dataset: `(context, batch_size, length) -> tf.data.Dataset`, repeating, of
            per-replica batches (`context.get_per_replica_batch_size(batch_size)`).
        sample: a small batch the model's variables are built on.
        flops: `(model) -> float`, the training FLOPs of one global step, or None when they
            are not counted (real data of varying lengths, Bahdanau).
    """

    build_model: Callable[[], Any]
    make_dataset: Callable[[Any, int, int], Any]
    sample: dict
    flops: Callable[[Any], float] | None = None


@MODELS.register("translator")
def translator(arch: str, size: str, data: str, batch_size: int, length: int) -> Bench:
    """The seq2seq translator `arch` at `size`, on synthetic batches of `length` random ids
    (`data="synthetic"`) or on a real dataset through the training pipeline (`"dates"`, or a
    TSV path: pairs longer than `length` dropped, bucketed batches, shuffled)."""
    import numpy as np
    import tensorflow as tf

    from seq2seq.models import build_model

    config = translator_config(arch, size, data, length)
    preset, _, vocab = TRANSLATOR_SIZES[size]
    dataset = config.data.dataset

    if data == "synthetic":
        rng = np.random.default_rng(0)
        rows = batch_size * 4  # 4 distinct batches, repeated
        target = rng.integers(4, vocab, size=(rows, length + 1)).astype("int32")
        target[:, 0] = 1
        pool = {"source": rng.integers(4, vocab, size=(rows, length)).astype("int32"),
                "target_in": target[:, :-1], "target_out": target[:, 1:]}
        source_size = target_size = vocab

        def make_dataset(context, batch, _length):
            rows = context.get_per_replica_batch_size(batch)
            return tf.data.Dataset.from_tensor_slices(pool).repeat().batch(rows).prefetch(
                tf.data.AUTOTUNE)

        sample = {k: v[:2] for k, v in pool.items()}
    else:
        from seq2seq.datasets import build_vocabularies, load_pairs
        from seq2seq.datasets import make_dataset as pipeline

        pairs = load_pairs(dataset, path=config.data.data, max_length=length,
                           lowercase=config.data.lowercase)
        if not pairs.sources:
            raise UserError(f"no pairs of at most {length} tokens in {data}")
        source_vocab, target_vocab = build_vocabularies(
            pairs, min_count=config.data.min_count,
            max_size=config.data.max_vocab if preset else vocab)
        source_size, target_size = len(source_vocab), len(target_vocab)

        def make_dataset(context, batch, _length):
            rows = context.get_per_replica_batch_size(batch)
            return pipeline(pairs, source_vocab, target_vocab, rows, shuffle=True).repeat()

        sample = next(iter(pipeline(pairs, source_vocab, target_vocab, 2)))

    flops = None
    if data == "synthetic" and arch == "transformer":
        from common.training.flops import transformer_training_flops

        def flops(model):
            head_dim = model.head_dim or model.hidden_dim // model.num_heads
            return transformer_training_flops(
                model.num_layers, model.hidden_dim, model.intermediate_dim,
                model.target_vocab_size, batch_size, length, length,
                attention_dim=model.num_heads * head_dim)

    return Bench(lambda: build_model(config.model, source_size, target_size), make_dataset,
                 sample, flops)


def translator_config(arch: str, size: str, data: str, length: int) -> Any:
    """The run config of the translator `arch` at `size` on `data`; a `UserError` for a
    combination that cannot run (an unknown name, a Transformer size for another
    architecture, a length past learned positions, a TSV that is not there)."""
    from seq2seq.train import make_run_config

    if size not in TRANSLATOR_SIZES:
        raise UserError(f"unknown size {size!r}; choose one of: {', '.join(TRANSLATOR_SIZES)}")
    preset, overrides, _ = TRANSLATOR_SIZES[size]
    if preset is None and arch != "transformer":
        raise UserError(f"size {size!r} is a Transformer size; got --arch {arch}")
    dataset = "dates" if data in ("synthetic", "dates") else "tsv"
    if dataset == "tsv" and not Path(data).exists():
        raise UserError(f"--data {data}: no such file or folder; expected synthetic, dates or "
                        "a TSV of pairs")
    config = make_run_config(arch, dataset, preset,
                             {**(overrides if arch == "transformer" else {}),
                              "data": None if dataset == "dates" else data})
    sizes = config.model.transformer
    if arch == "transformer" and sizes.positions == "learned" and length > sizes.max_length:
        raise UserError(f"size {size!r} has learned positions for at most {sizes.max_length} "
                        f"tokens; got --length {length}")
    return config


@MODELS.register("captioner")
def captioner(arch: str, size: str, data: str, batch_size: int, length: int) -> Bench:
    """The Show-Attend-Tell captioner at `size` (soft attention) on synthetic batches: random
    images (or cached features) and captions of `length` random ids, no padding."""
    import numpy as np
    import tensorflow as tf

    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from captioner.train import apply_overrides, build_model
    from common.training.flops import captioner_training_flops

    if size not in CAPTIONER_SIZES:
        raise UserError(f"unknown captioner size {size!r}; "
                        f"choose one of: {', '.join(CAPTIONER_SIZES)}")
    if data != "synthetic":
        raise UserError(f"--model captioner runs on synthetic data only; got --data {data}")
    preset, overrides, vocab, cached = CAPTIONER_SIZES[size]
    config = apply_overrides(apply_overrides(CaptionerRunConfig(), get_preset(preset)),
                             overrides)
    rng = np.random.default_rng(0)
    rows = batch_size * 2  # 2 distinct batches, repeated
    caption = rng.integers(4, vocab, size=(rows, length + 1)).astype("int32")
    caption[:, 0] = 1
    pool = {"caption_in": caption[:, :-1], "caption_out": caption[:, 1:]}
    if cached:  # the encoder's output shape, read from a model built only for it
        encoder = build_model(config, vocab).encoder
        pool["features"] = rng.normal(
            size=(rows, encoder.num_regions, encoder.feature_dim)).astype("float32")
        del encoder
    else:
        height, width = config.encoder.image_size
        pool["image"] = rng.uniform(0, 255, size=(rows, height, width, 3)).astype("float32")

    def make_dataset(context, batch, _length):
        rows = context.get_per_replica_batch_size(batch)
        return tf.data.Dataset.from_tensor_slices(pool).repeat().batch(rows).prefetch(
            tf.data.AUTOTUNE)

    def build():
        model = build_model(config, vocab)
        model.encoder.trainable = not cached  # as a run on cached features has it
        return model

    return Bench(build, make_dataset,
                 {k: v[:2] for k, v in pool.items()},
                 lambda model: captioner_training_flops(model, batch_size, length, cached))


def prepare(model: str, arch: str, size: str, data: str, batch_size: int, length: int,
            precision: str, jit_compile: bool, strategy: Any) -> tuple[Bench, Any, Any, Any]:
    """Builds one model and its optimizer in `strategy`'s scope: -> `(bench, network, step,
    batches)`, `step(batch)` the Trainer's training step and `batches` an iterator."""
    import keras
    import tensorflow as tf

    from common.training.step import make_train_step

    bench = MODELS.get(model)(arch, size, data, batch_size, length)
    keras.mixed_precision.set_dtype_policy(precision)
    keras.utils.set_random_seed(0)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return bench.make_dataset(context, batch_size, length)

    with strategy.scope():
        network = bench.build_model()
        optimizer = keras.optimizers.Adam(1e-4)
        if precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        network.loss_terms(bench.sample, training=False)
        optimizer.build(network.trainable_variables)
    step = make_train_step(network, optimizer, strategy, jit_compile=jit_compile)
    batches = iter(strategy.distribute_datasets_from_function(dataset_fn))
    return bench, network, step, batches


def benchmark(model: str, arch: str, size: str, data: str, batch_size: int, length: int,
              steps: int, warmup: int, precision: str, jit_compile: bool,
              strategy: Any, peak_tflops: float | None = None) -> dict[str, Any]:
    """Builds one model in `strategy`'s scope and times `steps` training steps."""
    import keras

    from common.training.flops import mfu

    from _lib.benchmark import time_steps

    bench, network, step, batches = prepare(model, arch, size, data, batch_size, length,
                                            precision, jit_compile, strategy)
    result = time_steps(step, batches, steps=steps, warmup=warmup)
    keras.mixed_precision.set_dtype_policy("float32")
    flops = bench.flops(network) if bench.flops else None
    steps_per_s = result.steps / max(result.seconds, 1e-12)
    return {"model": model, "arch": arch if model != "captioner" else "soft", "size": size,
            "data": data, "precision": precision, "jit": jit_compile, "batch": batch_size,
            "length": length, "replicas": strategy.num_replicas_in_sync,
            "params": network.count_params(), **result.as_dict(),
            "flops_per_step": flops, "tflops": flops * steps_per_s / 1e12 if flops else None,
            "peak_tflops": peak_tflops, "mfu": mfu(flops, steps_per_s, peak_tflops)}


PEER_COLUMNS = ["side", "program", "params", "batch", "length", "examples_per_s",
                "ms_per_step", "gflops_per_step", "tflops"]


def versus_peer(batch_size: int, steps: int, warmup: int, rounds: int,
                peers_dir: str | None) -> dict[str, Any]:
    """Times the project's `keras-io` size and the keras-io example (the peer, as
    published) training alternately: per round `steps` steps of each (after `warmup`
    untimed steps each), `rounds` rounds, medians over rounds. Without the peer the project
    is timed alone and there is no ratio.

    The peer trains through its own `compile`d model (`train_on_batch`, rmsprop) on batches
    of its own `tf.data` pipeline (its TextVectorization of 20 + 20 synthetic tokens), cut
    to `batch_size` rows; the project through the Trainer's step (Adam) on synthetic ids.
    Each step's training FLOPs come from `transformer_training_flops` with each side's sizes.
    """
    import statistics
    import time

    from common.training.flops import transformer_training_flops

    from _lib.benchmark import PEERS_DIR, alternate, load_peer, time_steps

    length = 20  # the peer's sequence_length: 20 source and 20 target tokens
    folder = peers_dir or str(PEERS_DIR)
    peer_module = load_peer("keras_io_nmt", folder)
    bench, network, step, batches = _transformer_side("keras-io", "synthetic", batch_size,
                                                      length, "float32", keras_call=False)
    time_steps(step, batches, steps=1, warmup=max(warmup - 1, 0))
    project_flops = bench.flops(network)
    _, keras_network, keras_step, keras_batches = _transformer_side(
        "keras-io", "synthetic", batch_size, length, "float32", keras_call=True)
    time_steps(keras_step, keras_batches, steps=1, warmup=max(warmup - 1, 0))
    measures = {"project": lambda: time_steps(step, batches, steps=steps,
                                              warmup=0).examples_per_s,
                "project-keras-attention": lambda: time_steps(
                    keras_step, keras_batches, steps=steps, warmup=0).examples_per_s}
    rows = [{"side": "project", "program": "TransformerTranslator, keras-io size, fused projections",
             "params": int(network.count_params()), "head_dim": network.head_dim,
             "flops_per_step": project_flops},
            {"side": "project-keras-attention",
             "program": "the same through keras' attention call (fused_projections off, "
             "the default)",
             "params": int(keras_network.count_params()), "head_dim": keras_network.head_dim,
             "flops_per_step": project_flops}]
    if peer_module is not None:
        peer = peer_module.Peer()  # `run_versus_peer` checked --batch-size against it
        if peer_module.sequence_length != length:
            raise UserError(f"the keras-io example has {peer_module.sequence_length} tokens "
                            f"per sentence; expected {length}")
        peer_batches = iter(peer.make_dataset(peer.train_pairs).repeat())

        def peer_step() -> float:
            inputs, target = next(peer_batches)
            inputs = {k: v[:batch_size] for k, v in inputs.items()}
            target = target[:batch_size]
            start = time.perf_counter()
            peer.transformer.train_on_batch(inputs, target)  # returns numpy: waits
            return time.perf_counter() - start

        for _ in range(max(warmup, 1)):
            peer_step()
        measures["peer"] = lambda: batch_size * steps / sum(peer_step() for _ in range(steps))
        dim, heads = peer_module.embed_dim, peer_module.num_heads
        rows.append({"side": "peer", "program": f"keras-io example ({Path(folder).name}/"
                     "keras_io_nmt.py, as published)",
                     "params": int(peer.transformer.count_params()), "head_dim": dim,
                     "jit_compile": bool(peer.transformer.jit_compile),
                     "flops_per_step": transformer_training_flops(
                         1, dim, peer_module.latent_dim, peer_module.vocab_size, batch_size,
                         length, length, attention_dim=heads * dim)})
    figures = alternate(measures, rounds)
    for row in rows:
        per_round = figures[row["side"]]
        rate = statistics.median(per_round)
        row.update({"batch": batch_size, "length": length, "steps_per_round": steps,
                    "rounds": rounds, "examples_per_s_per_round": per_round,
                    "examples_per_s": rate, "ms_per_step": 1000.0 * batch_size / rate,
                    "gflops_per_step": row["flops_per_step"] / 1e9,
                    "tflops": row["flops_per_step"] * rate / batch_size / 1e12})
    ratio = None
    if peer_module is not None:
        ratio = rows[0]["examples_per_s"] / rows[2]["examples_per_s"]
    return {"rows": rows, "peers_dir": folder, "peer_found": peer_module is not None,
            "examples_per_s_ratio": ratio,
            "tflops_ratio": None if ratio is None else rows[0]["tflops"] / rows[2]["tflops"],
            "fused_over_keras_attention": rows[0]["examples_per_s"] / rows[1]["examples_per_s"]}


def use_keras_attention(network: Any, keras_call: bool = True) -> None:
    """Turns the fused projections of every attention layer of a Transformer translator off
    (`MultiHeadAttention.fused_projections`, off by default), so that it computes through
    keras' own attention `call`, or on (`keras_call=False`)."""
    for attention in network.attention_layers:
        attention.fused_projections = not keras_call


def _transformer_side(size: str, data: str, batch_size: int, length: int, precision: str,
                      keras_call: bool):
    """`(bench, network, step, batches)` of the Transformer translator at `size` on one
    device, as `prepare` builds them, its attention through keras' `call` or (`keras_call=False`)
    with its fused projections (`use_keras_attention`)."""
    from common.training import make_strategy

    bench, network, step, batches = prepare("translator", "transformer", size, data,
                                            batch_size, length, precision, False,
                                            make_strategy("none"))
    use_keras_attention(network, keras_call=keras_call)
    return bench, network, step, batches


def versus_keras_attention(size: str, data: str, batch_size: int, length: int, steps: int,
                           warmup: int, rounds: int, precision: str) -> dict[str, Any]:
    """Times the Transformer at `size` with its attention's fused projections (the default)
    and through keras' attention `call` (as before them) alternately in one process: per
    round `steps` steps of each after `warmup` untimed ones, `rounds` rounds, medians."""
    import statistics

    from _lib.benchmark import alternate, time_steps

    sides = {}
    for side in ("fused", "keras-attention"):
        _, network, step, batches = _transformer_side(size, data, batch_size, length, precision,
                                                      keras_call=side == "keras-attention")
        time_steps(step, batches, steps=1, warmup=max(warmup - 1, 0))
        sides[side] = (network, step, batches)
    def measure(step, batches) -> float:
        result = time_steps(step, batches, steps=steps, warmup=0)
        return result.steps / max(result.seconds, 1e-12)

    figures = alternate({side: (lambda s=s: measure(s[1], s[2])) for side, s in sides.items()},
                        rounds)
    rows = [{"side": side, "size": size, "data": data, "precision": precision,
             "batch": batch_size, "length": length,
             "params": int(sides[side][0].count_params()), "steps_per_round": steps,
             "rounds": rounds, "steps_per_s_per_round": figures[side],
             "steps_per_s": statistics.median(figures[side])} for side in sides]
    return {"rows": rows,
            "fused_over_keras_attention": rows[0]["steps_per_s"] / rows[1]["steps_per_s"]}


def run_versus_keras_attention(args: argparse.Namespace) -> int:
    from _lib.benchmark import format_table, write_json

    if args.model != "translator" or args.arch != "transformer":
        raise UserError("--vs-keras-attention times the Transformer translator: --model "
                        f"translator --arch transformer, got {args.model} {args.arch}")
    _check_rounds(args.rounds)
    if args.jit_compile or args.distribute != "none" or "," in args.precision:
        raise UserError("--vs-keras-attention times one precision without XLA on one device")
    size = args.size or "keras-io"
    if size not in TRANSLATOR_SIZES or "," in size:
        raise UserError(f"--vs-keras-attention takes one size of: {', '.join(TRANSLATOR_SIZES)}"
                        f"; got {size}")
    result = versus_keras_attention(size, args.data, args.batch_size, args.length or 20,
                                    args.steps, args.warmup, args.rounds, args.precision)
    print(format_table(result["rows"], ["side", "size", "data", "precision", "batch",
                                        "length", "params", "steps_per_s"]))
    print(f"fused projections / keras' attention call: "
          f"{result['fused_over_keras_attention']:.2f}x the steps/s (medians of "
          f"{args.rounds} alternating rounds, one process)")
    if args.out:
        with reported_write(args.out, "--out"):
            write_json(args.out, result["rows"], command=" ".join(sys.argv),
                       fused_over_keras_attention=result["fused_over_keras_attention"])
        print(f"wrote {args.out}")
    return 0


def run_versus_peer(args: argparse.Namespace) -> int:
    from _lib.benchmark import format_table

    bad = {"--model": (args.model, "translator"), "--arch": (args.arch, "transformer"),
           "--size": (args.size or "keras-io", "keras-io"), "--data": (args.data, "synthetic"),
           "--length": (args.length or 20, 20), "--precision": (args.precision, "float32"),
           "--distribute": (args.distribute, "none")}
    for option, (value, wanted) in bad.items():
        if value != wanted:
            raise UserError(f"--vs-peer times the keras-io size against the keras-io example: "
                            f"{option} must be {wanted}, got {value}")
    if args.jit_compile:
        raise UserError("--vs-peer times both sides without XLA (as Keras compiles the "
                        "keras-io example on a CPU); drop --jit-compile")
    _check_rounds(args.rounds)
    from _lib.benchmark import PEERS_DIR, load_peer

    peer_module = load_peer("keras_io_nmt", args.peers or str(PEERS_DIR))
    if peer_module is not None and args.batch_size > peer_module.batch_size:
        raise UserError(f"--batch-size {args.batch_size} is more than the keras-io example's "
                        f"batch of {peer_module.batch_size}")
    result = versus_peer(args.batch_size, args.steps, args.warmup, args.rounds, args.peers)
    print(format_table(result["rows"], PEER_COLUMNS))
    print(f"project / the same through keras' attention call: "
          f"{result['fused_over_keras_attention']:.2f}x the examples/s")
    if result["peer_found"]:
        print(f"project / keras-io example at equal size: {result['examples_per_s_ratio']:.2f}x "
              f"the examples/s, {result['tflops_ratio']:.2f}x the FLOP rate (medians of "
              f"{args.rounds} alternating rounds, one process)")
    else:
        print(f"no peer programs in {result['peers_dir']}: the project alone, no ratio")
    return _save_side_by_side(args, result)


def _check_rounds(rounds: int) -> None:
    if rounds < 3:
        raise UserError(f"--rounds must be >= 3 (medians of at least 3), got {rounds}")


def _save_side_by_side(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Writes a side-by-side result (its rows and ratios) to `--out`, when given."""
    from _lib.benchmark import write_json

    if args.out:
        with reported_write(args.out, "--out"):
            write_json(args.out, result["rows"], command=" ".join(sys.argv),
                       **{k: v for k, v in result.items() if k != "rows"})
        print(f"wrote {args.out}")
    return 0


CAPTIONER_PEER_COLUMNS = ["side", "precision", "batch", "length", "examples_per_s",
                          "steps_per_s", "ms_per_step", "gflops_per_step", "tflops"]


def _per_step_teacher_forcing(decoder, embedded, annotations, projected, h, c, training,
                              use_expected):
    """The decoder's teacher forcing as it was before the fused recurrence (commit e4c5e69):
    `recurrence` called once per step. Kept here only to time the old path against the new
    one in one run; `tests/captioner/test_fast_recurrence.py` checks that both compute the
    same."""
    hard = decoder.attention_kind == "hard"
    hs, contexts, alphas, log_probs = [], [], [], []
    coverage = 0.0 * projected[:, :, 0] if decoder.coverage else None
    for t in range(embedded.shape[1]):
        h, c, context, alpha, log_prob = decoder.recurrence(
            embedded[:, t], h, c, annotations, projected, training=training,
            sample=bool(training) if hard else None, use_expected=use_expected,
            coverage=coverage,
        )
        coverage = None if coverage is None else coverage + alpha
        hs.append(h)
        contexts.append(context)
        alphas.append(alpha)
        log_probs.append(log_prob)
    return hs, contexts, alphas, log_probs


def _captioner_side(size: str, batch_size: int, per_step: bool, precision: str = "float32",
                    bench: Bench | None = None):
    """`(bench, network, step, batches)` of the captioner at `size` in `precision`, as
    `prepare` builds them; with `per_step` its decoder runs the old per-step teacher forcing
    (`_per_step_teacher_forcing`). `bench`: the `captioner` bench of this size and batch,
    when another side already made it (its synthetic batches do not depend on the rest)."""
    import types

    import keras
    import tensorflow as tf

    from common.training.step import make_train_step

    length = _default_length("captioner", size)
    bench = bench or captioner("soft", size, "synthetic", batch_size, length)
    keras.mixed_precision.set_dtype_policy(precision)
    keras.utils.set_random_seed(0)
    network = bench.build_model()
    keras.mixed_precision.set_dtype_policy("float32")  # what the next model expects
    if per_step:
        network.decoder._teacher_forced = types.MethodType(_per_step_teacher_forcing,
                                                           network.decoder)
    optimizer = keras.optimizers.Adam(1e-4)
    network.loss_terms(bench.sample, training=False)
    optimizer.build(network.trainable_variables)
    step = make_train_step(network, optimizer, tf.distribute.get_strategy())
    batches = iter(bench.make_dataset(tf.distribute.InputContext(), batch_size, length))
    return bench, network, step, batches


def captioner_versus_peer(batch_size: int, steps: int, warmup: int, rounds: int,
                          peers_dir: str | None, demo_batch_size: int = 64,
                          sizes: tuple[str, str] = ("coco-cached", "demo")) -> dict[str, Any]:
    """Times, alternately in one process (`rounds` rounds of `steps` steps per side after
    `warmup` untimed ones, medians over rounds):

    - `peer`: the TensorFlow tutorial's captioner (`../shared/peers/tf_captioning.py`, as
      published: 2-layer Transformer decoder, batch 32) from cached MobileNetV3-Small features
      `(B, 7, 7, 576)`, through its own `compile`d model (`train_on_batch`);
    - `project`: the `coco-cached` size (LSTM 1024 over 196 cached VGG-19 regions of 512,
      vocabulary 10,000) at `batch_size`, through the Trainer's step;
    - `project, per-step` and `demo, per-step`: the same with the old per-step teacher
      forcing, and `demo` with the new, at `demo_batch_size` (the preset's batch);
    - `project, mixed_bfloat16`: the coco-cached size under `mixed_bfloat16` (bfloat16
      products, float32 variables; oneDNN runs them on AMX where the CPU has it).

    `sizes` replaces `coco-cached` and `demo` (`--quick`: `tiny` for both). A side of the same
    configuration (size, batch, teacher forcing, precision) as one before it is built and
    timed once, with it: its row carries that side's figures and names it (`timed_with`).

    FLOPs per step are counted from each model's layers (`captioner_training_flops`,
    `tutorial_captioner_training_flops`); ratios are of medians from this one run.
    """
    import statistics
    import time

    import numpy as np

    from common.training.flops import tutorial_captioner_training_flops

    from _lib.benchmark import PEERS_DIR, alternate, load_peer, time_steps

    folder = peers_dir or str(PEERS_DIR)
    peer_module = load_peer("tf_captioning", folder)
    project_size, demo_size = sizes
    sides = {"project": (project_size, batch_size, False, "float32"),
             "project, per-step": (project_size, batch_size, True, "float32"),
             "project, mixed_bfloat16": (project_size, batch_size, False, "mixed_bfloat16"),
             "demo": (demo_size, demo_batch_size, False, "float32"),
             "demo, per-step": (demo_size, demo_batch_size, True, "float32")}
    rows, measures = [], {}
    benches, timed = {}, {}  # (size, batch) -> its bench; a configuration -> (side, FLOPs)
    for side, configuration in sides.items():
        size, batch, per_step, precision = configuration
        if configuration not in timed:
            bench, network, step, batches = _captioner_side(
                size, batch, per_step, precision, bench=benches.get((size, batch)))
            benches[size, batch] = bench
            time_steps(step, batches, steps=1, warmup=max(warmup - 1, 0))
            measures[side] = (lambda step=step, batches=batches:
                              time_steps(step, batches, steps=steps, warmup=0).examples_per_s)
            timed[configuration] = (side, bench.flops(network))
        first, flops = timed[configuration]
        rows.append({"side": side, "size": size, "batch": batch, "precision": precision,
                     "length": _default_length("captioner", size),
                     "program": f"ShowAttendTell {size}"
                     + (" (old per-step teacher forcing)" if per_step else ""),
                     "flops_per_step": flops, **({"timed_with": first} if first != side else {})})
    if peer_module is not None:
        built = peer_module.build()
        model = built["make_model"]()
        in_tok, out_tok = built["in_tok"], built["out_tok"]
        peer_batch = 32  # as published
        rng = np.random.default_rng(0)
        pool = rng.normal(size=(4 * peer_batch, 7, 7, 576)).astype("float32")
        turn = [0]

        def peer_step() -> float:
            index = turn[0] % 4
            turn[0] += 1
            rows_ = slice(index * peer_batch, (index + 1) * peer_batch)
            start = time.perf_counter()
            model.train_on_batch((pool[rows_], in_tok[rows_]), out_tok[rows_])
            return time.perf_counter() - start

        for _ in range(max(warmup, 1)):
            peer_step()
        measures["peer"] = lambda: peer_batch * steps / sum(peer_step() for _ in range(steps))
        length = int(in_tok.shape[1])
        rows.append({"side": "peer", "size": "tutorial", "batch": peer_batch, "length": length,
                     "program": f"TF tutorial captioner ({Path(folder).name}/tf_captioning.py, "
                     "as published, cached MobileNetV3-Small features 7x7x576)",
                     "flops_per_step": tutorial_captioner_training_flops(
                         model, peer_batch, length, 49)})
    figures = alternate(measures, rounds)
    by_side = {}
    for row in rows:
        per_round = figures[row.get("timed_with", row["side"])]
        rate = statistics.median(per_round)
        row.update({"steps_per_round": steps, "rounds": rounds,
                    "examples_per_s_per_round": per_round, "examples_per_s": rate,
                    "steps_per_s": rate / row["batch"],
                    "ms_per_step": 1000.0 * row["batch"] / rate,
                    "gflops_per_step": row["flops_per_step"] / 1e9,
                    "tflops": row["flops_per_step"] * rate / row["batch"] / 1e12})
        by_side[row["side"]] = row
    result = {"rows": rows, "peers_dir": folder, "peer_found": peer_module is not None,
              "demo_steps_per_s_ratio": by_side["demo"]["steps_per_s"]
              / by_side["demo, per-step"]["steps_per_s"],
              "coco_cached_steps_per_s_ratio": by_side["project"]["steps_per_s"]
              / by_side["project, per-step"]["steps_per_s"],
              "tflops_ratio": None, "tflops_ratio_per_step": None,
              "tflops_ratio_mixed_bfloat16": None}
    if peer_module is not None:
        result["tflops_ratio"] = by_side["project"]["tflops"] / by_side["peer"]["tflops"]
        result["tflops_ratio_per_step"] = (by_side["project, per-step"]["tflops"]
                                           / by_side["peer"]["tflops"])
        result["tflops_ratio_mixed_bfloat16"] = (by_side["project, mixed_bfloat16"]["tflops"]
                                                 / by_side["peer"]["tflops"])
    return result


def run_captioner_versus_peer(args: argparse.Namespace) -> int:
    """`--model captioner --vs-peer`: `captioner_versus_peer`, printed and written."""
    from _lib.benchmark import format_table

    bad = {"--size": (args.size or "coco-cached", "coco-cached"),
           "--data": (args.data, "synthetic"), "--length": (args.length or 20, 20),
           "--precision": (args.precision, "float32"), "--distribute": (args.distribute, "none")}
    for option, (value, wanted) in bad.items():
        if value != wanted:
            raise UserError(f"--model captioner --vs-peer times the coco-cached size against "
                            f"the tutorial captioner: {option} must be {wanted}, got {value}")
    if args.jit_compile:
        raise UserError("--vs-peer times both sides without XLA; drop --jit-compile")
    _check_rounds(args.rounds)
    demo_batch = 8 if args.quick else 64
    sizes = ("tiny", "tiny") if args.quick else ("coco-cached", "demo")
    result = captioner_versus_peer(args.batch_size, args.steps, args.warmup, args.rounds,
                                   args.peers, demo_batch, sizes)
    print(format_table(result["rows"], CAPTIONER_PEER_COLUMNS))
    for row in result["rows"]:
        if "timed_with" in row:
            print(f"{row['side']}: the configuration of {row['timed_with']}, timed once with it")
    print(f"demo: {result['demo_steps_per_s_ratio']:.2f}x the steps/s of the per-step "
          f"teacher forcing; coco-cached: {result['coco_cached_steps_per_s_ratio']:.2f}x")
    if result["peer_found"]:
        print(f"project coco-cached / tutorial captioner: {result['tflops_ratio']:.2f}x the "
              f"FLOP rate (per-step teacher forcing: {result['tflops_ratio_per_step']:.2f}x; "
              f"mixed_bfloat16: {result['tflops_ratio_mixed_bfloat16']:.2f}x; "
              f"medians of {args.rounds} alternating rounds, one process)")
    else:
        print(f"no peer programs in {result['peers_dir']}: the project alone, no ratio")
    return _save_side_by_side(args, result)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_training.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--model", default="translator", help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--arch", default="transformer",
                   help="comma-separated architectures (translator: transformer, bahdanau)")
    p.add_argument("--size", default=None,
                   help=f"comma-separated sizes; translator: {', '.join(TRANSLATOR_SIZES)} "
                   f"(default keras-io); captioner: {', '.join(CAPTIONER_SIZES)} (default demo)")
    p.add_argument("--data", default="synthetic",
                   help="synthetic (random ids, no padding), dates, or a TSV of pairs")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (global)")
    p.add_argument("--length", type=int, default=None,
                   help="source and target tokens (default 20); caption tokens (default: "
                   "the preset's longest caption)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--precision", default="float32",
                   help="comma-separated: float32, mixed_float16, mixed_bfloat16")
    p.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    p.add_argument("--distribute", default="none", help="none, mirrored, multi-worker, auto")
    p.add_argument("--logical-cpus", type=int, default=0,
                   help="for --distribute mirrored: split the CPU into this many devices (0: "
                   "none)")
    p.add_argument("--peak-tflops", type=positive_float, default=None,
                   help="the device's peak TFLOP/s for MFU (default: the GPU's dense bf16 "
                   "peak when known, e.g. 989 for H100/H200; none on a CPU)")
    p.add_argument("--vs-peer", action="store_true",
                   help="time a peer (from --peers) and the project alternately in this "
                   "process and give the ratio (none when the peer folder is missing): with "
                   "--model translator the keras-io example against the project's keras-io "
                   "size; with --model captioner the TensorFlow tutorial's captioner against "
                   "the project's coco-cached size, FLOP rates compared, and the demo's steps/s")
    p.add_argument("--vs-keras-attention", action="store_true",
                   help="time the Transformer at --size (one) with its attention's fused "
                   "projections and through keras' attention call (as before them) "
                   "alternately in this process, and give the ratio")
    p.add_argument("--peers", default=None,
                   help="the peer programs' folder (default ../shared/peers from the repo root)")
    p.add_argument("--rounds", type=int, default=3,
                   help="--vs-peer: alternating rounds of --steps steps per side (>= 3)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: batch 8, 1 warm-up and 1 timed step (options given "
                        "win)")
    p.add_argument("--out", help="also write the results (and device info) to this JSON file")
    p.set_defaults(_run=run)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the benchmark; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    from common.training.config import TrainingConfig

    MODELS.get(args.model)
    apply_quick(args, {"batch_size": 8, "steps": 1, "warmup": 1})
    for name in ("batch_size", "length", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("warmup", "logical_cpus"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.vs_peer and args.vs_keras_attention:
        raise UserError("--vs-peer and --vs-keras-attention are two benchmarks; give one")
    if args.out:
        check_output_file(args.out, "--out")
    if args.vs_peer and args.model == "captioner":
        return run_captioner_versus_peer(args)
    if args.vs_peer:
        return run_versus_peer(args)
    if args.vs_keras_attention:
        return run_versus_keras_attention(args)
    if args.size is None:
        args.size = "demo" if args.model == "captioner" else "keras-io"
    precisions = args.precision.split(",")
    for precision in precisions:  # validates the names the way the trainer does
        TrainingConfig(precision=precision, distribute=args.distribute,
                       logical_cpus=args.logical_cpus, batch_size=args.batch_size)
    archs = ["soft"] if args.model == "captioner" else args.arch.split(",")
    for arch in archs:  # every setting of the table, before the first is timed
        for size in args.size.split(","):
            if args.model == "captioner":
                _default_length(args.model, size)
                if args.data != "synthetic":
                    raise UserError("--model captioner runs on synthetic data only; got --data "
                                    f"{args.data}")
            else:
                translator_config(arch, size, args.data, args.length or 20)

    from common.training import make_strategy

    from _lib.benchmark import format_table, write_json

    strategy = make_strategy(args.distribute, args.logical_cpus)  # before any other op
    if args.batch_size % strategy.num_replicas_in_sync:
        raise UserError(f"--batch-size {args.batch_size} does not split over "
                        f"{strategy.num_replicas_in_sync} replicas")
    from common.training.flops import gpu_name, peak_tflops

    peak = args.peak_tflops or peak_tflops(gpu_name())
    rows = []
    for arch in archs:
        for size in args.size.split(","):
            length = args.length or _default_length(args.model, size)
            for precision in precisions:
                rows.append(benchmark(args.model, arch, size, args.data, args.batch_size,
                                      length, args.steps, args.warmup, precision,
                                      args.jit_compile, strategy, peak))
                print(format_table(rows[-1:], COLUMNS).splitlines()[-1], flush=True)
    print()
    print(format_table(rows, COLUMNS))
    if args.out:
        with reported_write(args.out, "--out"):
            write_json(args.out, rows, command=" ".join(sys.argv), distribute=args.distribute,
                       gpu=gpu_name(), peak_tflops=peak)
        print(f"wrote {args.out}")
    return 0


def _default_length(model: str, size: str) -> int:
    if model != "captioner":
        return 20
    from captioner.presets import get_preset

    if size not in CAPTIONER_SIZES:
        raise UserError(f"unknown captioner size {size!r}; "
                        f"choose one of: {', '.join(CAPTIONER_SIZES)}")
    return int(get_preset(CAPTIONER_SIZES[size][0])["data"]["max_length"])


if __name__ == "__main__":
    sys.exit(main())
