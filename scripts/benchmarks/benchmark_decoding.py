"""Benchmark: cached incremental Transformer decoding vs re-running the full decoder each step.

All paths decode with `common.decoding` (greedy for `--beam-size 1`, else beam search) from the
same randomly initialized `TransformerTranslator` (no weights are downloaded) and the same
encoded source. `<end>` (and `<pad>`) are suppressed, so every output is exactly `--steps`
tokens long.

- cached: `model.make_step()`: one token per step through the decoder, self-attention
  keys/values written in place into a fixed-size cache (`T_max` = `--steps`), cross-attention
  keys/values computed once per source; the encoder and the whole loop in one `tf.function`.
  Its step is `TransformerTranslator.fast_step` (weights read and laid out once per decode,
  outside the loop);
- cached_xla: the same function compiled with XLA (`jit_compile=True`), one compiled program
  for the encoder and the whole decode loop;
- uncached: a step function that runs the whole decoder over the `index + 1` tokens generated
  so far and keeps only the last position's logits (what a model without a cache must do), in
  a `tf.function` (its growing shapes do not compile with XLA).

Every path is traced (and compiled) once before timing. Then, per batch size, the paths are
timed in turns (`_lib.benchmark.alternate`, the order reversed every other round),
one decoding call each per round; a path's figure is the median of its `--rounds` calls and
each speedup is the ratio of two medians (uncached / cached). The script checks that all paths
give identical tokens, prints the figures and writes them as JSON (`--out`) with the machine
and its load average (`_lib.benchmark.device_info`), and with the number of
operations in the decoding loop's body of each graph path as traced (`ops_per_step`: the
nodes of the `while` body other than `Const`, `Identity` and `NoOp`, before Grappler): a
figure that does not move with the machine's load.

Usage:
    python scripts/benchmarks/benchmark_decoding.py --out docs/records/benchmarks/decoding_cpu.json
    python scripts/benchmarks/benchmark_decoding.py --beam-size 3 --batch-sizes 8 --out beam3.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import (  # noqa: E402
    HelpFormatter,
    Parser,
    apply_quick,
    beam_size_list,
    positive_int,
    run_cli,
    seed_number,
)
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

PATHS = ("cached", "cached_xla", "uncached")
# --quick: a tiny model, for a smoke run (and the tests).
QUICK = {"layers": 1, "hidden_dim": 16, "heads": 2, "intermediate_dim": 32, "vocab_size": 50,
         "batch_sizes": "2,4", "source_length": 6, "steps": 8, "rounds": 3}
# Ids below this are reserved (<pad>, <start>, <end>, <unk>); sources are drawn above them.
FIRST_WORD_ID = 4


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="benchmark_decoding.py", description=__doc__.split("\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--layers", type=positive_int, default=4,
                   help="encoder layers and decoder layers")
    p.add_argument("--hidden-dim", type=positive_int, default=256,
                   help="the model width (a multiple of --heads)")
    p.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    p.add_argument("--intermediate-dim", type=positive_int, default=1024,
                   help="the feed-forward width")
    p.add_argument("--vocab-size", type=int, default=8000,
                   help=f"source and target vocabulary (more than {FIRST_WORD_ID}: ids "
                   f"0-{FIRST_WORD_ID - 1} are reserved)")
    p.add_argument("--batch-sizes", type=beam_size_list, default="8,32",
                   help="comma-separated batch sizes")
    p.add_argument("--beam-size", type=positive_int, default=1,
                   help="1: greedy; more: beam search")
    p.add_argument("--source-length", type=positive_int, default=24,
                   help="source tokens per sentence")
    p.add_argument("--steps", type=positive_int, default=64, help="output tokens per sentence")
    p.add_argument("--rounds", type=int, default=3,
                   help="timed calls of each path per batch size, alternating (at least 3)")
    p.add_argument("--seed", type=seed_number, default=0,
                   help="the seed of the weights and the source ids")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: " + ", ".join(f"{k} {v}" for k, v in QUICK.items())
                   + " (options given win)")
    p.add_argument("--out", help="write the figures to this JSON file")
    p.set_defaults(_run=run)
    return p


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    """Applies `--quick` and refuses values the model or the timing cannot take (one
    `UserError` naming the option), before any work."""
    apply_quick(args, QUICK)
    if isinstance(args.batch_sizes, str):  # the --quick value
        args.batch_sizes = beam_size_list(args.batch_sizes)
    args.batch_sizes = list(args.batch_sizes)
    if args.rounds < 3:
        raise UserError(f"--rounds must be at least 3 (medians of rounds), got {args.rounds}")
    if args.vocab_size <= FIRST_WORD_ID:
        raise UserError(f"--vocab-size must be more than {FIRST_WORD_ID} (ids 0-"
                        f"{FIRST_WORD_ID - 1} are reserved), got {args.vocab_size}")
    if args.hidden_dim % args.heads:
        raise UserError(f"--hidden-dim {args.hidden_dim} is not a multiple of --heads "
                        f"{args.heads}")
    if args.out:
        check_output_file(args.out, "--out")
    return args


def parse_args(argv=None) -> argparse.Namespace:
    """The options of `argv`, checked (`check_args`); a bad one exits with status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return check_args(args)
    except UserError as error:
        parser.error(str(error))


