"""The share of unseen names each run carries into its translations, with and without copying.

Translates a test set written by `scripts/make_copy_testset.py` with each run and counts the
invented names found in the output as whole words: with the post-hoc `<unk>` replacement
(`seq2seq translate` as it is) and without it (only what the model emits: a pointer-
generator's copies). Prints a table and writes JSON (`seq2seq.copy_testset.names_carried`).

Usage:
    python scripts/evaluate_copy_names.py --data copy_test.tsv \
        bahdanau=runs/spa-eng-compare-bahdanau bahdanau-copy=runs/spa-eng-compare-bahdanau-copy \
        --json copy_names.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.cli import positive_int  # noqa: E402
from seq2seq.length_buckets import labelled_run  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=labelled_run, metavar="LABEL=RUN_DIR")
    p.add_argument("--data", required=True, help="OUT.tsv of scripts/make_copy_testset.py")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--beam-size", type=positive_int, default=1)
    p.add_argument("--limit", type=positive_int, help="only the first N pairs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from common.errors import UserError
    from seq2seq.copy_testset import names_carried

    args = parse_args(argv)
    results = {}
    try:
        for label, run_dir in args.runs:
            results[label] = names_carried(run_dir, args.data, beam_size=args.beam_size,
                                           limit=args.limit)
    except UserError as error:
        print(f"evaluate_copy_names: {error}", file=sys.stderr)
        return 2
    print(f"{'run':<24}{'copy':>6}{'names':>7}{'carried':>9}{'no <unk> repl.':>16}{'BLEU':>7}")
    for label, r in results.items():
        print(f"{label:<24}{'yes' if r['copy'] else 'no':>6}{r['names']:>7}{r['share']:>8.1f}%"
              f"{r['share_without_unk_replacement']:>15.1f}%{r['bleu']:>7.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"data": args.data, "runs": results}, indent=2,
                                              ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
