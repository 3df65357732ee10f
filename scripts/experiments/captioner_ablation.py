"""Train one variant of the captioner `demo` preset and score it on a `shapes` split.

    python scripts/experiments/captioner_ablation.py word-query \\
        --override '{"decoder": {"query": "hidden+word"}}' --out-dir runs/ablation
    python scripts/experiments/captioner_ablation.py hard-to-go --threads 1 \\
        --override '{"decoder": {"attention": "hard", "reward": "to-go", "coverage": false}}'
    python scripts/experiments/captioner_ablation.py word-query --split test \\
        --override '{"decoder": {"query": "hidden+word"}}' --out-dir runs/ablation

Each variant is the `demo` preset with nested overrides of any `CaptionerRunConfig` field
(`encoder`, `decoder`, `training`, ...; the ones the command line does not offer, such as
`encoder.context_convs`, included). It trains into `OUT_DIR/NAME` (replacing what is there),
captions the first `--images` images of the split with beam search, and prints one JSON line,
also appended to `OUT_DIR/results.jsonl`: the split, the training time, BLEU-1..4, object and
relation accuracy, attention correctness with its uniform baseline, and the mean peak of the
attention maps at the scored words. The README's ablation table was made with it (on the test
split, before the rule below), two variants at a time with `--threads 1` each (on 2 cores, one
thread per run loses little: the model's operations are small).

Variants are compared on `--split valid` (the default); the one kept is scored on `--split
test` once. A test run is refused in one line (exit 2), before any training, unless
results.jsonl holds a valid line of the variant (NAME, or NAME-seedS, with the same preset,
overrides and beam size: it was chosen on valid), and where it holds a test line of one of its
runs already (a line without a split, from before, counts as one) unless `--overwrite`. Test
lines say `"chosen_on": "valid"` and how many times the run's test split has been scored
(`test_scored`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from common.cli import (
    HelpFormatter,
    Parser,
    distinct_list,
    non_negative_int,
    positive_int,
    run_cli,
)
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write


def score(run_dir: Path, images: int, beam_size: int, split: str = "valid") -> dict:
    """Beam-search captions of the first `images` images of `split`, and their scores."""
    import numpy as np

    from captioner.datasets import load_split
    from captioner.datasets.records import CaptionSplit
    from captioner.datasets.shapes_metrics import shapes_scores
    from captioner.evaluate import generate
    from captioner.inference import CaptionerRun
    from common.metrics.attention_correctness import (
        corpus_attention_correctness,
        match_shapes_words,
    )
    from common.metrics.caption_metrics import caption_scores

    run = CaptionerRun(run_dir)
    records = list(load_split("shapes", split, None, **run.config.data.options))[:images]
    scored = CaptionSplit(name="shapes", split=split, records=records)
    by_id = generate(run, scored, beam_size)  # resized to the encoder's input size
    captions = [by_id[r.image_id] for r in records]
    hypotheses = {r.image_id: c.text for r, c in zip(records, captions)}
    results = dict(caption_scores(scored.references(), hypotheses, metrics=("bleu",)))
    results.update(shapes_scores(hypotheses, scored))
    items = [(c.words, c.attention, r.objects, (r.height, r.width))
             for r, c in zip(records, captions)]
    correctness = corpus_attention_correctness(items, "shapes", run.grid_shape)
    results["attention_correctness"] = 100 * correctness.correctness
    results["attention_uniform_baseline"] = 100 * correctness.baseline
    peaks = [float(c.attention[t].max()) for r, c in zip(records, captions)
             for t, named in enumerate(match_shapes_words(c.words[:len(c.attention)], r.objects))
             if named]
    results["attention_peak"] = float(np.mean(peaks)) if peaks else None
    return results


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="captioner_ablation.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("name", help="the variant's name (its run directory under --out-dir)")
    p.add_argument("--override", default="{}", help="nested JSON overrides of the preset")
    p.add_argument("--preset", default="demo", help="the preset the overrides apply to")
    p.add_argument("--out-dir", default="runs/ablation",
                   help="where the runs and results.jsonl go")
    p.add_argument("--split", choices=("valid", "test"), default="valid",
                   help="the shapes split scored: compare variants on valid, score the one "
                        "kept on test once")
    p.add_argument("--images", "--test-images", dest="images", type=positive_int, default=300,
                   help="score on the first N images of the split")
    p.add_argument("--beam-size", type=positive_int, default=3,
                   help="beam size of the scored captions")
    p.add_argument("--overwrite", action="store_true",
                   help="with --split test: score runs that results.jsonl holds test lines of "
                        "again (the lines count it)")
    p.add_argument("--seeds", type=distinct_list(int), default=None, metavar="S1,S2,...",
                   help="train the variant once per seed (runs NAME-seedS) and add a summary "
                        "line with the mean, standard deviation, minimum and maximum")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="TensorFlow intra- and inter-op threads (0: TensorFlow's default)")
    p.set_defaults(_run=run)
    return p


def check_outputs(out_dir: str, names: list[str]) -> None:
    """Refuses, before any training, an `--out-dir` that cannot take the runs `names` and
    results.jsonl (a file, a file in the way, a folder that cannot be written)."""
    folder = check_output_folder(out_dir, "--out-dir")
    for name in names:
        check_output_folder(folder / name, "--out-dir")
    results = folder / "results.jsonl"
    if folder.is_dir():
        check_output_file(results, "--out-dir")


def check_test_run(out_dir: str, args: argparse.Namespace, names: list[str],
                   overrides: dict) -> dict[str, int]:
    """A `--split test` run scores a variant chosen on valid, once: results.jsonl must hold a
    valid line of it (same preset, overrides and beam size) and, unless `--overwrite`, no test
    line of `names`. Returns, per name, the times its test split was scored before."""
    path = Path(out_dir) / "results.jsonl"
    lines = []
    if path.is_file():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                lines.append(json.loads(line) if line.strip() else {})
            except json.JSONDecodeError as e:
                raise UserError(f"--out-dir: {path}, line {number}: not JSON ({e.msg})") from None
    lines = [r for r in lines if isinstance(r, dict) and r.get("kind") != "summary"]
    variant = re.compile(rf"{re.escape(args.name)}(-seed\d+)?")
    if not any(r.get("split") == "valid" and variant.fullmatch(str(r.get("name")))
               and r.get("preset") == args.preset and r.get("overrides") == overrides
               and r.get("beam_size") == args.beam_size for r in lines):
        raise UserError(f"--split test: {path} has no valid line of {args.name} with this "
                        "--preset, --override and --beam-size; choose on valid first "
                        "(--split valid)")
    scored = {name: sum(r.get("name") == name and r.get("split", "test") == "test"
                        for r in lines) for name in names}
    again = [name for name, times in scored.items() if times]
    if again and not args.overwrite:
        raise UserError(f"--split test: {path} holds test lines of {', '.join(again)} already "
                        "(the test split is scored once per result); --overwrite scores it "
                        "again and says so (test_scored), or choose another NAME")
    return scored


def check_name(name: str) -> None:
    """A variant's name is one folder under --out-dir: not empty, `.`, `..` or a path."""
    if name in ("", ".", "..") or "/" in name or os.sep in name or name == "results.jsonl":
        raise UserError(f"NAME {name!r}: expected a plain folder name for the run under "
                        "--out-dir (no '/', not '.', '..' or 'results.jsonl')")


