"""Train one translator recipe per seed and score its checkpoints on a split: one table row.

    python scripts/translator_recipe.py tf-12k --data ../shared/data/spa-eng --seeds 1,2,3 \\
        --average 5 --beam-size 4 --length-penalties 0.6,1.0 \\
        -- --arch transformer --preset spa-eng-cpu --epochs 24

Everything after `--` goes to `seq2seq train` as it stands (plus `--dataset tsv --data DATA
--seed S`), so a row of the results table reruns with its own line. For each seed the recipe
trains into `OUT_DIR/NAME-seedS` (replacing what is there) and records the training's wall
time; it then scores, on `DATA/SPLIT.tsv` with `seq2seq evaluate` (sacreBLEU on raw cased
references), the run's best checkpoint by validation (when it keeps one), its last, and with
`--average N` the mean of its last N checkpoints (`seq2seq average`, into `...-avgN`), or only
the one `--checkpoint` names, each at every length penalty asked for (by default at the run's own, which its preset sets). One JSON
line per (seed, checkpoint, penalty) goes to stdout and `OUT_DIR/results.jsonl`, with what the
run's history says of its training: the mean loss of every epoch (`epoch_loss`), the last
(`train_loss`) and the median examples per second over the epochs. Then one summary line per
(checkpoint, penalty) gives the mean, standard deviation, minimum and maximum over the seeds.

Seeds trained by separate commands (two pinned to a core each, say) are summarized afterwards
with `--summarize`: it trains nothing and writes the summary lines over `--seeds` from the
lines `OUT_DIR/results.jsonl` already holds for NAME, SPLIT and the beam size (a seed's latest
line wins), after checking that every seed has every (checkpoint, penalty) and that they all
trained with the same options.

A recipe is chosen on `valid` and scored on `test` once, and the script holds to it. A `--split
test` run scores one candidate: the checkpoint (`--checkpoint best|last|average-N`) and one
length penalty (`--length-penalties A`) are named, and `OUT_DIR/results.jsonl` must already
hold valid lines of NAME at that checkpoint, penalty and beam size, trained with the same
options; otherwise it is refused in one line (exit 2) before any training, saying to choose on
valid first. It is refused too where results.jsonl holds a test line of NAME for one of the
seeds already, unless `--overwrite` (its lines are then appended, and `--summarize` takes a
seed's latest). Test lines say `"chosen_on": "valid"` and how many times that seed's test
split has been scored for NAME (`test_scored`, 1 but after `--overwrite`). Other split names
are not guarded. The preset is what a user should start from, not one tuned to the test
split. Only the commands the package offers are run, so the figures are what a user gets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common.cli import (
    HelpFormatter,
    Parser,
    distinct_list,
    non_negative_float,
    non_negative_int,
    positive_int,
    run_cli,
)
from common.errors import UserError
from common.outputs import check_output_file, check_output_folder, reported_write

PROG = "translator_recipe.py"


def _seq2seq(*args: str, quiet: bool = False) -> subprocess.CompletedProcess:
    """`python -m seq2seq ARGS`; its output passes through unless `quiet`."""
    return subprocess.run([sys.executable, "-m", "seq2seq", *args], text=True,
                          capture_output=quiet)


def _evaluate(target: Path, checkpoint: str | None, args, penalty: float | None) -> dict:
    """The scores of `seq2seq evaluate` (the run's own length penalty where `penalty` is None)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        command = ["evaluate", str(target), "--data", str(Path(args.data) / f"{args.split}.tsv"),
                   "--beam-size", str(args.beam_size), "--json", str(out)]
        if penalty is not None:
            command += ["--length-penalty", str(penalty)]
        if checkpoint:
            command += ["--checkpoint", checkpoint]
        done = _seq2seq(*command, quiet=True)
        if done.returncode != 0:
            raise RuntimeError(f"evaluate {target} failed: {done.stderr.strip()[-500:]}")
        scores = json.loads(out.read_text())
    keep = ("length_penalty", "bleu", "chrf", "exact_match", "brevity_penalty", "hyp_length",
            "ref_length")
    return {k: scores[k] for k in keep if k in scores}


def _training(run_dir: Path) -> dict:
    """What the run's history says of its training: the mean loss of each epoch (`epoch_loss`,
    a curve the summary gives point by point), the last one (`train_loss`), and the median
    training rate over the epochs (`examples_per_s`; the first epoch's includes tracing, which
    the median outweighs once there are 3 epochs or more)."""
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    epochs = [r for r in map(json.loads, filter(str.strip, lines)) if r.get("kind") == "epoch"]
    losses = [e["loss"] for e in epochs if "loss" in e]
    rates = [e["examples_per_s"] for e in epochs if "examples_per_s" in e]
    out = {}
    if losses:
        out.update(train_loss=losses[-1], epoch_loss=losses)
    if rates:
        out["examples_per_s"] = float(np.median(rates))
    return out


