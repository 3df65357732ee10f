"""Benchmark: cached incremental Transformer decoding vs re-running the full decoder each step.

Both paths decode greedily with `common.decoding.greedy_decode` from the same randomly
initialized `TransformerTranslator` (no weights are downloaded) and the same encoded source.
`<end>` (and `<pad>`) are suppressed, so every output is exactly `--steps` tokens long.

- cached: `model.make_step()`: one token per step through the decoder, self-attention
  keys/values kept in a cache, cross-attention keys/values computed once per source;
- full: a step function that runs the whole decoder over the `index + 1` tokens generated so
  far and keeps only the last position's logits (what a model without a cache must do).

Both are traced with `tf.function` and warmed up once before timing. The script checks that
the two give identical tokens, prints the figures and writes them as JSON (`--out`).

Usage:
    python scripts/benchmark_decoding.py --out runs/benchmark_decoding.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden-dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate-dim", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--source-length", type=int, default=24)
    p.add_argument("--steps", type=int, default=64, help="output tokens per sentence")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each path")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the figures to this JSON file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import keras
    import numpy as np
    import tensorflow as tf

    from common.decoding import greedy_decode
    from seq2seq.benchmarking import uncached_initial_state, uncached_step
    from seq2seq.config import TransformerConfig
    from seq2seq.transformer import TransformerTranslator

    keras.utils.set_random_seed(args.seed)
    sizes = TransformerConfig(
        num_layers=args.layers, hidden_dim=args.hidden_dim, num_heads=args.heads,
        intermediate_dim=args.intermediate_dim, dropout=0.0,
        max_length=max(args.steps + 1, args.source_length),
    )
    model = TransformerTranslator(sizes, args.vocab_size, args.vocab_size, name="benchmark")
    model.build()
    rng = np.random.default_rng(args.seed)
    source = rng.integers(4, args.vocab_size, size=(args.batch_size, args.source_length))
    source = tf.constant(source, tf.int32)
    start_id, end_id, steps = 1, 2, args.steps
    # Suppress <end> (and <pad>), so that every output has exactly `steps` real tokens.
    no_end = -1e9 * tf.reduce_sum(tf.one_hot([0, end_id], args.vocab_size), axis=0)

    def without_end(step):
        def wrapped(tokens, state, index):
            logits, state, attention = step(tokens, state, index)
            return logits + no_end, state, attention

        return wrapped

    @tf.function
    def cached(source):
        state = model.initial_state(source, max_length=steps)
        return greedy_decode(without_end(model.make_step()), state, args.batch_size,
                             start_id, end_id, steps).tokens

    @tf.function
    def full(source):
        state = uncached_initial_state(model, source, steps)
        return greedy_decode(without_end(uncached_step(model)), state, args.batch_size,
                             start_id, end_id, steps).tokens

    def timed(fn):
        first = time.perf_counter()
        tokens = fn(source).numpy()
        warmup = time.perf_counter() - first
        times = []
        for _ in range(args.repeats):
            begin = time.perf_counter()
            fn(source).numpy()
            times.append(time.perf_counter() - begin)
        return tokens, warmup, times

    cached_tokens, cached_warmup, cached_times = timed(cached)
    full_tokens, full_warmup, full_times = timed(full)
    identical = bool(np.array_equal(cached_tokens, full_tokens))
    lengths_ok = bool((cached_tokens != 0).all() and cached_tokens.shape[-1] == steps)
    cached_s, full_s = statistics.median(cached_times), statistics.median(full_times)
    result = {
        "model": {"layers": args.layers, "hidden_dim": args.hidden_dim, "heads": args.heads,
                  "intermediate_dim": args.intermediate_dim, "vocab_size": args.vocab_size,
                  "parameters": int(model.count_params())},
        "batch_size": args.batch_size,
        "source_length": args.source_length,
        "output_tokens": steps,
        "repeats": args.repeats,
        "cached_seconds": round(cached_s, 4),
        "full_seconds": round(full_s, 4),
        "cached_tokens_per_second": round(args.batch_size * steps / cached_s, 1),
        "full_tokens_per_second": round(args.batch_size * steps / full_s, 1),
        "speedup": round(full_s / cached_s, 2),
        "identical_tokens": identical,
        "all_outputs_full_length": lengths_ok,
        "warmup_seconds": {"cached": round(cached_warmup, 2), "full": round(full_warmup, 2)},
        "device": ", ".join(d.device_type for d in tf.config.list_logical_devices()),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "tensorflow": tf.__version__,
    }
    for name, value in result.items():
        print(f"{name:<26} {value}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if not identical:
        print("error: cached and full decoding gave different tokens", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
