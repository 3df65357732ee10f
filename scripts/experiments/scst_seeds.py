"""Self-critical training over seeds, chosen on `valid` and scored on `test` once.

    python scripts/experiments/scst_seeds.py --seeds 1234,1235,1236 --out-dir runs/scst-seeds
    python scripts/experiments/scst_seeds.py --seeds 1234,1235,1236 --out-dir runs/scst-seeds \\
        --split test --json docs/records/results/scst_seeds.json
    python scripts/experiments/scst_seeds.py --name xe3 --out-dir runs/scst-seeds -- \\
        --scst-xe-weight 0.3

`--split valid` (the default) trains and scores one candidate: per seed S it uses the
cross-entropy run `OUT_DIR/demo-S` when that run is finished, trains it there otherwise
(`captioner train --dataset shapes --preset demo --seed S`; a killed or failed run is resumed,
one still training is refused), trains the SCST stage from its best checkpoint into
`OUT_DIR/NAME-S`, replacing what is there (`captioner train --dataset shapes --preset
demo-scst --init-from OUT_DIR/demo-S --seed S`, plus what follows `--`; the whole command's
wall time and CPU time recorded, with the load average around it: on a shared machine the wall
time is the other processes' too), and scores both runs' best checkpoints with `captioner
evaluate --json` on the validation split at beam 3, as `scripts/demo.sh` does, with and without
`--no-repeat-ngram 3`: four variants, `start`, `start+no-repeat`, `scst` and `scst+no-repeat`.
Training runs as a subprocess (its output in `OUT_DIR/NAME-S.log`, `OUT_DIR/demo-S.log`),
evaluation in this process (`captioner.cli.main`). The record goes to `OUT_DIR/NAME-valid.json`.
Candidates (other presets, other options after `--`) are other names, each scored on valid.

`--split test` trains nothing and chooses nothing: it scores on the test split the very
checkpoints that the valid record of NAME (`OUT_DIR/NAME-valid.json`, or `--chosen-on FILE`)
scored, at its beam size and no-repeat N, for its seeds. What makes a candidate comes from
that record: `--seeds`, `--presets`, `--beam-size`, `--no-repeat-ngram` or options after `--`
that differ from it are refused in one line (exit 2), as is a record that is not a `--split
valid` one and a checkpoint whose bytes changed since it was scored there (the runs were
trained again: score them on valid again first). The four variants are reported side by
side, not chosen among. The test record (`OUT_DIR/NAME-test.json`) says `"chosen_on":
"valid"`, names the valid record (`chosen_record`) and counts the times NAME's test split was
scored (`test_scored`): a test record already at `--json` is not replaced without
`--overwrite`, which then counts 2. Neither a valid run nor any other replaces a test record.

The JSON (`--json`) holds every figure of every variant per seed, the SCST stage's wall time
and history, the checkpoints scored (path and SHA-256), a summary of each figure over the seeds
(mean, sample standard deviation, minimum, maximum: `common.metrics.seeds.summarize`), the
targets of issue 38 and whether each seed met them (`targets_met`), issue 47's targets for
the demo's captions and whether each variant met them (`demo_targets_met`), the commit (and
whether the working tree differed from it) and the tokenizer the caption metrics used. `--num-images N` scores the first
N images of the split (shapes makes them in a fixed order), for a quick check.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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
# Issue 47's targets for the demo's captions, each variant on its own: (figure, bound, at least?).
DEMO_TARGETS = {"object_accuracy": (98.0, True), "relation_accuracy": (99.0, True),
                "relations_stated": (0.38, True), "objects_named_twice_rate": (1.0, False),
                "attention_correctness": (75.0, True)}
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


def _evaluate(run_dir: Path, split: str, beam_size: int, no_repeat: int,
              num_images: int | None = None, checkpoint: str | None = None) -> dict[str, Any]:
    """The JSON of `captioner evaluate RUN_DIR` on shapes: the run's best checkpoint, or
    `checkpoint`; the split's first `num_images` images (the run's data options otherwise)."""
    from captioner.cli import main as captioner

    argv = ["evaluate", str(run_dir), "--dataset", "shapes", "--split", split,
            "--beam-size", str(beam_size), "--no-repeat-ngram", str(no_repeat)]
    if checkpoint:
        argv += ["--checkpoint", checkpoint]
    if num_images:  # `--data-option` replaces the run's options: give them all
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        options = {**config.get("data", {}).get("options", {}), "num_images": num_images}
        for key, value in options.items():
            argv += ["--data-option", f"{key}={json.dumps(value)}"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        with contextlib.redirect_stdout(io.StringIO()):  # its table: the JSON has it
            status = captioner([*argv, "--json", str(out)])
        if status != 0:
            raise UserError(f"captioner {' '.join(argv)} failed (exit {status})")
        return json.loads(out.read_text(encoding="utf-8"))


def checkpoint_digest(path: str | Path) -> str | None:
    """SHA-256 over a checkpoint's files (`ckpt-N.index`, `ckpt-N.data-*`; or the file
    itself), names and bytes; None when there are none."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(
        p for p in path.parent.glob(f"{path.name}.*") if p.is_file())
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


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


