"""The `captioner` command line: train, evaluate, caption, export, serve, render."""

from __future__ import annotations

from collections.abc import Sequence

from common.cli import Subcommand, build_parser, not_yet, run_cli

PROG = "captioner"
DESCRIPTION = """\
Show, Attend and Tell image captioning (Xu et al. 2015) with soft or hard attention.

Typical use:
  captioner train --dataset shapes --preset demo --out runs/demo
  captioner evaluate runs/demo --dataset shapes --split test
  captioner caption runs/demo assets/samples/*.png
"""


def _no_arguments(parser) -> None:
    pass


def subcommands() -> list[Subcommand]:
    return [
        Subcommand("train", "train a captioner into a run directory", _no_arguments,
                   not_yet(PROG, "train", "issue 3")),
        Subcommand("evaluate", "score a trained run with the COCO caption metrics", _no_arguments,
                   not_yet(PROG, "evaluate", "issue 3")),
        Subcommand("caption", "caption images with a run directory or a SavedModel", _no_arguments,
                   not_yet(PROG, "caption", "issue 5")),
        Subcommand("export", "export a run as a self-contained SavedModel", _no_arguments,
                   not_yet(PROG, "export", "issue 5")),
        Subcommand("serve", "serve a SavedModel over TensorFlow Serving's REST API", _no_arguments,
                   not_yet(PROG, "serve", "issue 5")),
        Subcommand("render", "draw attention overlays from saved caption JSON", _no_arguments,
                   not_yet(PROG, "render", "issue 6")),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(PROG, DESCRIPTION, subcommands()), argv)
