"""A copy test set: test pairs whose names are replaced by names no training sentence holds.

Finds the names present on both sides of each test pair (capitalized words, the same on both
sides, never used lowercase in the training data: "Tom", "Boston") and replaces them on both
sides with invented names absent from the training data (`seq2seq.copy_testset`). Writes
OUT.tsv (source TAB target, for `seq2seq evaluate --data`) and OUT.names.json.

Usage:
    python scripts/make_copy_testset.py --data ../shared/data/spa-eng --out copy_test.tsv
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.cli import positive_int  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True,
                   help="a folder with train.tsv and test.tsv (the spa-eng layout)")
    p.add_argument("--out", required=True, help="the test set to write (OUT.tsv)")
    p.add_argument("--seed", type=int, default=0, help="chooses the invented names")
    p.add_argument("--limit", type=positive_int, help="keep at most N pairs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from common.errors import UserError
    from seq2seq.copy_testset import make_copy_testset, write_copy_testset
    from seq2seq.datasets import load_pairs

    args = parse_args(argv)
    try:
        train = load_pairs("tsv", path=args.data, split="train")
        test = load_pairs("tsv", path=args.data, split="test")
        cases = make_copy_testset(test, train, seed=args.seed, limit=args.limit)
        if not cases:
            raise UserError(f"no test pair of {args.data} holds a name on both sides")
    except UserError as error:
        print(f"make_copy_testset: {error}", file=sys.stderr)
        return 2
    tsv, names = write_copy_testset(cases, args.out)
    originals = sorted({n for c in cases for n in c.originals})
    print(f"{len(cases)} of {len(test)} test pairs hold {sum(len(c.names) for c in cases)} "
          f"names ({len(originals)} different, e.g. {', '.join(originals[:6])}); "
          f"wrote {tsv} and {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