def _checkpoints(run_dir: Path, average: int,
                 only: str | None = None) -> list[tuple[str, Path, str | None]]:
    """(label, directory, --checkpoint) of what is scored: all, or the one labelled `only`."""
    from common.training.best import best_record

    chosen = []
    if best_record(run_dir) is not None and only in (None, "best"):
        chosen.append(("best", run_dir, "best"))
    if only in (None, "last"):
        chosen.append(("last", run_dir, "last"))
    if only is not None and not chosen and only == "best":
        raise UserError(f"--checkpoint best: {run_dir} keeps no best checkpoint (its "
                        "--best-metric is none); choose last or average-N")
    if average and only in (None, f"average-{average}"):
        averaged = run_dir.with_name(f"{run_dir.name}-avg{average}")
        shutil.rmtree(averaged, ignore_errors=True)
        done = _seq2seq("average", str(run_dir), "--last", str(average), "--out",
                        str(averaged), quiet=True)
        if done.returncode != 0:
            raise RuntimeError(f"average {run_dir} failed: {done.stderr.strip()[-500:]}")
        chosen.append((f"average-{average}", averaged, None))
    return chosen


def _lines(results_file: Path, what: str) -> list[dict]:
    """The JSON lines of `results_file` (none when it is missing); a `ValueError` names a line
    that is not JSON (a run killed mid-write)."""
    if not results_file.is_file():
        return []
    lines = []
    for number, line in enumerate(results_file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{what}: {results_file}, line {number}: not JSON "
                             f"({e.msg})") from None
    return lines


def _recorded(results_file: Path, args) -> dict[tuple[str, float], list[dict]]:
    """The seeds' lines in `results_file` for `args.name`, split and beam size (at
    `args.length_penalties` when given), grouped by (checkpoint, penalty), a seed's latest line
    for each; a `ValueError` says which seed lacks which line or trained differently."""
    if not results_file.is_file():
        raise ValueError(f"--summarize: no {results_file}")
    latest = {}
    for r in _lines(results_file, "--summarize"):
        if (r.get("kind") != "summary" and r.get("name") == args.name
                and r.get("seed") in args.seeds and r.get("split") == args.split
                and args.checkpoint in (None, r.get("checkpoint"))
                and r.get("beam_size") == args.beam_size
                and (not args.length_penalties or r.get("length_penalty")
                     in args.length_penalties)):
            latest[(r["checkpoint"], r["length_penalty"], r["seed"])] = r
    if not latest:
        raise ValueError(f"--summarize: {results_file} has no line for {args.name} on "
                         f"{args.split} at beam {args.beam_size} for seeds "
                         f"{','.join(map(str, args.seeds))}")
    rows: dict[tuple[str, float], list[dict]] = {}
    for label, penalty in sorted({key[:2] for key in latest}):
        for seed in args.seeds:
            if (label, penalty, seed) not in latest:
                raise ValueError(f"--summarize: seed {seed} has no {label} line at length "
                                 f"penalty {penalty} in {results_file}")
            rows.setdefault((label, penalty), []).append(latest[(label, penalty, seed)])
    options = {json.dumps(r.get("train_args")) for r in latest.values()}
    if len(options) > 1:
        raise ValueError(f"--summarize: the seeds of {args.name} trained with different "
                         f"options: {' | '.join(sorted(options))}")
    return rows


