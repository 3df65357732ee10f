"""Training throughput and model-FLOPs utilization of the project's Transformer on Keras's JAX
backend: for GPU machines that have JAX but no TensorFlow.

    KERAS_BACKEND=jax python scripts/benchmarks/benchmark_transformer_jax.py --size base \
        --precision mixed_bfloat16 --out runs/bench_jax.json

Why a JAX script: the package trains with TensorFlow (`common.training`), but the model
(`seq2seq.transformer.TransformerTranslator`, its layers and its loss) is written in
`keras.ops` only, so the very same model definition runs on any Keras backend. Where a GPU
machine cannot install TensorFlow, this times that model's training step, `jax.jit`-compiled:
forward, masked label-smoothed cross-entropy (`loss_terms`), backward and an Adam update,
through `model.stateless_call` and `optimizer.stateless_apply`. It measures the model and the
accelerator, not the TensorFlow trainer (input pipeline, `tf.distribute`).

Model FLOPs per step are counted analytically (Kaplan et al. 2020 / the PaLM MFU convention):
`6 x (matmul parameters seen per token) x tokens` for the dense layers and the output
projection, plus `6 x 2 x L x D x S x T`-style terms for the attention products (self-attention
over S or T positions, cross-attention over S), forward once and backward twice. Embedding
look-ups and element-wise work are not counted. MFU = achieved model FLOP/s / the device's
peak dense FLOP/s for the precision (`--peak-tflops`, defaulting from the GPU's name).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

from common.cli import (
    HelpFormatter,
    Parser,
    positive_float,
    positive_int,
    run_cli,
    seed_number,
)
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write

# Transformer-base (Vaswani et al. 2017, table 3) and smaller sizes for a quick look.
SIZES = {
    "base": dict(num_layers=6, hidden_dim=512, num_heads=8, intermediate_dim=2048, vocab=32000),
    "big": dict(num_layers=6, hidden_dim=1024, num_heads=16, intermediate_dim=4096, vocab=32000),
    "keras-io": dict(num_layers=1, hidden_dim=256, num_heads=8, intermediate_dim=2048,
                     vocab=15000),
    "tiny": dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, vocab=100),
}


def matmul_macs_per_example(size: dict, source_len: int, target_len: int) -> dict:
    """Forward multiply-accumulates of one example, by part (biases, norms, softmax left out).

    `weights`: every token through the dense kernels it meets. Per layer, each source token
    meets the encoder's QKV and output projections (`4D²`) and feed-forward (`2DF`), and the
    decoder's cross-attention key and value projections (`2D²`); each target token meets the
    decoder's self-attention (`4D²`), cross-attention query and output (`2D²`) and feed-forward
    (`2DF`), then the output projection (`DV`) once. `attention`: `QKᵀ` and `AV`, `2 x D` per
    query-key pair (encoder S², decoder self-attention T², cross-attention T·S).
    """
    d, f, n, v = size["hidden_dim"], size["intermediate_dim"], size["num_layers"], size["vocab"]
    s, t = source_len, target_len
    weights = (n * s * (4 * d * d + 2 * d * f + 2 * d * d)
               + n * t * (6 * d * d + 2 * d * f) + t * d * v)
    attention = 2 * d * n * (s * s + t * t + t * s)
    return {"weights": weights, "attention": attention}


def model_flops_per_step(size: dict, batch: int, source_len: int, target_len: int) -> float:
    """Training FLOPs of one step: 2 FLOPs per MAC, backward = 2 x forward, so 6 x MACs."""
    macs = matmul_macs_per_example(size, source_len, target_len)
    return 6.0 * (macs["weights"] + macs["attention"]) * batch


def device_info() -> dict:
    import jax

    devices = jax.devices()
    return {"backend": jax.default_backend(), "devices": [d.device_kind for d in devices],
            "jax": jax.__version__}


def default_peak(kinds: list[str]) -> float | None:
    """The first device's dense bf16 peak (`common.training.flops.peak_tflops`), or None."""
    from common.training.flops import peak_tflops

    return peak_tflops(kinds[0]) if kinds else None


