"""The CIDEr-D reward of self-critical training (`common.metrics.cider_d.CiderD`) against
pycocoevalcap's CIDEr, on SCST batches of the `shapes` data, and where the time goes.

    python scripts/benchmarks/cider_reward.py --rounds 5 \\
        --out docs/records/benchmarks/cider_reward_cpu.json

The corpus is the references of `--corpus` training images of `shapes` (8000, the default
split). A batch is `--images` of them, each with `--samples` sampled captions and one greedy
caption (a reference of the image with some words swapped for other words of the data's
vocabulary, dropped or repeated: 10 words on average); a round scores `--batches` batches three
ways, in turns (the order reversed every other round):

- `cider_d`: the reward, `CiderD` built once from the corpus (its document frequencies), then
  `scores(candidates, image_ids)` per batch;
- `cider_d_rebuilt`: `CiderD` built per batch from the batch's references (one entry per
  candidate, as pycocoevalcap is given them), then `scores`: pycocoevalcap's figures;
- `pycocoevalcap`: `Cider().compute_score` per batch on the same entries (its document
  frequencies are the batch's), the candidates tokenized by the same rule first (the
  references once, beforehand).

The last two give the same scores (checked to 1e-6 on every batch: `max_abs_difference`). Each
round also times the stages of each, over the same batches: `CiderD`'s tokenizing, mapping words
to ids, candidate n-gram vectors and similarities with the references; pycocoevalcap's cooking
of the n-gram counts, document frequencies and the CIDEr loop. Prints the milliseconds per batch
of each (medians over rounds), the ratios and the stage shares; with `--out` writes them as
JSON, with every round's figures and the machine's record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.cli import HelpFormatter, Parser, run_cli
from common.errors import UserError
from common.outputs import check_output_file, reported_write

TOLERANCE = 1e-6
QUICK = {"corpus": 200, "images": 8, "samples": 2, "batches": 2, "rounds": 2}
DEFAULTS = {"corpus": 8000, "images": 50, "samples": 5, "batches": 10, "rounds": 5}


def machine() -> dict[str, Any]:
    """Where the figures were measured (no TensorFlow: the benchmark does not use it)."""
    import numpy as np

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "cpu_model": model}
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = os.getloadavg()[0]
    return info


def corpus(images: int) -> dict[str, list[str]]:
    """`{image_id: [reference, ...]}` of the first `images` training images of `shapes`."""
    from captioner.datasets.shapes import load_shapes

    split = load_shapes("train", num_images=images, image_size=32, with_masks=False)
    return {record.image_id: list(record.captions) for record in split.records}


def perturb(words: list[str], vocabulary: list[str], rate: float, rng: random.Random
            ) -> list[str]:
    """`words` with each swapped for a random word of `vocabulary`, dropped or repeated with
    probability `rate` (a third each)."""
    out = []
    for word in words:
        draw = rng.random()
        if draw < rate / 3:
            out.append(rng.choice(vocabulary))
        elif draw < 2 * rate / 3:
            continue
        elif draw < rate:
            out += [word, word]
        else:
            out.append(word)
    return out


def batches(references: dict[str, list[str]], args: argparse.Namespace
            ) -> list[tuple[list[str], list[str]]]:
    """`--batches` SCST batches: `(candidates, image_ids)`, `--samples` sampled captions and
    one greedy caption for each of `--images` distinct images."""
    from common.metrics.caption_metrics import simple_tokenize

    rng = random.Random(args.seed)
    ids = list(references)
    vocabulary = sorted({w for refs in references.values() for r in refs
                         for w in simple_tokenize(r).split()})
    made = []
    for _ in range(args.batches):
        candidates, image_ids = [], []
        for image in rng.sample(ids, args.images):
            for sample in range(args.samples + 1):
                rate = 0.1 if sample == args.samples else 0.4  # the greedy caption is closer
                words = simple_tokenize(rng.choice(references[image])).split()
                candidates.append(" ".join(perturb(words, vocabulary, rate, rng)))
                image_ids.append(image)
        made.append((candidates, image_ids))
    return made


def timed(stages: dict[str, float], name: str, started: float) -> float:
    """Adds the milliseconds since `started` to `stages[name]`; returns the time now."""
    now = time.perf_counter()
    stages[name] = stages.get(name, 0.0) + (now - started) * 1e3
    return now


def forms(scorer: Any, references: dict[str, list[str]],
          work: list[tuple[list[str], list[str]]], scores: dict[str, list]
          ) -> dict[str, Callable[[], dict[str, float]]]:
    """`{side: measure}`: each measure times its side over every batch of `work` and returns
    `{"ms": per batch, stage: per batch, ...}`; the scores of the last call go to `scores`."""
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    from common.metrics.caption_metrics import simple_tokenize
    from common.metrics.cider_d import CiderD, _tokens

    tokenized = {image: [simple_tokenize(r) for r in refs] for image, refs in references.items()}
    count = len(work)

    def per_batch(stages: dict[str, float]) -> dict[str, float]:
        return {name: value / count for name, value in stages.items()}

    def cider_d() -> dict[str, float]:
        started = time.perf_counter()
        scores["cider_d"] = [scorer.scores(c, i) for c, i in work]
        stages = {"ms": (time.perf_counter() - started) * 1e3}
        for candidates, image_ids in work:  # the same again, stage by stage
            now = time.perf_counter()
            images = scorer._images_of(image_ids, len(candidates))
            captions = [_tokens(c, True, "candidate") for c in candidates]
            now = timed(stages, "tokenize", now)
            words, lengths = scorer._word_ids(captions)
            now = timed(stages, "word_ids", now)
            vectors = scorer._candidates(words, lengths)
            now = timed(stages, "ngrams", now)
            scorer._similarity(vectors, images)
            timed(stages, "similarity", now)
        return per_batch(stages)

    def cider_d_rebuilt() -> dict[str, float]:
        stages: dict[str, float] = {}
        results = []
        for candidates, image_ids in work:
            now = time.perf_counter()
            built = CiderD({k: references[i] for k, i in enumerate(image_ids)})
            now = timed(stages, "build", now)
            results.append(built.scores(candidates, range(len(candidates))))
            timed(stages, "score", now)
        stages["ms"] = stages["build"] + stages["score"]
        scores["cider_d_rebuilt"] = results
        return per_batch(stages)

    def pycocoevalcap() -> dict[str, float]:
        started = time.perf_counter()
        results = []
        for candidates, image_ids in work:
            res = {k: [simple_tokenize(c)] for k, c in enumerate(candidates)}
            gts = {k: tokenized[i] for k, i in enumerate(image_ids)}
            results.append(Cider().compute_score(gts, res)[1])
        stages = {"ms": (time.perf_counter() - started) * 1e3}
        scores["pycocoevalcap"] = results
        for candidates, image_ids in work:  # Cider.compute_score's steps, one by one
            now = time.perf_counter()
            cooked = CiderScorer(n=4, sigma=6.0)
            for c, i in zip(candidates, image_ids):
                cooked += (simple_tokenize(c), tokenized[i])
            now = timed(stages, "cook", now)
            cooked.compute_doc_freq()
            now = timed(stages, "doc_freq", now)
            cooked.compute_cider()
            timed(stages, "cider", now)
        return per_batch(stages)

    return {"cider_d": cider_d, "cider_d_rebuilt": cider_d_rebuilt,
            "pycocoevalcap": pycocoevalcap}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="cider_reward.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--corpus", type=int, help="training images of shapes whose references "
                   f"are the corpus (default {DEFAULTS['corpus']})")
    p.add_argument("--images", type=int,
                   help=f"images per batch (default {DEFAULTS['images']})")
    p.add_argument("--samples", type=int, help="sampled captions per image, besides the "
                   f"greedy one (default {DEFAULTS['samples']})")
    p.add_argument("--batches", type=int,
                   help=f"batches per round (default {DEFAULTS['batches']})")
    p.add_argument("--rounds", type=int,
                   help=f"rounds, the sides alternating (default {DEFAULTS['rounds']})")
    p.add_argument("--seed", type=int, default=0, help="seed of the batches")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, for the tests (only where an option is not given)")
    p.add_argument("--out", help="also write the results to this JSON file")
    # NumPy and pycocoevalcap only: no TensorFlow, and no Keras backend to refuse
    p.set_defaults(_run=run, _uses_tensorflow=False, _runs_on_jax=True)
    return p


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else DEFAULTS
    for name, value in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("corpus", "images", "batches", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.samples < 0:
        raise UserError(f"--samples must be at least 0, got {args.samples}")
    if args.images > args.corpus:
        raise UserError(f"--images {args.images} is more than --corpus {args.corpus}; "
                        "expected distinct images of the corpus in a batch")
    if args.out:
        check_output_file(args.out, "--out")

    from common.metrics.cider_d import CiderD

    references = corpus(args.corpus)
    started = time.perf_counter()
    scorer = CiderD(references)
    build_s = time.perf_counter() - started
    work = batches(references, args)
    scores: dict[str, list] = {}
    sides = forms(scorer, references, work, scores)
    for measure in sides.values():
        measure()  # warm up: imports, caches
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    names = list(sides)
    for index in range(args.rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            rounds[name].append(sides[name]())
    difference = max(float(abs(a - b).max()) for a, b in
                     zip(scores["cider_d_rebuilt"], scores["pycocoevalcap"]))
    if difference > TOLERANCE:
        raise AssertionError(f"CiderD differs from pycocoevalcap by {difference:g} on the "
                             "same references")
    median = {name: {field: statistics.median(r[field] for r in results)
                     for field in results[0]} for name, results in rounds.items()}
    shares = {name: {field: value / sum(v for f, v in fields.items() if f != "ms")
                     for field, value in fields.items() if field != "ms"}
              for name, fields in median.items()}
    ms = {name: fields["ms"] for name, fields in median.items()}
    candidates = [c for batch, _ in work for c in batch]
    report = {
        "command": " ".join(["scripts/benchmarks/cider_reward.py", *sys.argv[1:]]),
        "device": machine(),
        "corpus_images": len(references),
        "corpus_references": sum(map(len, references.values())),
        "corpus_ngrams": scorer._size,
        "corpus_array_bytes": sum(a.nbytes for a in [*vars(scorer).values(), *scorer._tables]
                                  if hasattr(a, "nbytes")),
        "corpus_reference_ngrams": len(scorer._values),
        "build_s": build_s,
        "images": args.images, "samples": args.samples, "batches": args.batches,
        "rounds": args.rounds, "candidates_per_batch": len(work[0][0]),
        "mean_candidate_words": statistics.fmean(len(c.split()) for c in candidates),
        "max_abs_difference": difference,
        "runs": rounds, "median": median, "shares": shares,
        "pycocoevalcap_over_cider_d": ms["pycocoevalcap"] / ms["cider_d"],
        "pycocoevalcap_over_cider_d_rebuilt": ms["pycocoevalcap"] / ms["cider_d_rebuilt"],
        "cider_d_rebuilt_over_cider_d": ms["cider_d_rebuilt"] / ms["cider_d"],
    }
    print(f"{args.images} images x ({args.samples} samples + greedy) = "
          f"{report['candidates_per_batch']} candidates of {report['mean_candidate_words']:.1f} "
          f"words, corpus of {len(references)} images ({scorer._size} n-grams, built in "
          f"{build_s:.2f} s, {report['corpus_array_bytes'] / 2**20:.1f} MiB of arrays)")
    print(f"ms per batch: CiderD {ms['cider_d']:.2f}, rebuilt per batch "
          f"{ms['cider_d_rebuilt']:.2f}, pycocoevalcap {ms['pycocoevalcap']:.1f}; "
          f"pycocoevalcap / CiderD {report['pycocoevalcap_over_cider_d']:.0f}x, / rebuilt "
          f"{report['pycocoevalcap_over_cider_d_rebuilt']:.1f}x; same scores as pycocoevalcap "
          f"to {difference:.1e}")
    for name in names:
        print(f"  {name}: " + ", ".join(f"{field} {100 * share:.0f}%"
                                        for field, share in shares[name].items()))
    if args.out:
        with reported_write(args.out, "--out"), open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