def check_test_run(results_file: Path, args, train_args: list[str]) -> dict[int, int]:
    """What a `--split test` run must meet before it trains: one candidate named (the
    checkpoint, one length penalty), chosen on valid (`results_file` holds valid lines of NAME
    for it, trained with `train_args`), and no seed scored on test for NAME already unless
    `--overwrite`. Returns, per seed, the times its test split was scored before."""
    if args.checkpoint is None or len(args.length_penalties or []) != 1:
        penalties = ",".join(map(str, args.length_penalties or [])) or "(the run's own)"
        got = f"--checkpoint {args.checkpoint or '(all)'}, --length-penalties {penalties}"
        raise UserError(f"--split test scores one candidate chosen on valid: name it with "
                        f"--checkpoint and one --length-penalties value (got {got}); choose "
                        "on valid first (--split valid)")
    try:
        lines = [r for r in _lines(results_file, "--out-dir") if r.get("name") == args.name
                 and r.get("kind") != "summary"]
    except ValueError as e:
        raise UserError(str(e)) from None
    penalty = round(args.length_penalties[0], 2)
    if not any(r.get("split") == "valid" and r.get("checkpoint") == args.checkpoint
               and r.get("length_penalty") == penalty and r.get("beam_size") == args.beam_size
               and r.get("train_args") == train_args for r in lines):
        raise UserError(f"--split test: {results_file} has no valid line of {args.name} at "
                        f"--checkpoint {args.checkpoint}, length penalty {penalty}, beam "
                        f"{args.beam_size} with these training options; choose on valid first "
                        "(--split valid, the same options)")
    scored = {seed: sum(r.get("split") == "test" and r.get("seed") == seed for r in lines)
              for seed in args.seeds}
    again = [seed for seed, times in scored.items() if times]
    if again and not args.overwrite:
        raise UserError(f"--split test: {results_file} holds test lines of {args.name} for "
                        f"seed {','.join(map(str, again))} already (the test split is scored "
                        "once per result); --overwrite scores it again and says so "
                        "(test_scored), or choose another NAME")
    return scored


def _summarize(results_file: Path, rows: dict[tuple[str, float], list[dict]], args,
               train_args: list[str]) -> None:
    """One summary line per (checkpoint, penalty), to stdout and `results_file`."""
    from common.metrics.seeds import record, summarize

    for (label, penalty), results in rows.items():
        head = {"name": args.name, "checkpoint": label, "length_penalty": penalty,
                "beam_size": args.beam_size, "split": args.split,
                "seeds": [r["seed"] for r in results], "train_args": train_args}
        if args.split == "test":
            head["chosen_on"] = "valid"
        summary = summarize(head, results,
                            skip=("seed", "length_penalty", "beam_size", "test_scored"))
        with reported_write(results_file, "--out-dir"):
            line = record(results_file, summary)
        print(line, flush=True)


TRAIN_OPTIONS_SET_HERE = ("--out", "--seed", "--data", "--dataset")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter,
               usage=f"{PROG} NAME --data DIR [options] -- TRAIN OPTIONS")
    p.add_argument("name", help="the recipe's name (its run directories under --out-dir)")
    p.add_argument("--data",
                   help="a folder with train.tsv and SPLIT.tsv (source<TAB>target); "
                        "required unless --summarize")
    p.add_argument("--split", default="valid", help="what is scored: DATA/SPLIT.tsv")
    p.add_argument("--seeds", type=distinct_list(int), default=[1, 2, 3], metavar="S1,S2,...",
                   help="train once per seed (runs NAME-seedS)")
    p.add_argument("--out-dir", default="runs/recipes",
                   help="where the runs and results.jsonl go")
    p.add_argument("--beam-size", type=positive_int, default=4,
                   help="beam size of the scored translations")
    p.add_argument("--length-penalties", type=distinct_list(non_negative_float), default=None,
                   metavar="A1,A2,...",
                   help="score at each of these length penalties (default: the run's own, "
                        "the preset's)")
    p.add_argument("--average", type=non_negative_int, default=0, metavar="N",
                   help="also score the mean of the last N checkpoints (0: no)")
    p.add_argument("--checkpoint", default=None, metavar="LABEL",
                   help="score only this checkpoint: best, last or average-N (with --average "
                        "N); required with --split test, with one --length-penalties value")
    p.add_argument("--overwrite", action="store_true",
                   help="with --split test: score seeds that results.jsonl holds test lines "
                        "of NAME for again (the lines are appended and count it)")
    p.add_argument("--summarize", action="store_true",
                   help="train nothing: write the summary lines over --seeds from what "
                        "OUT_DIR/results.jsonl holds for NAME (seeds trained by separate "
                        "commands)")
    # The training and scoring run in `seq2seq` processes: this one needs no TensorFlow.
    p.set_defaults(_run=run, _uses_tensorflow=False, train_args=[])
    return p


def check_name(name: str) -> None:
    """A recipe's name starts folder names under --out-dir: not empty and not a path."""
    if not name or "/" in name or os.sep in name:
        raise UserError(f"NAME {name!r}: expected a plain name for the runs under --out-dir "
                        "(no '/')")


