"""Decoding latency: greedy and beam search, per caption and per sentence, single and batched.

    python scripts/benchmarks/benchmark_latency.py --out latency.json
    python scripts/benchmarks/benchmark_latency.py --models keras-io \\
        --out docs/records/benchmarks/latency_cpu.json
    python scripts/benchmarks/benchmark_latency.py --quick    # tiny models, for a smoke test

Models (randomly initialized from the project's own builders; nothing is downloaded):

| model | size |
|---|---|
| `captioner` | the `demo` preset (small-cnn on 64x64 images, LSTM 256), vocabulary 64 |
| `transformer` | the `spa-eng-cpu` preset (3 + 3 layers, width 192), vocabularies of 12,000 |
| `bahdanau` | the `spa-eng-cpu` preset (GRU 192, input feeding), vocabularies of 12,000 |
| `keras-io` | the `keras-io` size of `benchmark_training.py` (1 + 1 layers, embed 256, FF 2048, 8 heads of 256, vocabularies of 15,000), side by side with the keras-io example itself (below) |

Each (model, method, batch) of the table decodes a batch of random images or source sentences of
`--source-length` ids with `common.decoding` inside one `tf.function` (the model's step: the
encoder once, then one token per step; for the Transformer also `uncached`, re-running the
whole decoder over the tokens so far at every step, as the keras-io example does). `<end>`
is suppressed, so every output is exactly `--tokens` long (`--caption-tokens` for captions).
The first call (tracing) is excluded; the median of `--repeats` calls is reported, per batch
and per sentence (batch time / batch size). What is timed is the model's decoding of token
ids: no tokenization or image decoding.

`keras-io` is timed against the keras-io example itself, in this process, when the peer
programs' folder exists (`--peers`, default `../shared/peers` from the repository root): the
example's own `decode_sequence` (forced to `--tokens`, it re-runs the whole model in Python for
every token) and the project's same-size model (cached and uncached), on the same sentence (one
of the example's synthetic ones; the project decodes the example's own token ids of it), batch
1, in `--rounds` alternating rounds (>= 3, the order reversed every other round), after one
untimed call each; medians, and the ratio of the medians. The project's time excludes turning
words into ids and back; the example's includes its TextVectorization calls (it runs them per
token). Without the folder the project is timed alone and no ratio is given: no figure of
another program is ever written into a ratio. `--quick` shrinks the other models, not
`keras-io`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, apply_quick, beam_size_list, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

from _lib.decoding import make_decoder  # noqa: E402

MODELS = ("captioner", "transformer", "bahdanau", "keras-io")
COLUMNS = ["model", "method", "beam", "path", "batch", "tokens", "batch_ms", "ms_per_item",
           "tokens_per_s"]


PEER_COLUMNS = ["side", "path", "params", "batch", "tokens", "median_ms", "speedup"]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_latency.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--beams", type=beam_size_list, default="1,3,5",
                   help="comma-separated beam sizes besides greedy")
    p.add_argument("--batches", type=beam_size_list, default="1,32",
                   help="comma-separated batch sizes")
    p.add_argument("--tokens", type=int, default=20, help="output tokens per sentence")
    p.add_argument("--caption-tokens", type=int, default=16, help="output tokens per caption")
    p.add_argument("--source-length", type=int, default=20, help="source tokens per sentence")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per setting")
    p.add_argument("--no-uncached", action="store_true",
                   help="skip the Transformer's uncached path (slow at large beams)")
    p.add_argument("--quick", action="store_true",
                   help="tiny models, batches 1 and 4, 2 repeats (options given win): a "
                        "smoke test")
    p.add_argument("--peers", default=None,
                   help="the peer programs' folder (default ../shared/peers from the repo root)")
    p.add_argument("--rounds", type=int, default=3,
                   help="keras-io: alternating rounds of the example and the project (>= 3)")
    p.add_argument("--out", help="write the results (and device info) to this JSON file")
    p.set_defaults(_run=run_main)
    return p


def build(name: str, quick: bool) -> tuple[Any, int, str]:
    """`(model, vocabulary size, kind)` for a model name; kind is captioner/transformer/
    bahdanau."""
    if name == "captioner":
        from captioner.config import CaptionerRunConfig
        from captioner.presets import get_preset
        from captioner.train import apply_overrides, build_model

        config = apply_overrides(CaptionerRunConfig(),
                                 get_preset("tiny" if quick else "demo"))
        return build_model(config, 64), 64, "captioner"
    from seq2seq.models import build_model
    from seq2seq.train import make_run_config

    from _lib.translators import TRANSLATOR_SIZES

    arch = "transformer" if name == "keras-io" else name
    if arch not in ("transformer", "bahdanau"):
        raise UserError(f"unknown model {name!r}; choose from: captioner, transformer, "
                        "bahdanau, keras-io")
    size = "keras-io" if name == "keras-io" else ("tiny" if quick else "spa-eng-cpu")
    preset, overrides, vocab = TRANSLATOR_SIZES[size]
    config = make_run_config(arch, "dates", preset,
                             {**(overrides if arch == "transformer" else {}), "dropout": 0.0})
    model = build_model(config.model, vocab, vocab)
    model.build()
    return model, vocab, arch


def time_decoder(decode, inputs, repeats: int) -> tuple[float, list[float], Any]:
    first = time.perf_counter()
    out = decode(inputs).numpy()
    trace = time.perf_counter() - first
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        decode(inputs).numpy()
        times.append(time.perf_counter() - begin)
    return trace, times, out


def make_inputs(model, kind: str, vocab: int, batch: int, source_length: int, rng):
    import tensorflow as tf

    if kind == "captioner":
        height, width = model.encoder_config.image_size
        return tf.constant(rng.uniform(0, 255, (batch, height, width, 3)), tf.float32)
    return tf.constant(rng.integers(4, vocab, (batch, source_length)), tf.int32)


def run(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    """The table: every (model, method, path, batch) of `names` (not `keras-io`)."""
    import keras
    import numpy as np

    from _lib.benchmark import format_table

    batches = sorted(set(args.batches))
    repeats = args.repeats
    beams = list(args.beams)
    rows = []
    keras.utils.set_random_seed(0)
    for name in names:
        model, vocab, kind = build(name, args.quick)
        tokens = args.caption_tokens if kind == "captioner" else args.tokens
        settings = [("greedy", 1)] + [("beam", b) for b in beams]
        paths = ["cached"] + (["uncached"] if kind == "transformer" and not args.no_uncached
                              else [])
        rng = np.random.default_rng(0)
        for batch in batches:
            inputs = make_inputs(model, kind, vocab, batch, args.source_length, rng)
            for method, beam in settings:
                for path in paths:
                    decode = make_decoder(model, kind, vocab, method, beam, tokens,
                                          path == "uncached")
                    trace, times, out = time_decoder(decode, inputs, repeats)
                    seconds = statistics.median(times)
                    row = {"model": name, "kind": kind, "method": method, "beam": beam,
                           "path": path if kind == "transformer" else "-", "batch": batch,
                           "tokens": tokens, "batch_ms": 1000 * seconds,
                           "ms_per_item": 1000 * seconds / batch,
                           "tokens_per_s": batch * tokens / seconds,
                           "trace_s": trace, "times_s": times,
                           "params": int(model.count_params()),
                           "full_length": full_length(out, tokens)}
                    rows.append(row)
                    print(format_table([row], COLUMNS).splitlines()[-1], flush=True)
    return rows


def full_length(tokens, length: int) -> bool:
    """Whether every output in `tokens (B, K, T)` has `length` real (non-pad) tokens."""
    return bool((tokens != 0).all() and tokens.shape[-1] == length)


def versus_peer(args: argparse.Namespace) -> dict[str, Any]:
    """The project's `keras-io` size (cached and uncached greedy) and, when the peer folder
    exists, the keras-io example's own `decode_sequence`, alternately on one sentence, batch
    1 (module docstring)."""
    import numpy as np
    import tensorflow as tf

    from _lib.benchmark import PEERS_DIR, alternate

    folder = args.peers or str(PEERS_DIR)
    peer_module = check_keras_io(args)
    model, vocab, kind = build("keras-io", args.quick)
    sentence, peer = None, None
    if peer_module is not None:
        peer = peer_module.Peer()
        sentence = peer.test_pairs[0][0]
        ids = peer.eng_vectorization([sentence]).numpy()[:, :args.source_length]
    else:
        ids = np.random.default_rng(0).integers(4, vocab, (1, args.source_length))
    inputs = tf.constant(ids, tf.int32)
    decoders = {path: make_decoder(model, kind, vocab, "greedy", 1, args.tokens,
                                   path == "uncached") for path in ("cached", "uncached")}
    outputs = {path: decode(inputs).numpy() for path, decode in decoders.items()}  # traces

    def timer(fn):
        def measure() -> float:
            begin = time.perf_counter()
            fn()
            return time.perf_counter() - begin
        return measure

    measures = {f"project {path}": timer(lambda d=decode: d(inputs).numpy())
                for path, decode in decoders.items()}
    peer_output = None
    if peer is not None:
        peer_output = peer.decode_sequence(sentence, force_length=True)  # untimed first call
        measures["peer"] = timer(lambda: peer.decode_sequence(sentence, force_length=True))
    figures = alternate(measures, args.rounds)
    rows = []
    for path in decoders:
        rows.append({"side": "project", "path": path, "params": int(model.count_params()),
                     "times_s": figures[f"project {path}"],
                     "full_length": full_length(outputs[path], args.tokens)})
    if peer is not None:
        words = peer_output.split()[1:]  # after "[start]"
        rows.append({"side": "peer", "path": "decode_sequence (re-runs the model per token)",
                     "params": int(peer.transformer.count_params()), "times_s": figures["peer"],
                     "full_length": len(words) == args.tokens})
    for row in rows:
        row.update({"batch": 1, "tokens": args.tokens, "rounds": args.rounds,
                    "median_ms": 1000 * statistics.median(row["times_s"])})
    peer_ms = rows[-1]["median_ms"] if peer is not None else None
    speedups = {}
    for row in rows[:2]:
        row["speedup"] = peer_ms / row["median_ms"] if peer_ms else None
        speedups[row["path"]] = row["speedup"]
    return {"rows": rows, "peers_dir": folder, "peer_found": peer is not None,
            "sentence": sentence, "source_ids": [int(i) for i in ids[0]],
            "speedup_cached": speedups["cached"], "speedup_uncached": speedups["uncached"]}


def check_keras_io(args: argparse.Namespace) -> Any:
    """Refuses lengths the `keras-io` comparison cannot take (learned positions for 20
    tokens; the example decodes its own fixed length); returns the peer module, or None
    without the peer folder."""
    from _lib.benchmark import PEERS_DIR, load_peer
    from _lib.translators import TRANSLATOR_SIZES

    limit = TRANSLATOR_SIZES["keras-io"][1]["max_length"]
    if args.tokens > limit or args.source_length > limit:
        raise UserError(f"the keras-io size has learned positions for at most {limit} tokens; "
                        f"got --tokens {args.tokens}, --source-length {args.source_length}")
    peer_module = load_peer("keras_io_nmt", args.peers or str(PEERS_DIR))
    if peer_module is not None and peer_module.max_decoded_sentence_length != args.tokens:
        raise UserError(f"the keras-io example decodes "
                        f"{peer_module.max_decoded_sentence_length} tokens; got --tokens "
                        f"{args.tokens}")
    return peer_module


def run_main(args: argparse.Namespace) -> int:
    from _lib.benchmark import format_table, write_json

    apply_quick(args, {"batches": [1, 4], "repeats": 2})
    names = args.models.split(",")
    for name in names:
        if name not in MODELS:
            raise UserError(f"unknown model {name!r}; choose from: {', '.join(MODELS)}")
    for option in ("tokens", "caption_tokens", "source_length", "repeats"):
        if getattr(args, option) < 1:
            raise UserError(f"--{option.replace('_', '-')} must be >= 1, "
                            f"got {getattr(args, option)}")
    if args.rounds < 3:
        raise UserError(f"--rounds must be >= 3 (medians of at least 3), got {args.rounds}")
    if "keras-io" in names:
        check_keras_io(args)
    if args.out:
        check_output_file(args.out, "--out")
    rows = run(args, [n for n in names if n != "keras-io"])
    comparison = versus_peer(args) if "keras-io" in names else None
    if rows:
        print()
        print(format_table(rows, COLUMNS))
    if comparison is not None:
        print()
        print(f"keras-io size, greedy, batch 1, {args.tokens} tokens, medians of "
              f"{args.rounds} alternating rounds:")
        print(format_table(comparison["rows"], PEER_COLUMNS))
        if comparison["peer_found"]:
            print(f"the project's same-size model: {comparison['speedup_cached']:.1f}x faster "
                  f"than the keras-io example ({comparison['speedup_uncached']:.1f}x without "
                  f"its cache), measured in this run")
        else:
            print(f"no peer programs in {comparison['peers_dir']}: the project alone, no ratio")
    if args.out:
        extra = {"keras_io": comparison} if comparison is not None else {}
        with reported_write(args.out, "--out"):
            write_json(args.out, rows, command=" ".join(sys.argv), quick=args.quick, **extra)
        print(f"wrote {args.out}")
    bad = [r for r in rows + (comparison["rows"] if comparison else []) if not r["full_length"]]
    if bad:
        print(f"error: {len(bad)} setting(s) gave outputs shorter than asked", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and runs the benchmark; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