def demo_targets_met(variants: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool | None]]:
    """Per variant, whether it meets each of `DEMO_TARGETS` (None where the figure is
    missing)."""
    met = {}
    for name, v in variants.items():
        met[name] = {}
        for key, (bound, at_least) in DEMO_TARGETS.items():
            value = v.get(key)
            met[name][key] = None if value is None else bool(
                value >= bound if at_least else value <= bound)
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


# What makes a candidate: a `--split test` run takes them from the valid record it scores.
DEFAULTS = {"seeds": [1234, 1235, 1236], "presets": "demo,demo-scst", "beam_size": 3,
            "no_repeat_ngram": 3}
CANDIDATE = {"seeds": "--seeds", "presets": "--presets", "beam_size": "--beam-size",
             "no_repeat_ngram": "--no-repeat-ngram", "scst_args": "the options after --"}
# What a test record copies from the valid record's runs: how they were trained.
TRAINING = ("start_run", "start", "start_train_s", "scst_run", "scst_train_s", "scst_cpu_s",
            "load_average", "scst", "scst_training", "scst_history", "checkpoints")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter,
               usage=f"{PROG} [options] [-- SCST TRAIN OPTIONS]")
    p.add_argument("--seeds", type=distinct_list(int), default=None, metavar="S1,S2,...",
                   help="one demo run and one SCST stage per seed (default: 1234,1235,1236; "
                        "on test: the valid record's)")
    p.add_argument("--out-dir", default="runs/scst-seeds",
                   help="where the runs are (OUT_DIR/demo-S, reused when finished) and go")
    p.add_argument("--name", default="demo-scst",
                   help="the SCST runs' name: OUT_DIR/NAME-S (replaced on valid)")
    p.add_argument("--split", choices=("valid", "test"), default="valid",
                   help="valid: train and score a candidate; test: score the runs of NAME's "
                        "valid record, trained and chosen there, once")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="the record (default: OUT_DIR/NAME-SPLIT.json)")
    p.add_argument("--chosen-on", default=None, metavar="FILE",
                   help="with --split test: the valid record whose checkpoints are scored "
                        "(default: OUT_DIR/NAME-valid.json)")
    p.add_argument("--overwrite", action="store_true",
                   help="with --split test: replace a test record already at --json (it "
                        "then counts the test split scored twice)")
    p.add_argument("--beam-size", type=positive_int, default=None,
                   help="beam size of the scored captions, as scripts/demo.sh (default: 3; "
                        "on test: the valid record's)")
    p.add_argument("--no-repeat-ngram", type=positive_int, default=None, metavar="N",
                   help="the N of the +no-repeat variants (default: 3; on test: the valid "
                        "record's)")
    p.add_argument("--presets", default=None, metavar="START,STAGE",
                   help="the presets of the start run and of the SCST stage (default: "
                        "demo,demo-scst; demo,demo-scst-facts: the reward with the scene's "
                        "facts; the script's test: tiny,tiny; on test: the valid record's)")
    p.add_argument("--num-images", type=positive_int, default=None, metavar="N",
                   help="score the split's first N images (default: the run's dataset "
                        "options, 500 images for the presets demo and demo-scst)")
    # Training and scoring run in `captioner`'s own code: no TensorFlow before the checks.
    p.set_defaults(_run=run, _uses_tensorflow=False, scst_args=[], argv=[])
    return p


