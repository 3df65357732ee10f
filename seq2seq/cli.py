"""The `seq2seq` command line: train, evaluate, translate, export, serve."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from common.cli import (
    EXIT_USAGE,
    Subcommand,
    add_export_arguments,
    add_serve_arguments,
    build_parser,
    exported_beam_sizes,
    non_negative_float,
    positive_float,
    positive_int,
    run_cli,
    serve_savedmodel,
)
from seq2seq.config import CELLS, LOCAL_MODES, POSITIONS
from seq2seq.models import ARCHS
from seq2seq.presets import PRESETS

PROG = "seq2seq"
DESCRIPTION = """\
Attention translators: Bahdanau (RNNsearch) and the Transformer, and the encoder-decoder
without attention (seq2seq-noattn) to compare them with.

Typical use:
  seq2seq train --dataset dates --arch transformer --preset dates-demo --out runs/dates
  seq2seq evaluate runs/dates --dataset dates
  seq2seq translate runs/dates "25th of November 2026"
  seq2seq translate runs/dates "Nov 3, 1999" --plot nov3.png --html dates.html
  seq2seq export runs/dates export/dates
  seq2seq serve export/dates --model-name dates
"""

DATASETS = ("tsv", "dates")
SCORES = ("additive", "dot", "scaled_dot", "general", "cosine", "location")


# -- train -----------------------------------------------------------------------------------


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help=f"one of: {', '.join(DATASETS)}")
    p.add_argument("--data", help="training TSV (source<TAB>target), for --dataset tsv")
    p.add_argument("--reverse", action="store_true", default=None,
                   help="translate the second column into the first")
    p.add_argument("--min-count", type=positive_int,
                   help="the fewest occurrences that put a token in a vocabulary")
    p.add_argument("--max-vocab", type=positive_int, help="the largest vocabulary per side")
    p.add_argument("--arch", required=True, help=f"one of: {', '.join(ARCHS.names())}")
    p.add_argument("--preset", help=f"starting sizes, one of: {', '.join(PRESETS.names())}")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                   help="0 silent, 1 a progress bar, 2 one line per epoch")

    g = p.add_argument_group("training (override the preset)")
    g.add_argument("--epochs", type=positive_int)
    g.add_argument("--steps-per-epoch", type=positive_int)
    g.add_argument("--batch-size", type=positive_int)
    g.add_argument("--learning-rate", type=positive_float,
                   help="Adam's learning rate (the Transformer's peak after warm-up)")
    g.add_argument("--clip-norm", type=positive_float)
    g.add_argument("--seed", type=int)
    g.add_argument("--deterministic", action="store_true", default=None,
                   help="bit-identical runs for one seed (op determinism, no graph "
                        "rewriting)")
    g.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="also save a checkpoint every N steps (0: at epoch ends only)")
    g.add_argument("--precision", choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"),
                   help="mixed_float16 adds loss scaling; auto (the default): bfloat16 on "
                   "GPUs of compute capability 8+, float16 on 7.x, float32 on CPU")
    g.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="compile the training step with XLA (default: on with a GPU)")
    g.add_argument("--distribute", help="none, mirrored, multi-worker or auto")
    g.add_argument("--logical-cpus", type=int, help="split the CPU into this many devices")

    g = p.add_argument_group("model sizes (override the preset)")
    g.add_argument("--embedding-dim", type=positive_int, help="bahdanau")
    g.add_argument("--units", type=positive_int, help="bahdanau: recurrent units")
    g.add_argument("--cell", choices=CELLS, help="bahdanau")
    g.add_argument("--score", help=f"bahdanau attention score: {', '.join(SCORES)}")
    g.add_argument("--attention-units", type=positive_int, help="bahdanau additive score size")
    g.add_argument("--input-feeding", action="store_true", default=None, help="bahdanau")
    g.add_argument("--local", choices=LOCAL_MODES,
                   help="bahdanau: Luong's local attention, monotonic (local-m) or predictive "
                        "(local-p, with the Gaussian term); default global")
    g.add_argument("--attention-window", type=positive_int, metavar="D",
                   help="bahdanau --local: the window's half-width (2D+1 positions; default 5)")
    g.add_argument("--copy", action="store_true", default=None,
                   help="bahdanau, transformer: a pointer-generator that copies source words "
                        "(names outside the target vocabulary come through)")
    g.add_argument("--layers", type=positive_int, help="transformer layers")
    g.add_argument("--hidden-dim", type=positive_int, help="transformer width")
    g.add_argument("--heads", type=positive_int, help="transformer heads")
    g.add_argument("--intermediate-dim", type=positive_int, help="transformer feed-forward")
    g.add_argument("--positions", choices=POSITIONS, help="transformer positions")
    g.add_argument("--max-length", type=positive_int, help="transformer longest sequence")
    g.add_argument("--post-norm", action="store_true", default=None,
                   help="transformer: post-layer-norm (default pre)")
    g.add_argument("--tie-embeddings", action="store_true", default=None, help="transformer")
    g.add_argument("--warmup-steps", type=positive_int, help="transformer warm-up")
    g.add_argument("--dropout", type=non_negative_float)
    g.add_argument("--label-smoothing", type=non_negative_float)
    g.add_argument("--max-decode-length", type=positive_int)


def _train(args: argparse.Namespace) -> int:
    from seq2seq.train import options_from_args, train

    config = options_from_args(args)
    train(config, args.out, resume=args.resume, verbose=args.verbose)
    return 0


# -- evaluate --------------------------------------------------------------------------------


def _decode_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam-size", type=positive_int, default=1)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--max-decode-length", type=positive_int,
                   help="longest output (default: the run's)")
    p.add_argument("--attention-layer", type=int, default=-1,
                   help="transformer: the decoder layer whose cross-attention is returned")
    p.add_argument("--attention-head", type=int,
                   help="transformer: the head returned (default: the average of the heads)")


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="a TSV of source<TAB>reference pairs")
    source.add_argument("--dataset", choices=("dates",), help="the held-out dates split")
    _decode_arguments(p)
    p.add_argument("--limit", type=positive_int, help="score only the first N pairs")
    p.add_argument("--json", metavar="OUT", help="also write the scores to this JSON file")


def _evaluate(args: argparse.Namespace) -> int:
    from seq2seq.evaluate import evaluate

    scores = evaluate(args.run_dir, data=args.data, dataset=args.dataset,
                      beam_size=args.beam_size, batch_size=args.batch_size,
                      max_length=args.max_decode_length, limit=args.limit, json_path=args.json,
                      attention_layer=args.attention_layer, attention_head=args.attention_head)
    width = max(len(k) for k in scores)
    for name, value in scores.items():
        shown = f"{value:.2f}" if isinstance(value, float) else value
        print(f"{name:<{width}}  {shown}")
    return 0


# -- translate -------------------------------------------------------------------------------


def _translate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="MODEL",
                   help="a run directory, or a SavedModel written by `seq2seq export`")
    p.add_argument("text", nargs="*", metavar="TEXT", help="sentences (default: stdin lines)")
    _decode_arguments(p)
    p.add_argument("--n-best", type=positive_int, metavar="N",
                   help="the N best translations of the beam (at most --beam-size), best "
                        "first: lines LINE<TAB>RANK<TAB>SCORE<TAB>NORMALIZED SCORE<TAB>TEXT "
                        "(the sum of log-probabilities, and the length-normalized score the "
                        "beam ranks by); with --json an 'n_best' list per line")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line, with tokens, score and attention")
    g = p.add_argument_group("attention figures")
    g.add_argument("--plot", metavar="OUT.png",
                   help="save each sentence's attention as a heatmap (source tokens across, "
                        "target tokens down); with several sentences OUT-1.png, OUT-2.png, ... "
                        "numbered by input line")
    g.add_argument("--all-heads", action="store_true",
                   help="transformer run directory: draw every head of --attention-layer "
                        "(one decode per head), in --plot as a grid and in --html with a picker")
    g.add_argument("--html", metavar="OUT.html",
                   help="write one self-contained page with all sentences: hover a target word "
                        "to see the source words it attended to")


def _load_translator(args: argparse.Namespace):
    """A `Translator` for a run directory, an `ExportedTranslator` for a SavedModel."""
    from seq2seq.inference import open_model

    return open_model(args.run_dir, args.attention_layer, args.attention_head)


def _check_figure_options(args: argparse.Namespace) -> None:
    """Fails before loading the model when a figure cannot be written."""
    from common.errors import UserError
    from common.viz import check_output_path

    if args.plot:
        check_output_path(args.plot, ".png", "--plot")
    if args.html:
        check_output_path(args.html, ".html", "--html")
    if args.all_heads:
        from common.export.savedmodel import is_saved_model

        if not (args.plot or args.html):
            raise UserError("--all-heads: nothing to draw; add --plot OUT.png or --html OUT.html")
        if args.attention_head is not None:
            raise UserError("--all-heads draws every head; leave out --attention-head")
        if is_saved_model(args.run_dir):
            raise UserError("--all-heads: a SavedModel returns the attention chosen at export "
                            "time; give a run directory")


def _write_figures(args: argparse.Namespace, translator, texts, results) -> None:
    from seq2seq.visualize import head_attention, write_alignment_plots, write_translation_viewer

    heads = None
    if args.all_heads:
        heads = head_attention(translator, texts, args.attention_layer,
                               beam_size=args.beam_size, batch_size=args.batch_size,
                               max_length=args.max_decode_length)
    if args.plot:
        for path in write_alignment_plots(results, args.plot, heads):
            print(f"{PROG} translate: wrote {path}", file=sys.stderr)
    if args.html:
        path = write_translation_viewer(results, args.html, heads)
        if path is not None:
            print(f"{PROG} translate: wrote {path}", file=sys.stderr)


def _translate(args: argparse.Namespace) -> int:
    _check_figure_options(args)
    translator = _load_translator(args)
    if args.plot or args.html:
        from seq2seq.visualize import require_attention

        require_attention(translator)
    if args.all_heads:
        from seq2seq.visualize import require_heads

        require_heads(translator)
    from common.cli import INVALID_UTF8, read_text_lines

    texts, invalid_utf8 = read_text_lines(sys.stdin, args.text)
    options = {}
    if args.attention_layer != -1 or args.attention_head is not None:
        options = {"attention_layer": args.attention_layer,
                   "attention_head": args.attention_head}
    if args.n_best:
        options["n_best"] = args.n_best
    results = translator.translate(texts, beam_size=args.beam_size, batch_size=args.batch_size,
                                   max_length=args.max_decode_length, **options)
    for i in invalid_utf8:
        if not results[i].error:
            results[i].warning = "; ".join(filter(None, [INVALID_UTF8, results[i].warning]))
    failed = 0
    for number, result in enumerate(results, 1):
        if result.error:
            failed += 1
            print(f"{PROG} translate: line {number}: {result.error}", file=sys.stderr)
        elif result.warning:
            print(f"{PROG} translate: line {number}: warning: {result.warning}", file=sys.stderr)
        if args.json:
            print(json.dumps({"line": number, **result.as_json()}, ensure_ascii=False))
        elif args.n_best:
            for rank, h in enumerate(result.n_best or [], 1):
                print(f"{number}\t{rank}\t{h.score:.4f}\t{h.normalized_score:.4f}\t{h.text}")
        else:
            print(result.text)
    sys.stdout.flush()
    if args.plot or args.html:
        _write_figures(args, translator, texts, results)
    return EXIT_USAGE if failed else 0


# -- export ----------------------------------------------------------------------------------


def _export_arguments(p: argparse.ArgumentParser) -> None:
    add_export_arguments(p, default_beam_size=1, row_signature="serving_default",
                         output="output")
    p.add_argument("--attention-layer", type=int, default=-1,
                   help="transformer: the decoder layer whose cross-attention is returned")
    p.add_argument("--attention-head", type=int,
                   help="transformer: the head returned (default: the average of the heads)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")


def _export(args: argparse.Namespace) -> int:
    from seq2seq.export import export_run

    sizes = exported_beam_sizes(args)
    out = export_run(args.run_dir, args.out_dir, beam_sizes=sizes,
                     default_beam_size=args.beam_size, max_decode_length=args.max_decode_length,
                     attention_layer=args.attention_layer, attention_head=args.attention_head,
                     overwrite=args.overwrite)
    print(f"Exported {out} (signatures: serving_default, translate_with_options; beam sizes: "
          f"{', '.join(map(str, sizes))})")
    return 0


# -- serve -----------------------------------------------------------------------------------


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    add_serve_arguments(p, PROG, model_name="translator", instances="sentences")


def _serve(args: argparse.Namespace) -> int:
    from seq2seq.export import KIND, WHAT

    return serve_savedmodel(args, KIND, WHAT)


def subcommands() -> list[Subcommand]:
    return [
        Subcommand("train", "train a translator into a run directory", _train_arguments,
                   _train),
        Subcommand("evaluate", "score a trained run with sacreBLEU, chrF and exact match",
                   _evaluate_arguments, _evaluate),
        Subcommand("translate", "translate sentences with a run directory or a SavedModel",
                   _translate_arguments, _translate),
        Subcommand("export", "export a run as a self-contained SavedModel", _export_arguments,
                   _export),
        Subcommand("serve", "serve a SavedModel over TensorFlow Serving's REST API",
                   _serve_arguments, _serve),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(PROG, DESCRIPTION, subcommands()), argv)
