"""Self-critical training over seeds: the `demo` run, then `demo-scst` from it, each scored twice.

    python scripts/experiments/scst_seeds.py --seeds 1234,1235,1236 --out-dir runs/scst \\
        --json docs/records/results/scst_seeds.json
    python scripts/experiments/scst_seeds.py --split valid --name xe3 --out-dir runs/scst \\
        --json runs/scst/xe3-valid.json -- --scst-xe-weight 0.3

Per seed S it uses the cross-entropy run `OUT_DIR/demo-S` when that run is finished, trains it
there otherwise (`captioner train --dataset shapes --preset demo --seed S`; a killed or failed
run is resumed, one still training is refused), trains the SCST stage from its best checkpoint
into `OUT_DIR/NAME-S`, replacing what is there (`captioner train --dataset shapes --preset
demo-scst --init-from OUT_DIR/demo-S --seed S`, plus what follows `--`; the whole command's
wall time and CPU time recorded, with the load average around it: on a shared machine the wall
time is the other processes' too), and scores both runs' best checkpoints with `captioner
evaluate --json` on the split at beam 3, as `scripts/demo.sh` does, with and without
`--no-repeat-ngram 3`: four variants, `start`, `start+no-repeat`, `scst` and `scst+no-repeat`. Training runs as a
subprocess (its output in `OUT_DIR/NAME-S.log`, `OUT_DIR/demo-S.log`), evaluation in this
process (`captioner.cli.main`).

The JSON (`--json`) holds every figure of every variant per seed, the SCST stage's wall time
and history, a summary of each figure over the seeds (mean, sample standard deviation, minimum,
maximum: `common.metrics.seeds.summarize`), the targets of issue 38 and whether each seed met
them, the commit (and whether the working tree differed from it) and the tokenizer the caption
metrics used. Choose settings on `--split valid`; report `--split test` once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.cli import HelpFormatter, Parser, distinct_list, positive_int, run_cli
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write

PROG = "scst_seeds.py"
REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("start", "start+no-repeat", "scst", "scst+no-repeat")
SET_HERE = ("--out", "--seed", "--init-from", "--preset", "--dataset", "--resume")
# Issue 38 item 3: what the SCST stage (and the no-repeat decoding alone) should reach.
TARGETS = {"object_accuracy": 97.0, "relation_accuracy": 98.0, "cider_ratio": 1.10}
# Not figures of a variant: the same in every evaluation, or not numbers.
NOT_FIGURES = ("images", "skipped_images", "beam_size", "no_repeat_ngram", "run_state",
               "checkpoint", "split", "tokenizer")


def _cpu_s() -> float:
    """The CPU seconds (user and system) of this process's ended children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _train(args: list[str], log: Path) -> tuple[float, float]:
    """`python -m captioner train ARGS`, its output to `log`; its wall time and CPU time
    (user and system, all its threads) in seconds."""
    start, cpu = time.perf_counter(), _cpu_s()
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run([sys.executable, "-m", "captioner", "train", *args], stdout=out,
                              stderr=subprocess.STDOUT, cwd=REPO)
    seconds, cpu = time.perf_counter() - start, _cpu_s() - cpu
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        raise UserError(f"captioner train {' '.join(args)} failed (exit {done.returncode}; "
                        f"{log}): {' '.join(tail)}")
    return seconds, cpu


def _evaluate(run_dir: Path, split: str, beam_size: int, no_repeat: int) -> dict[str, Any]:
    """The JSON of `captioner evaluate RUN_DIR` on shapes (the run's best checkpoint)."""
    from captioner.cli import main as captioner

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        argv = ["evaluate", str(run_dir), "--dataset", "shapes", "--split", split,
                "--beam-size", str(beam_size), "--no-repeat-ngram", str(no_repeat),
                "--json", str(out)]
        with contextlib.redirect_stdout(io.StringIO()):  # its table: the JSON has it
            status = captioner(argv)
        if status != 0:
            raise UserError(f"captioner {' '.join(argv)} failed (exit {status})")
        return json.loads(out.read_text(encoding="utf-8"))


def _history(run_dir: Path) -> dict[str, Any]:
    """What the SCST run's history says: per epoch its reward, greedy reward, cross-entropy of
    the references (with the mix), validation CIDEr and seconds; the best epoch."""
    from common.training.run_dir import RunDir

    epochs = [r for r in RunDir(run_dir).read_history() if r.get("kind") == "epoch"]
    out = {key: [e.get(key) for e in epochs]
           for key in ("reward", "greedy_reward", "xent", "val_cider", "time_s")
           if any(key in e for e in epochs)}
    if epochs and "best_epoch" in epochs[-1]:
        out["best_epoch"] = epochs[-1]["best_epoch"]
    return out


