"""BLEU by source-length bucket for several translator runs (Bahdanau et al. 2015, figure 2).

Translates a test TSV with each run, scores each bucket of source lengths with sacreBLEU,
writes the numbers as JSON and draws one line per run (`seq2seq.length_buckets`).

Usage (the equal-budget runs of the README's comparison):
    python scripts/compare_by_length.py --data ../shared/data/spa-eng/test.tsv \
        noattn=runs/spa-eng-compare-noattn bahdanau=runs/spa-eng-compare-bahdanau \
        transformer=runs/spa-eng-compare-transformer \
        --out assets/bleu_by_length.png --json bleu_by_length.json
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
    p.add_argument("--data", required=True, help="test TSV of source<TAB>reference")
    p.add_argument("--out", default="bleu_by_length.png", help="the figure (PNG)")
    p.add_argument("--json", default=None, help="the numbers (default: OUT with .json)")
    p.add_argument("--beam-size", type=positive_int, default=1)
    p.add_argument("--bucket-width", type=positive_int, default=5)
    p.add_argument("--last-bucket", type=positive_int, default=20,
                   help="longer sources share one open bucket")
    p.add_argument("--limit", type=positive_int, help="only the first N pairs")
    p.add_argument("--batch-size", type=positive_int, default=64)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from common.errors import UserError
    from seq2seq.length_buckets import bleu_by_length, plot_bleu_by_length

    args = parse_args(argv)
    try:
        result = bleu_by_length(dict(args.runs), args.data, beam_size=args.beam_size,
                                bucket_width=args.bucket_width, last_bucket=args.last_bucket,
                                limit=args.limit, batch_size=args.batch_size, progress=True)
    except UserError as error:
        print(f"compare_by_length: {error}", file=sys.stderr)
        return 2
    json_path = Path(args.json) if args.json else Path(args.out).with_suffix(".json")
    json_path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n",
                         encoding="utf-8")
    plot_bleu_by_length(result, args.out)
    header = "bucket".ljust(8) + "".join(name[:14].rjust(15) for name in result["runs"])
    print(header + "   sentences")
    for i, bucket in enumerate(result["buckets"]):
        row = [run["buckets"][i]["bleu"] for run in result["runs"].values()]
        cells = "".join(("-" if v is None else f"{v:.1f}").rjust(15) for v in row)
        print(bucket["bucket"].ljust(8) + cells + f"   {bucket['sentences']}")
    overall = "".join(f"{run['bleu']:.1f}".rjust(15) for run in result["runs"].values())
    print("all".ljust(8) + overall)
    print(f"wrote {args.out} and {json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
