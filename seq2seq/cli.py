"""The `seq2seq` command line: train, evaluate, translate, export, serve."""

from __future__ import annotations

from collections.abc import Sequence

from common.cli import Subcommand, build_parser, not_yet, run_cli

PROG = "seq2seq"
DESCRIPTION = """\
Attention translators: Bahdanau (RNNsearch) and the Transformer.

Typical use:
  seq2seq train --dataset dates --arch transformer --preset dates-demo --out runs/dates
  seq2seq evaluate runs/dates --dataset dates
  seq2seq translate runs/dates "25th of November 2026"
"""


def _no_arguments(parser) -> None:
    pass


def subcommands() -> list[Subcommand]:
    return [
        Subcommand("train", "train a translator into a run directory", _no_arguments,
                   not_yet(PROG, "train", "issue 4")),
        Subcommand("evaluate", "score a trained run with sacreBLEU, chrF and exact match",
                   _no_arguments, not_yet(PROG, "evaluate", "issue 4")),
        Subcommand("translate", "translate sentences with a run directory or a SavedModel",
                   _no_arguments, not_yet(PROG, "translate", "issue 5")),
        Subcommand("export", "export a run as a self-contained SavedModel", _no_arguments,
                   not_yet(PROG, "export", "issue 5")),
        Subcommand("serve", "serve a SavedModel over TensorFlow Serving's REST API", _no_arguments,
                   not_yet(PROG, "serve", "issue 5")),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(PROG, DESCRIPTION, subcommands()), argv)
