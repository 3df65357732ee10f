"""The most a translator can score on a test file whose sources repeat with other references.

Tatoeba's test split gives some English sentences several Spanish translations, one per line.
A translator writes one translation per source, so line by line (`seq2seq evaluate`, the
default `--references line`) it can match only one of them: even a perfect one scores below
100. This script scores an oracle that writes, for every source, the first reference the file
gives it, both ways: line by line, and grouped by source (`--references grouped`, each source
once against all its references, where the oracle scores 100). The pairs are read as `seq2seq
evaluate --data` reads them (NFKC; no lowercasing).

    python scripts/experiments/reference_ceiling.py ../shared/data/spa-eng/test.tsv \\
        --json ceiling.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import HelpFormatter, Parser, run_cli  # noqa: E402
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write  # noqa: E402

RESULT_KEYS = ("data", "lines", "sources", "line", "grouped")  # an earlier --json may be replaced


def ceiling(path: str | Path) -> dict:
    """The oracle's scores on the TSV at `path`, line by line and grouped (see the module
    docstring), with how many lines and sources the file has."""
    from common.metrics.translation import (
        group_references,
        several_references,
        translation_scores,
    )
    from seq2seq.datasets import load_pairs

    check_data(path)
    pairs = load_pairs("tsv", path=str(path), split="test")
    sources, targets = list(pairs.sources), list(pairs.targets)
    if not sources:
        raise UserError(f"{path}: no sentence pairs")
    distinct, grouped = group_references(sources, targets)
    first = {source: refs[0] for source, refs in zip(distinct, grouped)}
    report = {"data": str(path), "lines": len(sources), "sources": len(distinct),
              "sources_with_several_references": sum(len(r) > 1 for r in grouped),
              "lines_with_several_references": several_references(sources, targets)}
    for mode, hypotheses, references in (
            ("line", [first[s] for s in sources], targets),
            ("grouped", [first[s] for s in distinct], grouped)):
        scores = translation_scores(hypotheses, references)
        report[mode] = {k: scores[k] for k in ("bleu", "chrf", "exact_match", "bleu_signature")}
    return report


def check_data(path: str | Path) -> None:
    """A one-line `UserError` unless `path` is a file (the TSV to score)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a folder; expected a TSV file of source<TAB>reference "
                        "lines")
    if not path.is_file():
        raise UserError(f"{path}: no such file; expected a TSV of source<TAB>reference")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="reference_ceiling.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("data", help="a TSV of source<TAB>reference pairs")
    p.add_argument("--json", metavar="OUT",
                   help="also write the figures to this JSON file (an existing one is replaced "
                        "only if it is an earlier result of this script)")
    p.set_defaults(_run=run)
    return p


def run(args: argparse.Namespace) -> int:
    check_data(args.data)
    if args.json:
        check_output_file(args.json, "--json", inputs=[args.data], result_keys=RESULT_KEYS)
    report = ceiling(args.data)
    print(f"{report['lines']} lines, {report['sources']} sources; "
          f"{report['sources_with_several_references']} sources with several references "
          f"({report['lines_with_several_references']} lines)")
    for mode in ("line", "grouped"):
        scores = report[mode]
        print(f"oracle, {mode}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, "
              f"exact {scores['exact_match']:.2f}%")
    if args.json:
        with reported_write(args.json, "--json"):
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and prints the ceiling; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