def check_outputs(args: argparse.Namespace) -> Path:
    """Refuses, before any training, an `--out-dir` that cannot take the runs and
    results.jsonl, or whose runs (removed before training) hold `--data`; returns
    results.jsonl."""
    folder = check_output_folder(args.out_dir, "--out-dir")
    data = Path(args.data).resolve()
    for seed in args.seeds:
        run_dir = folder / f"{args.name}-seed{seed}"
        replaced = [run_dir] + ([run_dir.with_name(f"{run_dir.name}-avg{args.average}")]
                                if args.average else [])
        for path in replaced:  # each is removed and written again
            check_output_folder(path, "--out-dir")
            if path.resolve() == data or path.resolve() in data.parents:
                raise UserError(f"--data {args.data}: is inside {path}, a run this recipe "
                                "replaces; choose another --out-dir or NAME")
    results_file = folder / "results.jsonl"
    if folder.is_dir():
        check_output_file(results_file, "--out-dir")
    return results_file


def check_choice_options(args: argparse.Namespace) -> None:
    """`--checkpoint` names one the recipe scores; `--overwrite` is for a test run."""
    labels = ["best", "last"] + ([f"average-{args.average}"] if args.average else [])
    if args.checkpoint is not None and args.checkpoint not in labels:
        raise UserError(f"--checkpoint {args.checkpoint!r}: expected one of "
                        f"{', '.join(labels)} (average-N needs --average N)")
    if args.overwrite and (args.split != "test" or args.summarize):
        raise UserError("--overwrite goes with --split test: it scores the test split again")


def run(args: argparse.Namespace) -> int:
    check_name(args.name)
    check_choice_options(args)
    train_args = args.train_args
    results_file = Path(args.out_dir) / "results.jsonl"
    if args.summarize:
        if train_args:
            raise UserError("--summarize trains nothing: leave out the training options "
                            "after --")
        if results_file.exists():
            check_output_file(results_file, "--out-dir")
        try:
            rows = _recorded(results_file, args)
        except ValueError as e:
            raise UserError(str(e)) from None
        train_args = next(iter(rows.values()))[0].get("train_args", [])
        _summarize(results_file, rows, args, train_args)
        return 0
    if args.data is None:
        raise UserError("--data is required (unless --summarize)")
    if not Path(args.data).is_dir():
        what = "is not a folder" if Path(args.data).exists() else "no such folder"
        raise UserError(f"--data {args.data}: {what}; expected a folder with train.tsv and "
                        f"{args.split}.tsv")
    for name in ("train.tsv", f"{args.split}.tsv"):
        if not (Path(args.data) / name).is_file():
            raise UserError(f"--data {args.data}: no {name} there")
    if any(a.split("=")[0] in TRAIN_OPTIONS_SET_HERE for a in train_args):
        raise UserError("the recipe sets --out, --seed, --data and --dataset itself; leave "
                        "them out of the training options")
    results_file = check_outputs(args)
    if args.average and "--keep-checkpoints" not in train_args:
        train_args += ["--keep-checkpoints", str(args.average)]
    scored = check_test_run(results_file, args, train_args) if args.split == "test" else {}

    from common.metrics.seeds import record

    rows: dict[tuple[str, float], list[dict]] = {}
    for seed in args.seeds:
        run_dir = Path(args.out_dir) / f"{args.name}-seed{seed}"
        shutil.rmtree(run_dir, ignore_errors=True)
        start = time.perf_counter()
        done = _seq2seq("train", "--dataset", "tsv", "--data", args.data, "--seed", str(seed),
                        "--out", str(run_dir), "--verbose", "2", *train_args)
        train_s = time.perf_counter() - start
        if done.returncode != 0:
            print(f"{PROG}: error: training {run_dir} failed (exit {done.returncode})",
                  file=sys.stderr)
            return done.returncode
        training = _training(run_dir)
        chosen = ({"chosen_on": "valid", "test_scored": scored[seed] + 1}
                  if args.split == "test" else {})
        for label, target, checkpoint in _checkpoints(run_dir, args.average, args.checkpoint):
            for penalty in args.length_penalties or [None]:
                result = {"name": args.name, "seed": seed, "checkpoint": label,
                          "beam_size": args.beam_size, "split": args.split, **chosen,
                          "train_s": train_s, **training,
                          **_evaluate(target, checkpoint, args, penalty),
                          "train_args": train_args}
                rows.setdefault((label, result["length_penalty"]), []).append(result)
                with reported_write(results_file, "--out-dir"):
                    line = record(results_file, result)
                print(line, flush=True)
    _summarize(results_file, rows, args, train_args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` (what follows `--` goes to `seq2seq train`) and runs the recipe; a
    `UserError` prints one line and gives 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    train_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, train_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    parser.set_defaults(train_args=train_args)
    return run_cli(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
