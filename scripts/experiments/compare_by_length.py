"""BLEU by source-length bucket for several translator runs (Bahdanau et al. 2015, figure 2).

Several trained runs (typically `seq2seq-noattn`, `bahdanau` and `transformer` trained with
equal budgets) translate the same test TSV; the sentences are grouped by their source length in
tokens (as the models read them) and each group gets its own corpus sacreBLEU. The
encoder-decoder without attention is expected to fall behind as sentences grow: the whole
source has to pass through one fixed-size vector. Writes the numbers as JSON
(`bleu_by_length`) and draws one line per run, the number of sentences under each bucket
(`plot_bleu_by_length`).

Usage (the equal-budget runs of the README's comparison):
    python scripts/experiments/compare_by_length.py --data ../shared/data/spa-eng/test.tsv \
        noattn=runs/spa-eng-compare-noattn bahdanau=runs/spa-eng-compare-bahdanau \
        transformer=runs/spa-eng-compare-transformer \
        --out assets/bleu_by_length.png --json bleu_by_length.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from common.cli import (  # noqa: E402
    HelpFormatter,
    Parser,
    check_distinct_labels,
    labelled_run,
    positive_int,
    run_cli,
)
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, reported_write, same_file  # noqa: E402

# What `--json` holds: an existing file is replaced only when it is an earlier result.
RESULT_KEYS = ("data", "beam_size", "runs", "buckets")


def bucket_edges(width: int, last: int) -> list[tuple[int, int | None]]:
    """`[(1, width), (width + 1, 2 width), ..., (last + 1, None)]`: closed ranges of source
    lengths, the last one open.

    Example:
    >>> bucket_edges(5, 15)
    [(1, 5), (6, 10), (11, 15), (16, None)]
    """
    if width < 1 or last < width:
        raise UserError(f"bucket width {width} and last bucket start {last}: expected "
                        "1 <= width <= last")
    edges: list[tuple[int, int | None]] = [(low, low + width - 1)
                                           for low in range(1, last + 1, width)]
    return edges + [(edges[-1][1] + 1, None)]


def bucket_label(edge: tuple[int, int | None]) -> str:
    low, high = edge
    return f"{low}+" if high is None else f"{low}-{high}"


def bucket_index(length: int, edges: Sequence[tuple[int, int | None]]) -> int:
    """The bucket holding a source of `length` tokens."""
    for i, (low, high) in enumerate(edges):
        if length >= low and (high is None or length <= high):
            return i
    return 0  # an empty source (length 0) goes with the shortest


def scores_by_bucket(hypotheses: Sequence[str], references: Sequence[str],
                     lengths: Sequence[int], edges: Sequence[tuple[int, int | None]],
                     lowercase: bool = False) -> list[dict[str, Any]]:
    """Corpus BLEU and chrF of each bucket (`bleu` None for an empty one); `lowercase`:
    case-insensitive, for a run that lowercases."""
    from common.metrics.translation import translation_scores

    groups: list[list[int]] = [[] for _ in edges]
    for i, length in enumerate(lengths):
        groups[bucket_index(length, edges)].append(i)
    out = []
    for edge, rows in zip(edges, groups):
        entry: dict[str, Any] = {"bucket": bucket_label(edge), "sentences": len(rows),
                                 "bleu": None, "chrf": None}
        if rows:
            scores = translation_scores([hypotheses[i] for i in rows],
                                        [references[i] for i in rows], lowercase=lowercase)
            entry.update(bleu=round(scores["bleu"], 2), chrf=round(scores["chrf"], 2))
        out.append(entry)
    return out


def bleu_by_length(
    runs: Mapping[str, str | Path],
    data: str | Path,
    beam_size: int = 1,
    bucket_width: int = 5,
    last_bucket: int = 20,
    limit: int | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> dict[str, Any]:
    """Translates the test pairs of `data` with every run and scores them by source length.

    Args:
        runs: a label (shown in the legend) -> run directory, in plotting order.
        data: a TSV of source<TAB>reference pairs (each run's `reverse` applies; all runs must
            read the same sources).
        beam_size: 1 for greedy decoding.
        bucket_width: source tokens per bucket.
        last_bucket: the last closed bucket ends here; longer sources share one open bucket.
        limit: use only the first `limit` pairs.
        batch_size: sentences per decoding batch.
        progress: show a progress bar while decoding.

    Returns:
        `{"data", "beam_size", "buckets": [{"bucket", "sentences"}], "runs": {label: {"run_dir",
        "arch", "copy", "bleu", "chrf", "buckets": [{"bucket", "sentences", "bleu", "chrf"}]}},
        "signature"}`.
    """
    from common.metrics.translation import translation_scores
    from seq2seq.evaluate import load_references
    from seq2seq.inference import Translator

    if not runs:
        raise UserError("no runs to compare; give at least one LABEL=RUN_DIR")
    edges = bucket_edges(bucket_width, last_bucket)
    result: dict[str, Any] = {"data": str(data), "beam_size": beam_size, "runs": {}}
    sources = None
    for label, run_dir in runs.items():
        translator = Translator.from_run_dir(run_dir)
        pairs = load_references(translator, str(data), None, limit)
        if not pairs.sources:
            raise UserError(f"no sentence pairs to score in {data}")
        if sources is None:
            sources = pairs.sources
            lengths = [len(tokens) for tokens in pairs.source_tokens]
            counts = [0] * len(edges)
            for length in lengths:
                counts[bucket_index(length, edges)] += 1
            result["buckets"] = [{"bucket": bucket_label(edge), "sentences": n}
                                 for edge, n in zip(edges, counts)]
        elif pairs.sources != sources:
            raise UserError(f"{run_dir} reads other sources from {data} (another --reverse?); "
                            "compare runs of one direction")
        translations = translator.translate(pairs.sources, beam_size=beam_size,
                                            batch_size=batch_size, progress=progress)
        hypotheses = [t.text for t in translations]
        lowercase = translator.config.data.lowercase
        overall = translation_scores(hypotheses, list(pairs.targets), lowercase=lowercase)
        result["signature"] = overall["bleu_signature"]
        model = translator.config.model
        result["runs"][label] = {
            "run_dir": str(run_dir), "arch": model.arch, "copy": model.copy,
            "bleu": round(overall["bleu"], 2), "chrf": round(overall["chrf"], 2),
            "buckets": scores_by_bucket(hypotheses, list(pairs.targets), lengths, edges,
                                        lowercase),
        }
    return result


def plot_bleu_by_length(result: Mapping[str, Any], path: str | Path,
                        title: str = "BLEU by source length") -> Path:
    """Draws `bleu_by_length`'s result: BLEU against the source-length bucket, one line per
    run, the sentence count of each bucket under its label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = result["buckets"]
    labels = [f"{b['bucket']}\n(n={b['sentences']})" for b in buckets]
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name, run in result["runs"].items():
        xs = [i for i, b in enumerate(run["buckets"]) if b["bleu"] is not None]
        ys = [run["buckets"][i]["bleu"] for i in xs]
        axes.plot(xs, ys, marker="o", label=f"{name} ({run['bleu']:.1f} overall)")
    axes.set_xticks(range(len(labels)), labels)
    axes.set_xlabel("source length (tokens)")
    axes.set_ylabel("BLEU")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path)
    plt.close(figure)
    return path


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="compare_by_length.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("runs", nargs="+", type=labelled_run, metavar="LABEL=RUN_DIR",
                   help="the translator runs to compare, in plotting order (a bare RUN_DIR is "
                        "labelled by its folder name)")
    p.add_argument("--data", required=True, help="test TSV of source<TAB>reference")
    p.add_argument("--out", default="bleu_by_length.png",
                   help="the figure (PNG, or another format matplotlib writes, by its suffix)")
    p.add_argument("--json", default=None,
                   help="the numbers (default: OUT with .json; an existing file is replaced "
                        "only if it is an earlier result)")
    p.add_argument("--beam-size", type=positive_int, default=1,
                   help="beam size of the translations (1: greedy)")
    p.add_argument("--bucket-width", type=positive_int, default=5,
                   help="source tokens per bucket")
    p.add_argument("--last-bucket", type=positive_int, default=20,
                   help="the last closed bucket ends here (at least --bucket-width); longer "
                        "sources share one open bucket")
    p.add_argument("--limit", type=positive_int, help="only the first N pairs")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="sentences per decoding batch")
    p.set_defaults(_run=compare)
    return p