def _commit() -> dict[str, Any]:
    """The commit this checkout is at, and whether its working tree differs from it."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def start_run(run_dir: Path, seed: int) -> str:
    """What to do with the cross-entropy run of `seed`: `"reuse"` a finished one, `"resume"` a
    killed or failed one, `"train"` where there is none; `UserError` for a run still training,
    one of another seed or dataset, or a folder that holds no run."""
    from common.training.run_dir import RunDir

    run = RunDir(run_dir)
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return "train"
    check_output_folder(run_dir, "--out-dir")
    if not run.config.is_file():
        raise UserError(f"{run_dir}: not a run directory (no {run.config.name}); expected the "
                        f"demo run of seed {seed}, or no folder there")
    config = json.loads(run.config.read_text(encoding="utf-8"))
    got = (config.get("data", {}).get("dataset"), config.get("training", {}).get("seed"))
    if got != ("shapes", seed):
        raise UserError(f"{run_dir}: a run of dataset {got[0]!r} and seed {got[1]!r}; expected "
                        f"the shapes demo of seed {seed}")
    status = run.read_status() or {}
    state = status.get("state")
    if state == "finished":
        return "reuse"
    if state == "training":
        raise UserError(f"{run_dir}: still training (process {status.get('pid')} on "
                        f"{status.get('host')}, step {status.get('step')}); run this again "
                        "once its status.json says finished")
    return "resume"


def check_scst_dir(run_dir: Path) -> None:
    """The SCST run's folder is replaced: refuse one that holds anything but a run, or a run
    still training."""
    from common.training.run_dir import RunDir

    check_output_folder(run_dir, "--out-dir")
    if not run_dir.is_dir():
        return
    run = RunDir(run_dir)
    foreign = run.foreign_names()
    if foreign:
        raise UserError(f"{run_dir}: holds {', '.join(foreign[:3])}, not a run; the SCST run "
                        "replaces this folder: choose another --out-dir or --name")
    if (run.read_status() or {}).get("state") == "training":
        raise UserError(f"{run_dir}: an SCST run is still training there; wait for it or "
                        "choose another --name")


def targets_met(variants: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool | None]]:
    """Per variant other than `start`, whether it meets each target of issue 38 against the
    seed's `start` (None where the figure is missing: no relation stated)."""
    start = variants["start"]

    def at_least(value, bound):
        return None if value is None or bound is None else bool(value >= bound)

    met = {}
    for name in VARIANTS[1:]:
        v = variants[name]
        met[name] = {
            "object_accuracy": at_least(v.get("object_accuracy"), TARGETS["object_accuracy"]),
            "relation_accuracy": at_least(v.get("relation_accuracy"),
                                          TARGETS["relation_accuracy"]),
            "cider_ratio": at_least(v.get("cider_ratio"), TARGETS["cider_ratio"]),
            "attention_correctness": at_least(v.get("attention_correctness"),
                                              start.get("attention_correctness")),
            "attention_correctness_references": at_least(
                v.get("attention_correctness_references"),
                start.get("attention_correctness_references")),
            "objects_named_twice": at_least(-(v.get("objects_named_twice") or 0),
                                            -(start.get("objects_named_twice") or 0)),
        }
    return met