def benchmark(size_name: str, batch: int, length: int, steps: int, warmup: int,
              precision: str, seed: int, dropout: float = 0.1, profile: str | None = None,
              output_dtype: str = "compute", loss_kind: str = "logits", hlo: bool = False,
              dropout_generator: str = "keras", attention_dropout: float | None = None,
              attention: str = "auto", activation_dropout: float | None = None,
              fused_projections: bool = False, layer_norm: str = "keras") -> dict:
    import jax
    import keras
    import numpy as np
    from keras import ops

    from common.layers.dropout import dropout_rng
    from seq2seq.config import ModelConfig, TransformerConfig
    from seq2seq.losses import log_prob_loss_terms, token_loss_terms
    from seq2seq.transformer import TransformerTranslator

    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(seed)
    if attention == "weights":  # the attention forms its weights wherever it runs
        from common.layers import MultiHeadAttention

        MultiHeadAttention.FUSED_BACKENDS = ()
    from common.layers import LayerNormalization

    LayerNormalization.CLOSED_FORM_GRADIENT = layer_norm == "closed"
    size = SIZES[size_name]
    sizes = TransformerConfig(
        num_layers=size["num_layers"], hidden_dim=size["hidden_dim"],
        num_heads=size["num_heads"], intermediate_dim=size["intermediate_dim"], dropout=dropout,
        attention_dropout=attention_dropout, activation_dropout=activation_dropout,
        max_length=max(64, length))
    model = TransformerTranslator(ModelConfig(transformer=sizes, label_smoothing=0.1),
                                  size["vocab"], size["vocab"])
    rng = np.random.default_rng(seed)
    ids = lambda: rng.integers(4, size["vocab"], size=(batch, length), dtype=np.int32)  # noqa: E731
    batch_data = {"source": ids(), "target_in": ids(), "target_out": ids()}
    model.ensure_built()  # variables made by a tiny forward pass, not one at (batch, length)
    if fused_projections:  # each attention's projections as (B * T)-row products, QKV in one
        for layer in model.attention_layers:
            layer.fused_projections = True
    if output_dtype == "float32":  # the tied output projection in float32 (before issue 17)
        model.target_embedding.reverse_dtype = None
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable, data):
        # stateless_call runs `loss_terms` with these variable values in place.
        with keras.StatelessScope(state_mapping=list(zip(model.trainable_variables, trainable))
                                  + list(zip(model.non_trainable_variables, non_trainable))), \
                dropout_rng(dropout_generator):
            if loss_kind == "log-softmax":  # the loss through a log-softmax tensor (before issue 17)
                logits = ops.cast(model(data, training=True), "float32")
                terms = log_prob_loss_terms(ops.log_softmax(logits, axis=-1), data["target_out"],
                                            model.label_smoothing)
            elif loss_kind == "autodiff":  # the model's loss, differentiated by JAX
                terms = token_loss_terms(model(data, training=True), data["target_out"],
                                         model.label_smoothing, closed_form_gradient=False)
            else:
                terms = model.loss_terms(data, training=True)
        return terms["loss_sum"] / terms["count"]

    grad_fn = jax.value_and_grad(loss_fn)

    # The state is donated, as in the project's JAX trainer: updated in place, not copied.
    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state, data):
        trainable, non_trainable, opt_vars = state
        loss, grads = grad_fn(trainable, non_trainable, data)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return (trainable, non_trainable, opt_vars), loss

    state = ([v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables])
    data = {k: jax.device_put(v) for k, v in batch_data.items()}
    t0 = time.perf_counter()  # the first call traces and compiles: it is in compile_s
    state, first_loss = train_step(state, data)
    for _ in range(warmup - 1):
        state, loss = train_step(state, data)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        state, loss = train_step(state, data)
    jax.block_until_ready(loss)
    seconds = (time.perf_counter() - t0) / steps
    # Whether the attention ran as cuDNN's fused kernel: its custom call in the lowered step.
    lowered = train_step.lower(state, data)
    fused_attention = "cudnn$fmha" in lowered.as_text()
    if profile:
        state, _ = trace(train_step, state, data, profile, hlo, lowered=lowered)
    flops = model_flops_per_step(size, batch, length, length)
    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return {"size": size_name, **size, "batch_size": batch, "length": length,
            "precision": precision, "dropout": dropout, "output_dtype": output_dtype,
            "attention_dropout": dropout if attention_dropout is None else attention_dropout,
            "activation_dropout": dropout if activation_dropout is None else activation_dropout,
            "attention": attention, "fused_attention": fused_attention,
            "fused_projections": fused_projections, "layer_norm": layer_norm,
            "loss": loss_kind, "dropout_rng": dropout_generator, "parameters": params, "step_s": seconds,
            "examples_per_s": batch / seconds, "target_tokens_per_s": batch * length / seconds,
            "model_tflops_per_step": flops / 1e12, "achieved_tflops": flops / seconds / 1e12,
            "first_loss": float(first_loss), "final_loss": float(loss), "warmup_and_compile_s": compile_s}