def check_run_dir(run_dir: str) -> dict[str, Any]:
    """A one-line `UserError` unless `run_dir` holds a translator run's config.json; returns
    that config."""
    from common.config import load_json

    folder = Path(run_dir)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise UserError(f"{run_dir}: {what}; expected a translator run directory (make one "
                        "with `seq2seq train --out RUN_DIR`)")
    config = load_json(folder / "config.json", "a translator run's config (RUN_DIR: a "
                       "translator run directory)")
    family = config.get("family") if isinstance(config, dict) else None
    if family != "seq2seq":
        raise UserError(f"{run_dir}: holds a {family!r} run; expected a translator ('seq2seq') "
                        "run")
    return config


def check_figure_format(path: str) -> None:
    """A one-line `UserError` when matplotlib cannot write a figure named `path`."""
    from matplotlib.figure import Figure

    suffix = Path(path).suffix.lower().lstrip(".")
    formats = Figure().canvas.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise UserError(f"--out {path}: matplotlib writes no {suffix!r} figure; expected one "
                        f"of: {', '.join(sorted(formats))}")


def check_arguments(args: argparse.Namespace) -> Path:
    """Checks every option and path before any work; returns the JSON file to write."""
    check_distinct_labels(args.runs)
    if args.last_bucket < args.bucket_width:
        raise UserError(f"--last-bucket {args.last_bucket} is below --bucket-width "
                        f"{args.bucket_width}; expected at least one closed bucket")
    data = Path(args.data)
    if data.is_dir():
        raise UserError(f"--data {data}: is a folder; expected a TSV file of source<TAB>"
                        "reference lines")
    if not data.is_file():
        raise UserError(f"--data {data}: no such file; expected a TSV of source<TAB>reference")
    inputs: list[str | Path] = [data]
    reading = None  # how the first run reads --data: every run must read the same sources
    for _, run_dir in args.runs:
        config = check_run_dir(run_dir)
        data_config = config.get("data") if isinstance(config.get("data"), dict) else {}
        how = {key: data_config.get(key) for key in ("reverse", "lowercase")}
        if reading is None:
            reading = (run_dir, how)
        elif how != reading[1]:
            raise UserError(f"{run_dir} reads other sources from --data than {reading[0]} "
                            f"({how} against {reading[1]}); compare runs of one direction")
        inputs += [path for path in Path(run_dir).iterdir() if path.is_file()]
    check_figure_format(args.out)
    out = check_output_file(args.out, "--out", inputs=inputs)
    json_path = Path(args.json) if args.json else out.with_suffix(".json")
    if same_file(out, json_path):
        option = "--json" if args.json else "--out"
        raise UserError(f"{option} {json_path}: the figure (--out) and the numbers (--json, "
                        "default: OUT with .json) would be one file; give them different names")
    check_output_file(json_path, "--json", inputs=inputs, result_keys=RESULT_KEYS)
    return json_path


def compare(args: argparse.Namespace) -> int:
    json_path = check_arguments(args)
    result = bleu_by_length(dict(args.runs), args.data, beam_size=args.beam_size,
                            bucket_width=args.bucket_width, last_bucket=args.last_bucket,
                            limit=args.limit, batch_size=args.batch_size, progress=True)
    with reported_write(json_path, "--json"):
        json_path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n",
                             encoding="utf-8")
    with reported_write(args.out, "--out"):
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


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and compares the runs; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
