"""The `captioner` command line: train, evaluate, caption, export, serve, render;
caption and render here, the rest from `common.cli.family_subcommands`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from captioner.config import BEAM_SIZE
from captioner.family import FAMILY
from common.cli import (
    EXIT_USAGE,
    Subcommand,
    add_checkpoint_argument,
    add_no_repeat_ngram_argument,
    check_model_path,
    family_main,
    family_subcommands,
    positive_int,
)
from common.datasets.fetch import fetch_subcommand
from common.errors import UserError

PROG = FAMILY.name


# -- caption ------------------------------------------------------------------------------

def _caption_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="MODEL",
                   help="a run directory, or a SavedModel written by `captioner export`")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    add_checkpoint_argument(p, saved_model=True)
    p.add_argument("--beam-size", type=positive_int,
                   help=f"1 is greedy (default: {BEAM_SIZE} for a run, the export's default "
                        "for a SavedModel)")
    add_no_repeat_ngram_argument(p, "caption")
    p.add_argument("--batch-size", type=positive_int, default=16,
                   help="images decoded together")
    p.add_argument("--n-best", type=positive_int, metavar="N",
                   help="the N best captions of the beam (at most the beam size), best first: "
                        "lines IMAGE<TAB>RANK<TAB>SCORE<TAB>NORMALIZED SCORE<TAB>CAPTION (the "
                        "sum of log-probabilities, and the length-normalized score the beam "
                        "ranks by); with --json an 'n_best' list per image")
    p.add_argument("--json", action="store_true",
                   help="print JSON (captions, words, attention maps) instead of text")
    _figure_arguments(p, several="several images give OUT-1.png, OUT-2.png, ... numbered by "
                             "position among the IMAGE arguments")


def _check_caption(args: argparse.Namespace) -> None:
    """What `caption` can refuse before TensorFlow is imported: the model's path, the figures,
    `--beam-size` and `--n-best` (against an export's `export_info.json`)."""
    from captioner.visualize import check_figure_paths
    from common.export.beam_sizes import check_decoding_options
    from common.export.savedmodel import is_saved_model, read_info

    check_figure_paths(args.overlay, args.gif, args.html, args.images, len(args.images))
    check_model_path(FAMILY, args.run_dir, "captioner", args.checkpoint)
    info = read_info(args.run_dir) if is_saved_model(args.run_dir) else None
    default = (info or {}).get("default_beam_size", BEAM_SIZE)
    check_decoding_options(args.beam_size or int(default), args.n_best, info)


def _caption(args: argparse.Namespace) -> int:
    from captioner.visualize import as_result, attention_kind

    run = FAMILY.open_model(args.run_dir, args.checkpoint)
    options = {"beam_size": args.beam_size} if args.beam_size else {}
    if args.n_best:
        options["n_best"] = args.n_best
    if args.no_repeat_ngram:
        options["no_repeat_ngram"] = args.no_repeat_ngram
    done, failed = run.caption_files(args.images, args.batch_size, **options)
    for _path, why in failed:
        print(f"{PROG} caption: error: {' '.join(why.split())}", file=sys.stderr)
    # Each result says its attention kind, so that `render` draws a hard run's picks as
    # `caption --overlay` does.
    kind = attention_kind(run)
    results = [as_result(caption, run.grid_shape, path, kind) for path, caption in done]
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
                   help="the output of `captioner caption --json` (a list, or one object), or "
                        "a served model's answer ({\"predictions\": ...} or {\"outputs\": "
                        "...}, which names no image: give --image)")
    p.add_argument("--image", metavar="IMG",
                   help="the image to draw on (default: each result's 'image'); without "
                        "--index it also picks the result for that image")
    p.add_argument("--index", type=int, metavar="N",
                   help="draw only the result at position N (0 first; negative counts from "
                   "the end, -1 last)")
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
    # Neither RESULT.json nor an image drawn on may be replaced by a figure.
    inputs = [args.results, args.image]
    named = "--out" if args.out else "--overlay"
    check_figure_paths(overlay, args.gif, args.html, inputs, overlay_option=named)
    results = load_results(args.results)
    chosen = select_results(results, args.index, args.image, source=args.results)
    picked = [results[i] for i in chosen]
    check_figure_paths(overlay, args.gif, args.html, inputs, len(picked), named)
    images = [args.image] * len(picked) if args.image else None
    where = f"{args.results} entry {chosen[0]}" if len(chosen) == 1 else f"{args.results} entry"
    for path in write_caption_figures(picked, overlay, args.gif, args.html, images=images,
                                      hard=args.hard, source=where, overlay_option=named):
        print(f"{PROG} render: wrote {path}", file=sys.stderr)
    return 0


# -- caption with a run or a SavedModel -------------------------------------------------------

def subcommands() -> list[Subcommand]:
    """train, evaluate, export and serve from `common.cli`; caption and render are the
    captioner's own."""
    shared = family_subcommands(FAMILY)
    return [
        shared["train"],
        shared["average"],
        shared["prepare"],
        shared["evaluate"],
        Subcommand("caption", "caption images with a run directory or a SavedModel",
                   _caption_arguments, _caption, check=_check_caption),
        shared["export"],
        shared["serve"],
        Subcommand("render", "draw attention overlays from saved caption JSON",
                   _render_arguments, _render, uses_tensorflow=False),
        fetch_subcommand(["coco-captions"]),
    ]


main = family_main(FAMILY, subcommands)