def summarize(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, sample standard deviation, minimum and maximum over the seeds of every figure of
    every variant, and of the SCST stage's wall time."""
    from common.metrics.seeds import summarize as over_seeds

    summary = {}
    for name in VARIANTS:
        rows = [seed["variants"][name] for seed in seeds]
        summary[name] = {k: v for k, v in over_seeds({}, rows, skip=NOT_FIGURES).items()
                         if k not in ("kind", "runs")}
    for key in ("scst_train_s", "scst_cpu_s"):
        summary[key] = over_seeds({}, [{key: s[key]} for s in seeds if key in s]).get(key)
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter,
               usage=f"{PROG} [options] [-- SCST TRAIN OPTIONS]")
    p.add_argument("--seeds", type=distinct_list(int), default=[1234, 1235, 1236],
                   metavar="S1,S2,...", help="one demo run and one SCST stage per seed")
    p.add_argument("--out-dir", default="runs/scst-seeds",
                   help="where the runs are (OUT_DIR/demo-S, reused when finished) and go")
    p.add_argument("--name", default="demo-scst",
                   help="the SCST runs' name: OUT_DIR/NAME-S (replaced)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="the record (default: OUT_DIR/NAME.json)")
    p.add_argument("--split", choices=("valid", "test"), default="test",
                   help="the shapes split scored (choose settings on valid)")
    p.add_argument("--beam-size", type=positive_int, default=3,
                   help="beam size of the scored captions, as scripts/demo.sh")
    p.add_argument("--no-repeat-ngram", type=positive_int, default=3, metavar="N",
                   help="the N of the +no-repeat variants")
    p.add_argument("--presets", default="demo,demo-scst", metavar="START,STAGE",
                   help="the presets of the start run and of the SCST stage "
                        "(demo,demo-scst-facts: the reward with the scene's facts; the "
                        "script's test: tiny,tiny)")
    # Training and scoring run in `captioner`'s own code: no TensorFlow before the checks.
    p.set_defaults(_run=run, _uses_tensorflow=False, scst_args=[], argv=[])
    return p


def check_name(name: str) -> None:
    """The SCST runs' name is the start of folder names under --out-dir."""
    if not name or "/" in name or name in (".", "..") or name == "demo":
        raise UserError(f"--name {name!r}: expected a plain name for the SCST runs under "
                        "--out-dir (no '/', not 'demo', which names the start runs)")


def run(args: argparse.Namespace) -> int:
    check_name(args.name)
    presets = args.presets.split(",")
    if len(presets) != 2 or not all(presets):
        raise UserError(f"--presets {args.presets!r}: expected XE,SCST")
    if any(a.split("=")[0] in SET_HERE for a in args.scst_args):
        raise UserError(f"the script sets {', '.join(SET_HERE)} of the SCST stage itself; "
                        "leave them out of the options after --")
    out_dir = check_output_folder(args.out_dir, "--out-dir")
    record_file = Path(args.json) if args.json else out_dir / f"{args.name}.json"
    check_output_file(record_file, "--json", result_keys=("kind", "runs", "summary"))
    plans = {}
    for seed in args.seeds:
        plans[seed] = start_run(out_dir / f"demo-{seed}", seed)
        check_scst_dir(out_dir / f"{args.name}-{seed}")

    seeds, tokenizers = [], set()
    for seed in args.seeds:
        start_dir, scst_dir = out_dir / f"demo-{seed}", out_dir / f"{args.name}-{seed}"
        start_args = ["--dataset", "shapes", "--preset", presets[0], "--seed", str(seed),
                      "--out", str(start_dir), "--verbose", "2"]
        start_train_s = None
        if plans[seed] != "reuse":
            out_dir.mkdir(parents=True, exist_ok=True)
            resume = ["--resume"] if plans[seed] == "resume" else []
            print(f"{PROG}: training {start_dir} ({plans[seed]})", flush=True)
            start_train_s, _ = _train(start_args + resume, out_dir / f"demo-{seed}.log")
        shutil.rmtree(scst_dir, ignore_errors=True)
        scst_args = ["--dataset", "shapes", "--preset", presets[1], "--scst",
                     "--init-from", str(start_dir), "--seed", str(seed), "--out", str(scst_dir),
                     "--verbose", "2", *args.scst_args]
        print(f"{PROG}: training {scst_dir}", flush=True)
        load = os.getloadavg()[0]
        scst_train_s, scst_cpu_s = _train(scst_args, out_dir / f"{args.name}-{seed}.log")
        load = (load + os.getloadavg()[0]) / 2
        variants = {}
        for name, run_dir in (("start", start_dir), ("scst", scst_dir)):
            for suffix, no_repeat in (("", 0), ("+no-repeat", args.no_repeat_ngram)):
                scores = _evaluate(run_dir, args.split, args.beam_size, no_repeat)
                tokenizers.add(scores.get("tokenizer"))
                variants[name + suffix] = scores
        start_cider = variants["start"]["CIDEr"]
        for scores in variants.values():  # (None from a start of CIDEr 0)
            scores["cider_ratio"] = scores["CIDEr"] / start_cider if start_cider else None
        scst_config = json.loads((scst_dir / "config.json").read_text(encoding="utf-8"))
        seeds.append({"seed": seed, "start_run": str(start_dir), "start": plans[seed],
                      "start_train_s": start_train_s, "scst_run": str(scst_dir),
                      "scst_train_s": scst_train_s, "scst_cpu_s": scst_cpu_s,
                      "load_average": load, "scst": scst_config["scst"],
                      "scst_training": {k: scst_config["training"].get(k) for k in (
                          "epochs", "steps_per_epoch", "batch_size", "learning_rate")},
                      "scst_history": _history(scst_dir), "variants": variants,
                      "targets_met": targets_met(variants)})
        figures = {name: {k: _rounded(v.get(k)) for k in (
            "CIDEr", "object_accuracy", "relation_accuracy", "relations_stated",
            "objects_named_twice", "attention_correctness")} for name, v in variants.items()}
        print(f"{PROG}: seed {seed}: SCST {scst_train_s:.0f} s; {json.dumps(figures)}",
              flush=True)

    record = {"kind": "scst_seeds", "split": args.split, "beam_size": args.beam_size,
              "no_repeat_ngram": args.no_repeat_ngram, "presets": presets,
              "scst_args": args.scst_args, "seeds": [s["seed"] for s in seeds],
              **_commit(), "tokenizer": sorted(map(str, tokenizers)),
              "targets": TARGETS, "runs": seeds, "summary": summarize(seeds),
              "command": " ".join(["python", f"scripts/experiments/{PROG}", *args.argv])}
    with reported_write(record_file, "--json"):
        record_file.parent.mkdir(parents=True, exist_ok=True)
        record_file.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{PROG}: wrote {record_file}", flush=True)
    return 0


def _rounded(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) and math.isfinite(value) else value


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` (what follows `--` goes to the SCST stage's `captioner train`) and runs;
    a `UserError` prints one line and gives 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    scst_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, scst_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    parser.set_defaults(scst_args=scst_args, argv=[*argv, *(["--", *scst_args] if scst_args
                                                             else [])])
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