def trace(train_step, state, data, folder: str, hlo: bool = False, steps: int = 5,
          lowered=None):
    """Profile `steps` more steps into `folder` (`jax.profiler`) and write `folder/summary.json`
    (device time per kernel and per HLO op, ms per step), so that a profile taken on a GPU
    machine can be read where there is no profiler viewer; with `hlo`, also the step's
    optimized HLO (`folder/train_step.hlo.txt`, compiled from `lowered`, the step already
    lowered for these arguments, when given) and the device time by the part of the model
    each kernel computes (`by_source`). Returns the state and the last loss."""
    import glob

    import jax

    with reported_write(folder, "--profile"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    jax.profiler.start_trace(folder)
    for _ in range(steps):
        state, loss = train_step(state, data)
    jax.block_until_ready(loss)
    jax.profiler.stop_trace()
    found = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))
    names = None
    if hlo:  # compiles the step once more (about 30 s for Transformer-base on a GPU)
        text = (lowered or train_step.lower(state, data)).compile().as_text()
        with reported_write(folder, "--profile"):
            Path(folder, "train_step.hlo.txt").write_text(text)
        names = hlo_op_names(text)
    if found:
        summary = summarize_profile(found[-1], steps, names)
        with reported_write(folder, "--profile"):
            Path(folder, "summary.json").write_text(json.dumps(summary, indent=1))
        top = summary["device"]["by_hlo_op"][:12]
        print(f"profile: {summary['device']['busy_ms_per_step']:.2f} ms/step of device time; "
              "top HLO ops: " + ", ".join(f"{k} {v:.2f}" for k, v in top), flush=True)
        if names is not None:
            print("profile by source (ms/step): " + ", ".join(
                f"{k} {v:.2f}" for k, v in summary["by_source"]["ms_per_step"].items()),
                flush=True)
    return state, loss


# What each part of the step is, from the `op_name` JAX gives an HLO instruction: the Keras
# layer path (`encoder_0/ffn_norm/...`) where the op ran inside a layer, the bare op otherwise
# (the loss, which `loss_terms` computes outside any layer). The first rule that matches names
# it; a kernel of a library (cuBLAS, cuDNN), which no op_name reaches, is named by its kernel.
SOURCE_RULES = (
    ("dropout", ("dropout", "rng_bit_generator", "_bernoulli", "threefry")),
    ("optimizer", ("adam/", "/adam", "optimizer")),
    ("layer norm", ("_norm/", "_norm", "layer_normalization")),
    ("attention", ("attention",)),
    ("embedding and output projection", ("embedding", "positions")),
    ("feed-forward", ("ffn_",)),
)
LIBRARY_KERNELS = (
    ("matrix products (cuBLAS)", ("nvjet", "xmma_gemm", "cublas", "gemm_")),
    ("attention (cuDNN)", ("cudnn", "sdpa", "fmha", "flash")),
)


def hlo_op_names(text: str) -> dict[str, str]:
    """Every instruction of an optimized HLO module's text by its name, as its kernel is
    named (`.` and `-` as `_`: `loop_add_fusion.3` runs as `loop_add_fusion_3` on a GPU), with
    its `op_name` metadata; a fusion without its own takes the most common of the
    instructions it calls."""
    import re
    from collections import Counter

    instruction = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")
    header = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
    op_name = re.compile(r'op_name="([^"]*)"')
    calls = re.compile(r"calls=%?([\w.\-]+)")
    names, called, inside, computation = {}, {}, {}, None
    for line in text.splitlines():
        found = instruction.match(line)
        if not found:
            head = header.match(line)
            if head:
                computation = head.group(1)
            continue
        name = found.group(1)
        meta, call = op_name.search(line), calls.search(line)
        if meta:
            names[name] = meta.group(1)
            inside.setdefault(computation, Counter())[meta.group(1)] += 1
        if call:
            called[name] = call.group(1)
    for name, computation in called.items():
        if name not in names and inside.get(computation):
            names[name] = inside[computation].most_common(1)[0][0]
    return {kernel_key(name): value for name, value in names.items()}


def kernel_key(name: str) -> str:
    """An HLO instruction's name as a GPU names its kernel: `.` and `-` as `_`."""
    import re

    return re.sub(r"[.\-]", "_", name)


