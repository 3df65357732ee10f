"""Train one variant of the captioner `demo` preset and score it on the `shapes` test split.

    python scripts/experiments/captioner_ablation.py word-query \\
        --override '{"decoder": {"query": "hidden+word"}}' --out-dir runs/ablation
    python scripts/experiments/captioner_ablation.py hard-to-go --threads 1 \\
        --override '{"decoder": {"attention": "hard", "reward": "to-go"}}'

Each variant is the `demo` preset with nested overrides of any `CaptionerRunConfig` field
(`encoder`, `decoder`, `training`, ...; the ones the command line does not offer, such as
`encoder.context_convs`, included). It trains into `OUT_DIR/NAME` (replacing what is there),
captions the first `--test-images` images of the test split with beam search, and prints one
JSON line, also appended to `OUT_DIR/results.jsonl`: the training time, BLEU-1..4, object and
relation accuracy, attention correctness with its uniform baseline, and the mean peak of the
attention maps at the scored words. The README's ablation table was made with it, two
variants at a time with `--threads 1` each (on 2 cores, one thread per run loses little: the
model's operations are small).
"""

from __future__ import annotations

import argparse
import json
import os
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


def score(run_dir: Path, test_images: int, beam_size: int) -> dict:
    """Beam-search captions of the first `test_images` test images, and their scores."""
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
    records = list(load_split("shapes", "test", None, **run.config.data.options))[:test_images]
    split = CaptionSplit(name="shapes", split="test", records=records)
    by_id = generate(run, split, beam_size)  # resized to the encoder's input size
    captions = [by_id[r.image_id] for r in records]
    hypotheses = {r.image_id: c.text for r, c in zip(records, captions)}
    results = dict(caption_scores(split.references(), hypotheses, metrics=("bleu",)))
    results.update(shapes_scores(hypotheses, split))
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
    p.add_argument("--test-images", type=positive_int, default=300,
                   help="score on the first N images of the shapes test split")
    p.add_argument("--beam-size", type=positive_int, default=3,
                   help="beam size of the test captions")
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
    return {"name": name, "overrides": overrides, "seed": config.training.get("seed"),
            "train_s": round(seconds, 1), "test_images": args.test_images,
            "beam_size": args.beam_size, **score(run_dir, args.test_images, args.beam_size)}


def summarize(name: str, overrides: dict, seeds: list[int], results: list[dict]) -> dict:
    """Mean, sample standard deviation, minimum and maximum of every numeric score over seeds."""
    from common.metrics.seeds import summarize as over_seeds

    return over_seeds({"name": name, "overrides": overrides, "seeds": seeds}, results)


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