def run(args: argparse.Namespace) -> int:
    check_name(args.name)
    try:
        overrides = json.loads(args.override)
    except ValueError as exc:
        raise UserError(f"--override must be a JSON object: {exc}") from None
    if not isinstance(overrides, dict):
        raise UserError(f"--override must be a JSON object, got {args.override!r}")
    names = ([args.name] if args.seeds is None
             else [f"{args.name}-seed{seed}" for seed in args.seeds])
    check_outputs(args.out_dir, names)
    if args.overwrite and args.split != "test":
        raise UserError("--overwrite goes with --split test: it scores the test split again")
    args.test_scored = (check_test_run(args.out_dir, args, names, overrides)
                        if args.split == "test" else {})

    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from captioner.config import CaptionerRunConfig
    from captioner.presets import get_preset
    from captioner.train import apply_overrides, check_config
    from common.config import from_dict
    from common.training import TrainingConfig

    try:
        config = apply_overrides(apply_overrides(CaptionerRunConfig(), get_preset(args.preset)),
                                 overrides)
    except TypeError as exc:
        raise UserError(f"--override: {exc}") from None
    if config.data.dataset != "shapes":
        raise UserError(f"the ablation scores on shapes; got dataset {config.data.dataset}")
    # What `train` checks first, checked before a run directory is replaced.
    check_config(config)
    from_dict(TrainingConfig, config.training)
    if args.seeds is None:
        _record(args.out_dir, _train_and_score(args, args.name, config, overrides))
        return 0
    results = []
    for seed in args.seeds:
        seeded = apply_overrides(config, {"training": {"seed": seed}})
        results.append(_train_and_score(args, f"{args.name}-seed{seed}", seeded, overrides))
        _record(args.out_dir, results[-1])
    _record(args.out_dir, summarize(args.name, overrides, args.seeds, results))
    return 0


def _train_and_score(args, name: str, config, overrides: dict) -> dict:
    from captioner.train import train

    run_dir = Path(args.out_dir) / name
    shutil.rmtree(run_dir, ignore_errors=True)
    start = time.perf_counter()
    train(config, run_dir, verbose=2)
    seconds = time.perf_counter() - start
    chosen = ({"chosen_on": "valid", "test_scored": args.test_scored[name] + 1}
              if args.split == "test" else {})
    return {"name": name, "preset": args.preset, "overrides": overrides,
            "seed": config.training.get("seed"), "split": args.split, **chosen,
            "train_s": round(seconds, 1), "images": args.images, "beam_size": args.beam_size,
            **score(run_dir, args.images, args.beam_size, args.split)}


def summarize(name: str, overrides: dict, seeds: list[int], results: list[dict]) -> dict:
    """Mean, sample standard deviation, minimum and maximum of every numeric score over seeds."""
    from common.metrics.seeds import summarize as over_seeds

    head = {"name": name, "overrides": overrides, "seeds": seeds, "split": results[0]["split"]}
    return over_seeds(head, results, skip=("seed", "test_scored"))


def _record(out_dir: str, result: dict) -> None:
    from common.metrics.seeds import record

    path = Path(out_dir) / "results.jsonl"
    with reported_write(path, "--out-dir"):
        line = record(path, result)
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parses `argv`, trains and scores; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