def source_of(kernel: str, op_name: str | None) -> str:
    """The part of the model a kernel computes (`SOURCE_RULES`), `backward` marked for the
    ops JAX's transpose produced; `other` for what no rule names (the loss, casts, copies)."""
    if op_name is None:
        lowered = kernel.lower()
        for source, keys in LIBRARY_KERNELS:
            if any(key in lowered for key in keys):
                return source
        return "unattributed (copies: no op_name)"
    source = next((name for name, keys in SOURCE_RULES if any(key in op_name for key in keys)),
                  "other (loss, casts, copies)")
    if source != "optimizer" and "transpose(" in op_name:
        source += ", backward"
    return source


def attribute_kernels(by_kernel: list, names: dict[str, str]) -> dict:
    """Device time per step by `source_of` each kernel (`by_kernel`: `[name, ms]` pairs from
    `summarize_profile`), and the 40 longest kernels with their op_name."""
    from collections import Counter

    sources, top = Counter(), []
    for kernel, ms in by_kernel:
        op = names.get(kernel_key(kernel))
        sources[source_of(kernel, op)] += ms
        if len(top) < 40:
            top.append([kernel, ms, op])
    return {"ms_per_step": dict(sources.most_common()), "kernels": top}


def summarize_profile(path: str, steps: int, names: dict[str, str] | None = None) -> dict:
    """Device time per kernel name and per HLO op (ms per step) from an `.xplane.pb`: the
    kernels on a GPU's streams, or (no GPU plane: a CPU run) the events that name an HLO op;
    with `names` (`hlo_op_names` of the step), also `by_source` (`attribute_kernels`)."""
    from collections import Counter

    from jax.profiler import ProfileData

    planes = list(ProfileData.from_file(path).planes)
    on_gpu = any(p.name.startswith("/device:") for p in planes)
    kernels, ops, lines = Counter(), Counter(), Counter()
    for plane in planes:
        if on_gpu and not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if on_gpu and not line.name.startswith("Stream"):
                continue
            for event in line.events:
                stats = dict(event.stats)
                if not on_gpu and "hlo_op" not in stats:
                    continue
                ms = event.duration_ns / 1e6 / steps
                kernels[event.name] += ms
                ops[str(stats.get("hlo_op", "?"))] += ms
                lines[f"{plane.name} {line.name}"] += ms
    summary = {"device": {
        "busy_ms_per_step": sum(kernels.values()),
        "lines": dict(lines),
        "by_hlo_op": ops.most_common(200),
        "by_kernel": kernels.most_common(200)}}
    if names is not None:  # every kernel, not only the 200 listed
        summary["by_source"] = attribute_kernels(kernels.most_common(), names)
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_transformer_jax.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--size", default="base", choices=sorted(SIZES),
                   help="the Transformer's sizes: " + "; ".join(
                       f"{name} {size['num_layers']} layers, width {size['hidden_dim']}"
                       for name, size in SIZES.items()))
    p.add_argument("--batch-size", type=positive_int, nargs="+", default=[64, 128, 256],
                   help="batch sizes to time, one after the other")
    p.add_argument("--length", type=positive_int, default=64, help="source and target tokens")
    p.add_argument("--steps", type=positive_int, default=30, help="timed steps")
    p.add_argument("--warmup", type=positive_int, default=3, metavar="N",
                   help="untimed steps (compilation) first")
    p.add_argument("--precision", default="mixed_bfloat16",
                   choices=("float32", "mixed_bfloat16", "mixed_float16"),
                   help="the Keras dtype policy")
    p.add_argument("--peak-tflops", type=positive_float,
                   help="the device's dense peak for the precision (default: from its name)")
    p.add_argument("--dropout", type=float, default=0.1,
                   help="the model's dropout rate (0: the cost of dropout, by difference)")
    p.add_argument("--output-dtype", default="compute", choices=("compute", "float32"),
                   help="the tied output projection's dtype: the compute dtype (the model's "
                   "own), or float32 as before issue 17 (an ablation)")
    p.add_argument("--loss", default="logits", choices=("logits", "autodiff", "log-softmax"),
                   help="logits: the model's loss (from the logits, its gradient in closed "
                   "form); autodiff: the same loss differentiated by JAX; log-softmax: through a "
                   "log-softmax tensor as before issue 17 (ablations)")
    p.add_argument("--attention-dropout", type=float,
                   help="the attention weights' dropout rate (default: --dropout); at 0, as in "
                   "the paper, the attention may run as cuDNN's fused kernel")
    p.add_argument("--activation-dropout", type=float,
                   help="the feed-forward activations' dropout rate (default: --dropout); the "
                   "paper's Transformer has none there (0)")
    p.add_argument("--fused-projections", action="store_true",
                   help="each attention's projections as matrix products over all B x T rows, "
                   "self-attention's query, key and value in one "
                   "(common.layers.MultiHeadAttention.fused_projections)")
    p.add_argument("--layer-norm", default="keras", choices=("keras", "closed"),
                   help="the layer norms' gradient: Keras's (automatic differentiation) or in "
                   "closed form (common.layers.LayerNormalization.CLOSED_FORM_GRADIENT)")
    p.add_argument("--attention", default="auto", choices=("auto", "weights"),
                   help="auto: the attention without weights where none are needed and none "
                   "are dropped (fused on a GPU); weights: always form them, as before the "
                   "fused path (so that --dropout 0 measures dropout alone)")
    p.add_argument("--dropout-rng", default="keras", choices=("keras", "rbg", "rbg16"),
                   help="dropout's random bits: Keras's threefry, or XLA's RngBitGenerator, a "
                   "float32 uniform or a 16-bit word per element (common.layers.dropout_rng)")
    p.add_argument("--hlo", action="store_true",
                   help="with --profile, also write the step's optimized HLO and the device "
                   "time by part of the model (dropout, layer norm, ...; compiles again)")
    p.add_argument("--profile", metavar="DIR",
                   help="profile 5 more steps of the first batch size into DIR (summary.json)")
    p.add_argument("--seed", type=seed_number, default=0,
                   help="the seed of the weights, the dropout and the batch")
    p.add_argument("--out", help="also write the results to this JSON file (after each size)")
    # JAX only: TensorFlow is neither imported nor needed.
    p.set_defaults(_run=run, _uses_tensorflow=False, _runs_on_jax=True)
    return p


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def check_args(args: argparse.Namespace) -> None:
    """Refuses, before Keras is imported, what the benchmark could not run or write."""
    backend = os.environ.get("KERAS_BACKEND", "jax")
    if backend != "jax":
        raise UserError(f"needs KERAS_BACKEND=jax, got {backend}")
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        rate = getattr(args, name)
        if rate is not None and not 0.0 <= rate < 1.0:
            raise UserError(f"--{name.replace('_', '-')} must be in [0, 1), got {rate}")
    if args.hlo and not args.profile:
        raise UserError("--hlo writes into the --profile folder: give --profile DIR too")
    if args.profile:
        check_output_folder(args.profile, "--profile")
    if args.out:
        check_output_file(args.out, "--out")