def loop_body_ops(function, *args) -> int:
    """The operations in the body of the `while` loop of `function`'s graph for `args` (its
    traced concrete function; the nodes other than `Const`, `Identity` and `NoOp`)."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}
    bodies = [library[node.attr["body"].func.name] for node in graph.node
              if node.op in ("While", "StatelessWhile")]
    if len(bodies) != 1:
        raise ValueError(f"expected one while loop in the graph, found {len(bodies)}")
    return sum(node.op not in ("Const", "Identity", "NoOp") for node in bodies[0].node_def)


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    import keras
    import numpy as np
    import tensorflow as tf

    from common.decoding import default_method, make_strategy
    from seq2seq.config import TransformerConfig
    from seq2seq.transformer import TransformerTranslator

    from _lib.benchmark import alternate, write_json
    from _lib.translators import uncached_initial_state, uncached_step

    keras.utils.set_random_seed(args.seed)
    sizes = TransformerConfig(
        num_layers=args.layers, hidden_dim=args.hidden_dim, num_heads=args.heads,
        intermediate_dim=args.intermediate_dim, dropout=0.0,
        max_length=max(args.steps + 1, args.source_length),
    )
    model = TransformerTranslator(sizes, args.vocab_size, args.vocab_size, name="benchmark")
    model.build()
    rng = np.random.default_rng(args.seed)
    start_id, end_id, steps = 1, 2, args.steps
    strategy = make_strategy(default_method(args.beam_size), beam_size=args.beam_size,
                             n_best=1, length_penalty=0.6)
    # Suppress <end> (and <pad>), so that every output has exactly `steps` real tokens.
    no_end = -1e9 * tf.reduce_sum(tf.one_hot([0, end_id], args.vocab_size), axis=0)

    def without_end(step):
        def wrapped(tokens, state, index):
            logits, state, attention = step(tokens, state, index)
            return logits + no_end, state, attention

        return wrapped

    def cached(source):
        state = model.initial_state(source, max_length=steps)
        return strategy(without_end(model.make_step()), state, tf.shape(source)[0], start_id,
                        end_id, steps).tokens

    def uncached(source):
        state = uncached_initial_state(model, source, steps)
        return strategy(without_end(uncached_step(model)), state, tf.shape(source)[0],
                        start_id, end_id, steps).tokens

    functions = {"cached": tf.function(cached, autograph=False),
                 "cached_xla": tf.function(cached, autograph=False, jit_compile=True),
                 "uncached": tf.function(uncached, autograph=False)}
    rows = []
    for batch in args.batch_sizes:
        source = tf.constant(rng.integers(FIRST_WORD_ID, args.vocab_size,
                                          size=(batch, args.source_length)), tf.int32)
        tokens, warmup = {}, {}
        for name in PATHS:
            start = time.perf_counter()
            tokens[name] = functions[name](source).numpy()
            warmup[name] = time.perf_counter() - start

        def once(name, source=source):
            start = time.perf_counter()
            functions[name](source).numpy()
            return time.perf_counter() - start

        rounds = alternate({name: (lambda name=name: once(name)) for name in PATHS},
                           args.rounds)
        seconds = {name: statistics.median(rounds[name]) for name in PATHS}
        reference = tokens["uncached"]
        rows.append({
            "batch_size": batch,
            **{f"{name}_s": seconds[name] for name in PATHS},
            **{f"{name}_tokens_per_s": batch * steps / seconds[name] for name in PATHS},
            "speedup_cached_xla": seconds["uncached"] / seconds["cached_xla"],
            "speedup_cached": seconds["uncached"] / seconds["cached"],
            "ops_per_step": {name: loop_body_ops(functions[name], source)
                             for name in PATHS if name != "cached_xla"},
            "xla_over_graph": seconds["cached"] / seconds["cached_xla"],
            "identical_tokens": all(np.array_equal(tokens[n], reference) for n in PATHS),
            "all_outputs_full_length": bool((reference != 0).all()
                                            and reference.shape[-1] == steps),
            "rounds_s": rounds,
            "warmup_s": warmup,
        })
    model_sizes = {"layers": args.layers, "hidden_dim": args.hidden_dim, "heads": args.heads,
                   "intermediate_dim": args.intermediate_dim, "vocab_size": args.vocab_size,
                   "parameters": int(model.count_params())}
    print(f"model {model_sizes}; beam size {args.beam_size}; {steps} tokens; source "
          f"{args.source_length}; medians of {args.rounds} alternating rounds")
    print(f"{'batch':>5} {'cached s':>9} {'XLA s':>9} {'uncached s':>10} "
          f"{'uncached/XLA':>12} {'uncached/cached':>15} {'ops/step cached':>15} "
          f"{'identical':>9}")
    for r in rows:
        print(f"{r['batch_size']:>5} {r['cached_s']:>9.3f} {r['cached_xla_s']:>9.3f} "
              f"{r['uncached_s']:>10.3f} {r['speedup_cached_xla']:>12.2f} "
              f"{r['speedup_cached']:>15.2f} {r['ops_per_step']['cached']:>15} "
              f"{r['identical_tokens']!s:>9}")
    if args.out:
        with reported_write(args.out, "--out"):
            path = write_json(args.out, rows, model=model_sizes, beam_size=args.beam_size,
                              source_length=args.source_length, output_tokens=steps,
                              rounds=args.rounds, seed=args.seed)
        print(f"wrote {path}")
    if not all(r["identical_tokens"] for r in rows):
        print("error: the cached and uncached paths gave different tokens", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
