"""Decoding latency: greedy and beam search, per caption and per sentence, single and batched.

    python scripts/benchmark_latency.py --out runs/latency.json
    python scripts/benchmark_latency.py --quick            # tiny models, for a smoke test

Models (randomly initialized from the project's own builders; nothing is downloaded):

| model | size |
|---|---|
| `captioner` | the `demo` preset (small-cnn on 64x64 images, LSTM 256), vocabulary 64 |
| `transformer` | the `spa-eng-cpu` preset (3 + 3 layers, width 192), vocabularies of 12,000 |
| `bahdanau` | the `spa-eng-cpu` preset (GRU 192, input feeding), vocabularies of 12,000 |
| `keras-io` | the keras-io example's Transformer (1 + 1 layers, embed 256, FF 2048, 8 heads), vocabularies of 15,000: the reference point, greedy |

Each (model, method, batch) decodes a batch of random images or source sentences of
`--source-length` ids with `common.decoding` inside one `tf.function` (the model's step: the
encoder once, then one token per step; for the Transformer also `uncached`, re-running the
whole decoder over the tokens so far at every step, as the keras-io example does). `<end>`
is suppressed, so every output is exactly `--tokens` long (`--caption-tokens` for captions).
The first call (tracing) is excluded; the median of `--repeats` calls is reported, per batch
and per sentence (batch time / batch size). What is timed is the model's decoding of token
ids: no tokenization or image decoding.

The keras-io example's greedy decoding takes about 1.6 s per 20-token sentence on the 2-core
CPU this project was developed on (it re-runs the whole model in Python for every token);
`keras_io_speedup` in the JSON is that figure over ours at the same size, batch 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

KERAS_IO_SECONDS_PER_SENTENCE = 1.6  # keras-io greedy decoding, 20 tokens, this 2-core CPU
START_ID, END_ID = 1, 2
COLUMNS = ["model", "method", "beam", "path", "batch", "tokens", "batch_ms", "ms_per_item",
           "tokens_per_s"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmark_latency.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="captioner,transformer,bahdanau,keras-io",
                   help="comma-separated: captioner, transformer, bahdanau, keras-io")
    p.add_argument("--beams", default="1,3,5", help="beam sizes besides greedy")
    p.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    p.add_argument("--tokens", type=int, default=20, help="output tokens per sentence")
    p.add_argument("--caption-tokens", type=int, default=16, help="output tokens per caption")
    p.add_argument("--source-length", type=int, default=20, help="source tokens per sentence")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per setting")
    p.add_argument("--no-uncached", action="store_true",
                   help="skip the Transformer's uncached path (slow at large beams)")
    p.add_argument("--quick", action="store_true",
                   help="tiny models, batches 1 and 4, 2 repeats: a smoke test")
    p.add_argument("--out", help="write the results (and device info) to this JSON file")
    return p.parse_args(argv)


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
    from benchmark_training import TRANSLATOR_SIZES

    from seq2seq.models import build_model
    from seq2seq.train import make_run_config

    arch = "transformer" if name == "keras-io" else name
    if arch not in ("transformer", "bahdanau"):
        raise SystemExit(f"unknown model {name!r}; choose from: captioner, transformer, "
                         "bahdanau, keras-io")
    size = "tiny" if quick else ("keras-io" if name == "keras-io" else "spa-eng-cpu")
    preset, overrides, vocab = TRANSLATOR_SIZES[size]
    config = make_run_config(arch, "dates", preset,
                             {**(overrides if arch == "transformer" else {}), "dropout": 0.0})
    model = build_model(config.model, vocab, vocab)
    model.build()
    return model, vocab, arch


def make_decoder(model, kind: str, vocab: int, method: str, beam: int, tokens: int,
                 uncached: bool):
    """A `tf.function` `(inputs) -> tokens (B, K, T)` decoding with `<end>` suppressed."""
    import tensorflow as tf

    from common.decoding import beam_search, greedy_decode

    no_end = -1e9 * tf.reduce_sum(tf.one_hot([0, END_ID], vocab), axis=0)

    def without_end(step):
        def wrapped(ids, state, index):
            logits, state, attention = step(ids, state, index)
            return tf.cast(logits, tf.float32) + no_end, state, attention

        return wrapped

    def decode(inputs):
        if kind == "captioner":
            state, step = model.initial_decoding_state(images=inputs), model.make_step()
        elif uncached:
            from benchmark_decoding import uncached_initial_state, uncached_step

            state, step = uncached_initial_state(model, inputs, tokens), uncached_step(model)
        elif kind == "transformer":
            state, step = model.initial_state(inputs, max_length=tokens), model.make_step()
        else:
            state, step = model.initial_state(inputs), model.make_step()
        batch = tf.shape(inputs)[0]
        common = dict(step=without_end(step), initial_state=state, batch_size=batch,
                      start_id=START_ID, end_id=END_ID, max_length=tokens)
        if method == "greedy":
            return greedy_decode(**common).tokens
        return beam_search(**common, beam_size=beam).tokens

    return tf.function(decode)


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


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import keras
    import numpy as np

    from common.training.benchmark import format_table

    batches = [4, 1] if args.quick else [int(b) for b in args.batches.split(",")]
    batches = sorted(set(batches))
    repeats = 2 if args.quick else args.repeats
    beams = [int(b) for b in args.beams.split(",")]
    rows = []
    keras.utils.set_random_seed(0)
    for name in args.models.split(","):
        model, vocab, kind = build(name, args.quick)
        tokens = args.caption_tokens if kind == "captioner" else args.tokens
        settings = [("greedy", 1)] + [("beam", b) for b in beams]
        if name == "keras-io":
            settings = [("greedy", 1)]
        paths = ["cached"] + (["uncached"] if kind == "transformer" and not args.no_uncached
                              else [])
        rng = np.random.default_rng(0)
        for batch in batches:
            inputs = make_inputs(model, kind, vocab, batch, args.source_length, rng)
            for method, beam in settings:
                for path in paths:
                    if name == "keras-io" and batch != 1:
                        continue
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
                           "full_length": bool((out != 0).all() and out.shape[-1] == tokens)}
                    if name == "keras-io" and not args.quick:
                        row["keras_io_seconds"] = KERAS_IO_SECONDS_PER_SENTENCE
                        row["keras_io_speedup"] = KERAS_IO_SECONDS_PER_SENTENCE / seconds
                    rows.append(row)
                    print(format_table([row], COLUMNS).splitlines()[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from common.training.benchmark import format_table, write_json

    rows = run(args)
    print()
    print(format_table(rows, COLUMNS))
    for row in rows:
        if "keras_io_speedup" in row:
            print(f"keras-io size, greedy, {row['path']}, one {row['tokens']}-token sentence: "
                  f"{row['batch_ms']:.1f} ms ({row['keras_io_speedup']:.1f}x faster than the "
                  f"keras-io example's {KERAS_IO_SECONDS_PER_SENTENCE} s)")
    if args.out:
        write_json(args.out, rows, command=" ".join(sys.argv), quick=args.quick)
        print(f"wrote {args.out}")
    bad = [r for r in rows if not r["full_length"]]
    if bad:
        print(f"error: {len(bad)} setting(s) gave outputs shorter than asked", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