def run(args: argparse.Namespace) -> int:
    check_args(args)
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported
    import keras

    if keras.backend.backend() != "jax":
        raise UserError(f"needs KERAS_BACKEND=jax, got {keras.backend.backend()}")
    info = device_info()
    peak = args.peak_tflops or default_peak(info["devices"])
    results = []
    for i, batch in enumerate(args.batch_size):
        result = benchmark(args.size, batch, args.length, args.steps, args.warmup,
                           args.precision, args.seed, args.dropout,
                           args.profile if i == 0 else None, args.output_dtype, args.loss,
                           args.hlo, args.dropout_rng, args.attention_dropout,
                           args.attention, args.activation_dropout,
                           args.fused_projections, args.layer_norm)
        result["mfu"] = result["achieved_tflops"] / peak if peak else None
        results.append(result)
        mfu = f"{100 * result['mfu']:.1f}%" if peak else "n/a (no --peak-tflops)"
        print(f"{args.size} batch {batch}x{args.length} {args.precision}: "
              f"{result['step_s'] * 1e3:.1f} ms/step, {result['examples_per_s']:.0f} ex/s, "
              f"{result['target_tokens_per_s']:.0f} tok/s, "
              f"{result['achieved_tflops']:.1f} model TFLOP/s, MFU {mfu}"
              f"{', fused attention' if result['fused_attention'] else ''}", flush=True)
        report = {"device": info, "peak_tflops": peak, "keras": keras.__version__,
                  "xla_flags": os.environ.get("XLA_FLAGS", ""), "results": results}
        if args.out:
            with reported_write(args.out, "--out"), open(args.out, "w",
                                                          encoding="utf-8") as f:
                f.write(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