def check_name(name: str) -> None:
    """The SCST runs' name is the start of folder names under --out-dir."""
    if not name or "/" in name or name in (".", "..") or name == "demo":
        raise UserError(f"--name {name!r}: expected a plain name for the SCST runs under "
                        "--out-dir (no '/', not 'demo', which names the start runs)")


def _read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`, or None when it is not one."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def check_record_file(path: Path, args: argparse.Namespace,
                      inputs: tuple[Path, ...] = ()) -> int:
    """Refuses a `--json` that would replace a test record (unless `--overwrite` on test) or
    anything but an earlier record; returns the times NAME's test split was scored before.
    (The default, under an --out-dir still to be made, has nothing to check.)"""
    if args.json is None and not path.parent.is_dir():
        return 0
    check_output_file(path, "--json", inputs=inputs, result_keys=("kind", "runs", "summary"))
    old = _read_record(path) if path.is_file() else None
    if not old or old.get("split") != "test":
        return 0
    if args.split != "test":
        raise UserError(f"--json {path}: holds test scores; a valid run does not replace "
                        "them: choose another --json")
    if not args.overwrite:
        raise UserError(f"--json {path}: NAME {old.get('name')!r} was scored on test already "
                        "(the test split is scored once per result); --overwrite scores it "
                        "again and says so (test_scored), or choose another --json")
    return int(old.get("test_scored") or 1)


def chosen_record(args: argparse.Namespace, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The valid record a test run scores, checked: a `--split valid` record of NAME whose
    checkpoints are still the ones it scored; the candidate's options are taken from it."""
    path = Path(args.chosen_on) if args.chosen_on else out_dir / f"{args.name}-valid.json"
    if not path.is_file():
        raise UserError(f"--split test scores what was chosen on valid: no {path}; run this "
                        "with --split valid first (or name its record with --chosen-on)")
    record = _read_record(path)
    if not record or record.get("kind") != "scst_seeds" or record.get("split") != "valid":
        got = record.get("split") if record else None
        raise UserError(f"--chosen-on {path}: not a --split valid record of {PROG} (split "
                        f"{got!r}); choose on valid first")
    if record.get("name") != args.name:
        raise UserError(f"--chosen-on {path}: the record of NAME {record.get('name')!r}, not "
                        f"--name {args.name!r}")
    for key, option in CANDIDATE.items():
        given, chosen = getattr(args, key), record.get(key)
        if key == "presets" and given is not None:
            given = given.split(",")
        if given not in (None, []) and given != chosen:
            raise UserError(f"--split test: {option} {given!r} is not what {path} chose on "
                            f"valid ({chosen!r}); a test run scores that choice, not another "
                            "candidate: choose on valid first")
    for seed in record.get("runs", []):
        for role, checkpoint in (seed.get("checkpoints") or {}).items():
            if checkpoint_digest(checkpoint["path"]) != checkpoint["sha256"]:
                raise UserError(f"{checkpoint['path']}: not the {role} checkpoint of seed "
                                f"{seed['seed']} that {path} scored on valid (changed or gone "
                                "since); score it on valid again first")
        if not seed.get("checkpoints"):
            raise UserError(f"--chosen-on {path}: names no checkpoints (an older record); "
                            "score on valid again first")
    return path, record


def run(args: argparse.Namespace) -> int:
    check_name(args.name)
    if args.split == "valid" and (args.chosen_on or args.overwrite):
        raise UserError("--chosen-on and --overwrite go with --split test; a valid run "
                        "writes its own record")
    if any(a.split("=")[0] in SET_HERE for a in args.scst_args):
        raise UserError(f"the script sets {', '.join(SET_HERE)} of the SCST stage itself; "
                        "leave them out of the options after --")
    out_dir = check_output_folder(args.out_dir, "--out-dir")
    record_file = Path(args.json) if args.json else out_dir / f"{args.name}-{args.split}.json"
    if args.split == "test":
        chosen_file, chosen = chosen_record(args, out_dir)
        scored_before = check_record_file(record_file, args, inputs=(chosen_file,))
        runs = [_score_seed(args, chosen, {k: s[k] for k in ("seed", *TRAINING) if k in s})
                for s in chosen["runs"]]
        head = {"chosen_on": "valid", "chosen_record": str(chosen_file),
                "test_scored": scored_before + 1,
                **{k: chosen[k] for k in ("beam_size", "no_repeat_ngram", "presets",
                                          "scst_args")}}
    else:
        head = _train_candidate(args, out_dir, record_file)
        runs = head.pop("runs")
    tokenizers = {v.get("tokenizer") for s in runs for v in s["variants"].values()}
    record = {"kind": "scst_seeds", "name": args.name, "split": args.split, **head,
              "num_images": args.num_images, "seeds": [s["seed"] for s in runs], **_commit(),
              "tokenizer": sorted(map(str, tokenizers)), "targets": TARGETS,
              "demo_targets": DEMO_TARGETS, "runs": runs,
              "summary": summarize(runs),
              "command": " ".join(["python", f"scripts/experiments/{PROG}", *args.argv])}
    with reported_write(record_file, "--json"):
        record_file.parent.mkdir(parents=True, exist_ok=True)
        record_file.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{PROG}: wrote {record_file}", flush=True)
    return 0


def _train_candidate(args: argparse.Namespace, out_dir: Path,
                     record_file: Path) -> dict[str, Any]:
    """`--split valid`: per seed the start run (reused, resumed or trained) and the SCST stage
    (trained), both scored; the record's settings and its `runs`."""
    for key, value in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    presets = args.presets.split(",")
    if len(presets) != 2 or not all(presets):
        raise UserError(f"--presets {args.presets!r}: expected XE,SCST")
    check_record_file(record_file, args)
    plans = {}
    for seed in args.seeds:
        plans[seed] = start_run(out_dir / f"demo-{seed}", seed)
        check_scst_dir(out_dir / f"{args.name}-{seed}")

    runs = []
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
        scst_config = json.loads((scst_dir / "config.json").read_text(encoding="utf-8"))
        runs.append(_score_seed(args, None, {
            "seed": seed, "start_run": str(start_dir), "start": plans[seed],
            "start_train_s": start_train_s, "scst_run": str(scst_dir),
            "scst_train_s": scst_train_s, "scst_cpu_s": scst_cpu_s, "load_average": load,
            "scst": scst_config["scst"],
            "scst_training": {k: scst_config["training"].get(k) for k in (
                "epochs", "steps_per_epoch", "batch_size", "learning_rate")},
            "scst_history": _history(scst_dir)}))
    return {"beam_size": args.beam_size, "no_repeat_ngram": args.no_repeat_ngram,
            "presets": presets, "scst_args": args.scst_args, "runs": runs}


def _score_seed(args: argparse.Namespace, chosen: dict[str, Any] | None,
                seed: dict[str, Any]) -> dict[str, Any]:
    """`seed` with its four variants scored on `args.split`, their CIDEr over the start's,
    the targets met and (on valid) the checkpoints scored. On test (`chosen`: the valid
    record) the checkpoints are the ones the valid record names, at its beam size and N."""
    beam_size, no_repeat = ((chosen["beam_size"], chosen["no_repeat_ngram"]) if chosen
                            else (args.beam_size, args.no_repeat_ngram))
    variants = {}
    for name in ("start", "scst"):
        run_dir = Path(seed[f"{name}_run"])
        checkpoint = seed["checkpoints"][name]["path"] if chosen else None
        for suffix, n in (("", 0), ("+no-repeat", no_repeat)):
            variants[name + suffix] = _evaluate(run_dir, args.split, beam_size, n,
                                                args.num_images, checkpoint)
    if not chosen:
        seed["checkpoints"] = {name: {"path": variants[name]["checkpoint"],
                                      "sha256": checkpoint_digest(variants[name]["checkpoint"])}
                               for name in ("start", "scst")}
    start_cider = variants["start"]["CIDEr"]
    for scores in variants.values():  # (None from a start of CIDEr 0)
        scores["cider_ratio"] = scores["CIDEr"] / start_cider if start_cider else None
    figures = {name: {k: _rounded(v.get(k)) for k in (
        "CIDEr", "object_accuracy", "relation_accuracy", "relations_stated",
        "objects_named_twice", "attention_correctness")} for name, v in variants.items()}
    took = f"SCST {seed['scst_train_s']:.0f} s; " if seed.get("scst_train_s") else ""
    print(f"{PROG}: seed {seed['seed']} on {args.split}: {took}{json.dumps(figures)}",
          flush=True)
    return {**seed, "variants": variants, "targets_met": targets_met(variants),
            "demo_targets_met": demo_targets_met(variants)}


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
