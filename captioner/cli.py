"""The `captioner` command line: train, evaluate, caption, export, serve, render."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

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
from common.errors import UserError

PROG = "captioner"
DESCRIPTION = """\
Show, Attend and Tell image captioning (Xu et al. 2015) with soft or hard attention.

Typical use:
  captioner train --dataset shapes --preset demo --out runs/demo
  captioner evaluate runs/demo --dataset shapes --split test
  captioner caption runs/demo assets/samples/*.png
  captioner export runs/demo export/demo
  captioner caption export/demo photo.jpg --json
  captioner serve export/demo --port 8501
"""


def _key_value(text: str) -> tuple[str, Any]:
    """argparse type: `KEY=VALUE`, the value read as JSON when it is JSON (`num_images=100`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="the dataset's folder (not needed by shapes)")
    parser.add_argument("--data-option", type=_key_value, action="append", default=None,
                        metavar="KEY=VALUE",
                        help="a dataset option, e.g. num_images=200 for shapes (repeatable)")


# -- train --------------------------------------------------------------------------------

def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", help="dataset name: shapes, coco, karpathy, flickr8k, csv")
    _data_arguments(p)
    p.add_argument("--preset", help="named settings (demo, tiny, coco); options override it")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                   help="0 silent, 1 a progress bar, 2 one line per epoch")
    g = p.add_argument_group("model")
    g.add_argument("--encoder", help="encoder: small-cnn, vgg19, resnet50, resnet101, "
                   "inception_v3, efficientnet_b0, mobilenet_v3_small, mobilenet_v3_large")
    g.add_argument("--image-size", type=positive_int, help="square input size in pixels")
    g.add_argument("--weights", choices=("imagenet", "none"),
                   help="encoder weights (default imagenet; downloads once)")
    g.add_argument("--fine-tune", type=int, metavar="N",
                   help="train the encoder's top N weighted layers (0: frozen)")
    g.add_argument("--attention", choices=("soft", "hard"), help="soft or hard attention")
    g.add_argument("--score", help="attention score: additive, dot, scaled_dot, general, "
                   "cosine, location")
    g.add_argument("--attention-query", choices=("hidden", "hidden+word"),
                   help="what the attention is asked with: the LSTM state h_{t-1} (the "
                   "paper's) or that and the word just read (after 'red', look for red)")
    g.add_argument("--embedding-dim", type=positive_int)
    g.add_argument("--units", type=positive_int, help="LSTM units")
    g.add_argument("--attention-units", type=positive_int)
    g.add_argument("--dropout", type=non_negative_float)
    g.add_argument("--penalty-weight", type=non_negative_float,
                   help="λ of the doubly stochastic attention penalty")
    g.add_argument("--penalty-tau", type=non_negative_float,
                   help="τ of the penalty (default: caption length / regions)")
    g.add_argument("--entropy-weight", type=non_negative_float, help="hard attention only")
    g.add_argument("--expected-context-warmup", type=int, metavar="STEPS",
                   help="hard attention: over the first STEPS steps the share of captions "
                        "trained on the expected context falls from 1 to 0.5")
    g.add_argument("--reward", choices=("caption", "to-go"),
                   help="hard attention's REINFORCE reward: the caption log-likelihood (the "
                   "paper's) or, per step, that of the words still to come (less variance)")
    g.add_argument("--max-length", type=positive_int, help="longest caption, in tokens")
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=positive_int)
    g.add_argument("--steps-per-epoch", type=positive_int)
    g.add_argument("--batch-size", type=positive_int)
    g.add_argument("--learning-rate", type=positive_float)
    g.add_argument("--seed", type=int)
    g.add_argument("--deterministic", action="store_true", default=None,
                   help="bit-identical runs for one seed (op determinism, no graph "
                        "rewriting)")
    g.add_argument("--cache-features", action="store_true", default=None,
                   help="compute the frozen encoder's features once and train from them")
    g.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="compile the training step with XLA (default: on with a GPU)")
    g.add_argument("--precision", choices=("auto", "float32", "mixed_float16", "mixed_bfloat16"),
                   help="mixed_float16 adds loss scaling; auto (the default): bfloat16 on "
                   "GPUs of compute capability 8+, float16 on 7.x, float32 on CPU")
    g.add_argument("--distribute", choices=("none", "mirrored", "multi-worker", "auto"))
    g.add_argument("--logical-cpus", type=int, help="split the CPU into N devices")


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The options given explicitly, as nested config overrides."""
    def given(**values):
        return {k: v for k, v in values.items() if v is not None}

    image_size = (args.image_size, args.image_size) if args.image_size else None
    data = given(dataset=args.dataset, data_dir=args.data_dir, max_length=args.max_length,
                 cache_features=args.cache_features)
    if args.data_option:
        data["options"] = dict(args.data_option)
    return {
        "encoder": given(name=args.encoder, image_size=image_size, weights=args.weights,
                         fine_tune=args.fine_tune),
        "decoder": given(attention=args.attention, score=args.score, query=args.attention_query,
                         embedding_dim=args.embedding_dim, units=args.units,
                         attention_units=args.attention_units, dropout=args.dropout,
                         penalty_weight=args.penalty_weight, penalty_tau=args.penalty_tau,
                         entropy_weight=args.entropy_weight, reward=args.reward,
                         expected_context_warmup=args.expected_context_warmup,
                         max_length=args.max_length),
        "data": data,
        "training": given(epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                          batch_size=args.batch_size, learning_rate=args.learning_rate,
                          seed=args.seed, deterministic=args.deterministic,
                          jit_compile=args.jit_compile,
                          precision=args.precision, distribute=args.distribute,
                          logical_cpus=args.logical_cpus),
    }


def _train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from captioner.train import CONFIG_FILE, apply_overrides, load_run_config, train

    overrides = _overrides(args)
    if args.resume and (Path(args.out) / CONFIG_FILE).exists():
        # A resumed run keeps its model and data; only the training settings may change.
        config = apply_overrides(load_run_config(args.out), {"training": overrides["training"]})
    else:
        config = CaptionerRunConfig()
        if args.preset:
            config = apply_overrides(config, get_preset(args.preset, args.dataset))
        elif not args.dataset:
            raise UserError("--dataset is required (or a --preset that names one); got neither")
        if "options" in overrides["data"]:  # --data-option adds to the preset's options
            overrides["data"]["options"] = {**config.data.options, **overrides["data"]["options"]}
        config = apply_overrides(config, overrides)
    records = train(config, args.out, resume=args.resume, verbose=args.verbose)
    if records:
        last = records[-1]
        print(f"trained {last['step']} steps into {args.out}: loss {last['loss']:.4f}")
    return 0


# -- evaluate -----------------------------------------------------------------------------

def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--dataset", help="dataset name (default: the run's)")
    _data_arguments(p)
    p.add_argument("--split", default="test", help="train, valid or test")
    p.add_argument("--beam-size", type=positive_int, default=3)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--json", metavar="OUT", help="also write the scores to this JSON file")


def _warn_unfinished(run) -> dict[str, Any]:
    from common.training import RunDir

    status = RunDir(run.run_dir).read_status() or {}
    state = status.get("state", "unknown")
    if state != "finished":
        print(f"{PROG}: warning: run {run.run_dir} is not finished (state {state!r}); "
              f"using {run.checkpoint}", file=sys.stderr)
    return {"run_state": state, "checkpoint": run.checkpoint}


def _evaluate(args: argparse.Namespace) -> int:
    from captioner.evaluate import evaluate, format_results
    from captioner.inference import load_run
    from common.config import save_json

    run = load_run(args.run_dir)
    info = _warn_unfinished(run)
    options = dict(args.data_option) if args.data_option else None
    results = evaluate(run, args.dataset, args.split, args.data_dir, args.beam_size,
                       args.batch_size, options)
    print(format_results(results))
    if args.json:
        save_json(args.json, {**results, **info, "split": args.split,
                              "beam_size": args.beam_size})
    return 0


# -- caption ------------------------------------------------------------------------------

def _caption_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="MODEL",
                   help="a run directory, or a SavedModel written by `captioner export`")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--beam-size", type=positive_int,
                   help="1 is greedy (default: 3 for a run, the export's default for a "
                        "SavedModel)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--n-best", type=positive_int, metavar="N",
                   help="the N best captions of the beam (at most the beam size), best first: "
                        "lines IMAGE<TAB>RANK<TAB>SCORE<TAB>NORMALIZED SCORE<TAB>CAPTION (the "
                        "sum of log-probabilities, and the length-normalized score the beam "
                        "ranks by); with --json an 'n_best' list per image")
    p.add_argument("--json", action="store_true",
                   help="print JSON (captions, words, attention maps) instead of text")
    _figure_arguments(p, several="several images give OUT-1.png, OUT-2.png, ... numbered by "
                             "position among the IMAGE arguments")


def _caption(args: argparse.Namespace) -> int:
    from captioner.visualize import check_figure_paths

    check_figure_paths(args.overlay, args.gif, args.html)
    run = _load_captioner(args.run_dir)
    options = {"beam_size": args.beam_size} if args.beam_size else {}
    if args.n_best:
        options["n_best"] = args.n_best
    done, failed = run.caption_files(args.images, args.batch_size, **options)
    for _path, why in failed:
        print(f"{PROG}: error: {' '.join(why.split())}", file=sys.stderr)
    results = [{"image": path, **caption.to_json(run.grid_shape)} for path, caption in done]
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
    elif args.n_best:
        for path, caption in done:
            for rank, h in enumerate(caption.n_best, 1):
                print(f"{path}\t{rank}\t{h.score:.4f}\t{h.normalized_score:.4f}\t{h.text}")
    else:
        for path, caption in done:
            print(f"{path}\t{caption.text}")
    _draw_captions(args, results, run)
    return EXIT_USAGE if failed else 0


# -- attention figures: caption --overlay/--gif/--html, render ------------------------------

def _figure_arguments(p: argparse.ArgumentParser, several: str) -> None:
    g = p.add_argument_group("attention figures")
    g.add_argument("--overlay", metavar="OUT.png",
                   help="the paper's figure: the image, then one panel per word with its "
                        f"attention as a mask that dims what was not attended; {several}")
    g.add_argument("--gif", metavar="OUT.gif",
                   help="an animation, one frame per word, numbered like --overlay")
    g.add_argument("--html", metavar="OUT.html",
                   help="one self-contained page with every image: hover a word to see where "
                        "the model looked")
    g.add_argument("--hard", action="store_true", default=None,
                   help="mark the cell of highest weight, the one hard attention picks "
                        "(default: when the model or the result says hard attention)")


def _draw_captions(args: argparse.Namespace, results: list[dict[str, Any]], model) -> None:
    """`caption --overlay/--gif/--html`: the results drawn over their images, files by input."""
    if not (args.overlay or args.gif or args.html):
        return
    from captioner.visualize import attention_kind, input_order, write_caption_figures

    hard = args.hard if args.hard else attention_kind(model) == "hard"
    for path in write_caption_figures(input_order(args.images, results), args.overlay,
                                      args.gif, args.html, hard=hard, source="image"):
        print(f"{PROG} caption: wrote {path}", file=sys.stderr)


def _render_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", metavar="RESULT.json",
                   help="the output of `captioner caption --json` (a list, or one object)")
    p.add_argument("--image", metavar="IMG",
                   help="the image to draw on (default: each result's 'image'); without "
                        "--index it also picks the result for that image")
    p.add_argument("--index", type=int, metavar="N", help="draw only the result at position N")
    p.add_argument("--out", metavar="OUT.png", help="same as --overlay")
    _figure_arguments(p, several="several results give OUT-1.png, OUT-2.png, ... numbered by "
                             "position in RESULT.json")


def _render(args: argparse.Namespace) -> int:
    from captioner.visualize import (
        check_figure_paths,
        load_results,
        select_results,
        write_caption_figures,
    )

    if args.out and args.overlay:
        raise UserError("--out and --overlay name the same file; give one of them")
    overlay = args.out or args.overlay
    if not (overlay or args.gif or args.html):
        raise UserError("nothing to draw; add --out OUT.png, --gif OUT.gif or --html OUT.html")
    check_figure_paths(overlay, args.gif, args.html)
    results = load_results(args.results)
    chosen = select_results(results, args.index, args.image, source=args.results)
    picked = [results[i] for i in chosen]
    images = [args.image] * len(picked) if args.image else None
    where = f"{args.results} entry {chosen[0]}" if len(chosen) == 1 else f"{args.results} entry"
    for path in write_caption_figures(picked, overlay, args.gif, args.html, images=images,
                                      hard=args.hard, source=where):
        print(f"{PROG} render: wrote {path}", file=sys.stderr)
    return 0


# -- caption with a run or a SavedModel; export; serve --------------------------------------

def _load_captioner(path_text: str):
    """A `CaptionerRun` for a run directory, an `ExportedCaptioner` for a SavedModel."""
    from captioner.inference import CaptionerRun, open_model

    run = open_model(path_text)
    if isinstance(run, CaptionerRun):
        _warn_unfinished(run)
    return run


def _export_arguments(p: argparse.ArgumentParser) -> None:
    add_export_arguments(p, default_beam_size=3, row_signature="serving_default",
                         output="caption")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")


def _export(args: argparse.Namespace) -> int:
    from captioner.export import export_run

    sizes = exported_beam_sizes(args)
    out = export_run(args.run_dir, args.out_dir, beam_sizes=sizes,
                     default_beam_size=args.beam_size, max_decode_length=args.max_decode_length,
                     overwrite=args.overwrite)
    print(f"Exported {out} (signatures: serving_default, caption_with_options; beam sizes: "
          f"{', '.join(map(str, sizes))})")
    return 0


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    add_serve_arguments(p, PROG, model_name="captioner", instances="images", max_batch_size=16)
    p.add_argument("--max-image-pixels", type=positive_int, default=25_000_000,
                   help="images whose header declares more pixels are refused unread")


def _serve(args: argparse.Namespace) -> int:
    from captioner.export import KIND, WHAT

    return serve_savedmodel(args, KIND, WHAT, max_image_pixels=args.max_image_pixels,
                            screen_images=True)


def subcommands() -> list[Subcommand]:
    return [
        Subcommand("train", "train a captioner into a run directory", _train_arguments,
                   _train),
        Subcommand("evaluate", "score a trained run with the COCO caption metrics",
                   _evaluate_arguments, _evaluate),
        Subcommand("caption", "caption images with a run directory or a SavedModel",
                   _caption_arguments, _caption),
        Subcommand("export", "export a run as a self-contained SavedModel", _export_arguments,
                   _export),
        Subcommand("serve", "serve a SavedModel over TensorFlow Serving's REST API",
                   _serve_arguments, _serve),
        Subcommand("render", "draw attention overlays from saved caption JSON",
                   _render_arguments, _render),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(PROG, DESCRIPTION, subcommands()), argv)
