"""Benchmark: the time to a first answer, from an export and from its run directory.

For each family (a translator run and a captioner run; trained briefly here when none is
given: the dates Transformer at `dates-demo` sizes, the shapes captioner at `demo` sizes), the
run is exported (`FAMILY export`, timed) unless `--translator-export` / `--captioner-export`
gives an export of it, then measured cold, each command a new process:

- cli: `seq2seq translate MODEL SENTENCE --beam-size K` / `captioner caption MODEL IMAGE
  --beam-size K`, MODEL the run directory and the export in turns (`_lib.benchmark.alternate`,
  the order reversed every other round), `--rounds` each: wall seconds end to end, CPU seconds
  (the command's user + system time: what it costs, whatever else the machine runs) and the
  output printed, which must be the same;
- load (where an export's time goes): in a process that imports TensorFlow and NumPy only,
  `tf.saved_model.load`, then the first and second call of each signature (the options
  signature first, as `translate`/`caption` call it), and the graph's size (nodes of the
  SavedModel's function library; of the functions each signature reaches);
- serve: `FAMILY serve EXPORT` started `--serve-rounds` times: seconds until `/v1/models/NAME`
  answers AVAILABLE (warm-up included: `assets.extra/tf_serving_warmup_requests`), then for each
  signature the first request and the median of `--requests` more (its steady state), and the
  ratio of the two.

Each figure is the median of its rounds; `ratio_wall` and `ratio_cpu` are the export's median
over the run directory's. The JSON (`--out`) records the machine and its load average
(`_lib.benchmark.device_info`), the commit, the runs and every round.

Usage:
    python scripts/benchmarks/first_answer.py --out docs/records/benchmarks/first_answer_cpu.json
    python scripts/benchmarks/first_answer.py --translator runs/dates --families translator \\
        --translator-export export/dates --rounds 3
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common.cli import (  # noqa: E402
    HelpFormatter,
    Parser,
    apply_quick,
    positive_int,
    run_cli,
)
from common.errors import UserError  # noqa: E402
from common.outputs import check_output_file, check_output_folder, reported_write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "25th of November 2026"
IMAGE = "assets/samples/shapes_2.png"  # in the repository, wherever the script is run from
#: family -> (command, its sub-command, the kind in export_info.json, the served model's name)
FAMILIES = {
    "translator": ("seq2seq", "translate", "seq2seq.translator", "translator"),
    "captioner": ("captioner", "caption", "captioner", "captioner"),
}
#: What the script trains when no run is given: brief runs at the demo sizes (`--quick`: tiny).
TRAINING = {
    "translator": ["--dataset", "dates", "--arch", "transformer", "--preset", "dates-demo",
                   "--epochs", "1", "--steps-per-epoch", "150"],
    "captioner": ["--dataset", "shapes", "--preset", "demo", "--epochs", "1",
                  "--steps-per-epoch", "60"],
}
QUICK_TRAINING = {
    "translator": ["--dataset", "dates", "--arch", "transformer", "--preset", "tiny"],
    "captioner": ["--dataset", "shapes", "--preset", "tiny"],
}
# Run in a process that imports TensorFlow and NumPy only: argv[1] the export, argv[2] a JSON
# object of signature -> inputs (lists); prints a JSON object of times and graph sizes.
PROBE = r"""
import base64, json, sys, time
t0 = time.perf_counter()
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
path, calls = sys.argv[1], json.loads(sys.argv[2])
info = json.load(open(path + "/assets.extra/export_info.json"))
for name in info.get("op_libraries", []):
    __import__(name)
imported = time.perf_counter()
model = tf.saved_model.load(path)
loaded = time.perf_counter()
out = {"import_s": imported - t0, "load_s": loaded - imported, "signatures": {}}
for name, inputs in calls.items():
    fn = model.signatures[name]
    specs = fn.structured_input_signature[1]
    args = {}
    for key, value in inputs.items():
        if specs[key].dtype == tf.string:
            value = [base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in value]
        args[key] = tf.constant(value, specs[key].dtype)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        [v.numpy() for v in fn(**args).values()]
        times.append(time.perf_counter() - start)
    out["signatures"][name] = {"first_call_s": times[0], "second_call_s": times[1]}
proto = saved_model_pb2.SavedModel()
proto.ParseFromString(open(path + "/saved_model.pb", "rb").read())
graph = proto.meta_graphs[0].graph_def
library = {f.signature.name: f for f in graph.library.function}
out["library_functions"] = len(library)
out["library_nodes"] = sum(len(f.node_def) for f in library.values())
def reached(root):
    seen, stack = set(), [root]
    while stack:
        name = stack.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        for node in library[name].node_def:
            stack.append(node.op)
            for attr in node.attr.values():
                stack.append(attr.func.name)
                stack.extend(f.name for f in attr.list.func)
    return seen
nodes = {node.name: node for node in graph.node}
for name, signature in proto.meta_graphs[0].signature_def.items():
    if name in out["signatures"]:
        ops = {t.name.split(":")[0] for t in signature.outputs.values()}
        found = set().union(*(reached(nodes[op].attr["f"].func.name) for op in ops))
        out["signatures"][name]["nodes"] = sum(len(library[f].node_def) for f in found)
print(json.dumps(out))
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="first_answer.py", description=__doc__.split("\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("--families", type=family_list, default="translator,captioner",
                   help="comma-separated families to measure: translator, captioner")
    for family in FAMILIES:
        p.add_argument(f"--{family}", metavar="RUN_DIR",
                       help=f"a {family} run directory (default: train one briefly)")
        p.add_argument(f"--{family}-export", metavar="EXPORT_DIR",
                       help="an export of that run (default: export it now)")
    p.add_argument("--work", metavar="DIR",
                   help="where trained runs and exports go (default: a temporary folder, "
                        "removed at the end)")
    p.add_argument("--beam-size", type=positive_int, default=3,
                   help="the beam size of the commands and of the options requests")
    p.add_argument("--rounds", type=positive_int, default=5,
                   help="cold command-line runs of each side (medians)")
    p.add_argument("--serve-rounds", type=positive_int, default=3,
                   help="cold starts of `serve` (medians)")
    p.add_argument("--requests", type=positive_int, default=20,
                   help="requests per signature after the first, for its steady state")
    p.add_argument("--timeout", type=positive_int, default=900,
                   help="seconds one command (or a server's start) may take")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: tiny runs, 1 round, 1 serve round of 3 requests "
                        "(options given win)")
    p.add_argument("--out", help="write the figures to this JSON file")
    p.set_defaults(_run=run, _uses_tensorflow=False)
    return p


def family_list(text: str) -> list[str]:
    """argparse type: distinct names of `FAMILIES`, comma-separated."""
    names = [part.strip() for part in text.split(",")]
    if not all(name in FAMILIES for name in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names among {', '.join(FAMILIES)}"
                                         f", got {text!r}")
    return names


def check_args(args: argparse.Namespace) -> None:
    """Applies `--quick` and checks every option and path before any work."""
    apply_quick(args, {"rounds": 1, "serve_rounds": 1, "requests": 3})
    for family, (_, _, kind, _) in FAMILIES.items():
        run_dir, export = getattr(args, family), getattr(args, f"{family}_export")
        option = f"--{family}"
        if family not in args.families:
            if run_dir or export:
                raise UserError(f"{option}: the {family} is not among --families "
                                f"{','.join(args.families)}")
            continue
        if export and not run_dir:
            raise UserError(f"{option}-export needs {option} (the run it was exported from: "
                            "the command lines compare the two)")
        if run_dir:
            check_run(run_dir, family, option)
        if export:
            check_export(export, kind, f"{option}-export")
    if args.work:
        check_output_folder(args.work, "--work")
    if args.out:
        check_output_file(args.out, "--out", result_keys=["results", "device"])


def check_run(run_dir: str, family: str, option: str) -> None:
    from common.config import load_json

    path = Path(run_dir)
    if not (path / "config.json").is_file():
        raise UserError(f"{option} {run_dir}: not a run directory (no config.json)")
    config = load_json(path / "config.json", "a run's config")
    found = config.get("family") if isinstance(config, dict) else None
    expected = FAMILIES[family][0]
    if found != expected:
        raise UserError(f"{option} {run_dir}: holds a {found!r} run; expected a {expected!r} "
                        "run")


def check_export(export: str, kind: str, option: str) -> None:
    from common.export.savedmodel import require_kind

    try:
        require_kind(export, kind, f"an export of kind {kind!r}")
    except UserError as error:
        raise UserError(f"{option} {error}") from None


# -- running commands ---------------------------------------------------------------------


def command(family: str, *args: str) -> list[str]:
    """`python -m seq2seq ...` / `python -m captioner ...` with this interpreter."""
    return [sys.executable, "-m", FAMILIES[family][0], *args]


def timed(argv: list[str], timeout: float, what: str | None = None) -> dict:
    """Runs `argv` to its end: its wall and CPU (user + system) seconds and its output.

    Raises:
        UserError: the command failed or ran past `timeout` (named `what`, by default its
            first words; with its last lines of stderr).
    """
    what = what or " ".join(argv[2:5])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} ran past {timeout} s (--timeout)") from None
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-2:])[-300:]
        raise UserError(f"{what} failed with status {done.returncode}: {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stdout": done.stdout}


def prepare(family: str, args: argparse.Namespace, work: Path) -> dict:
    """The family's run (trained now unless given) and export (made now unless given)."""
    facts: dict = {}
    run_dir = getattr(args, family)
    if run_dir is None:
        run_dir = str(work / family)
        options = (QUICK_TRAINING if args.quick else TRAINING)[family]
        print(f"training a {family}: {' '.join(options)}", flush=True)
        facts["trained"] = timed(command(family, "train", *options, "--out", run_dir,
                                         "--verbose", "0"), args.timeout)["wall_s"]
        facts["training"] = options
    export = getattr(args, f"{family}_export")
    if export is None:
        export = str(work / f"{family}-export")
        done = timed(command(family, "export", run_dir, export, "--overwrite"), args.timeout)
        facts.update(export_wall_s=done["wall_s"], export_cpu_s=done["cpu_s"])
    facts.update(run_dir=str(run_dir), export=str(export),
                 exported_here=getattr(args, f"{family}_export") is None)
    return facts


def cli_rounds(family: str, facts: dict, args: argparse.Namespace, subject: str) -> dict:
    """The two sides' cold command lines in turns: wall and CPU seconds, outputs."""
    from _lib.benchmark import alternate

    name = FAMILIES[family][1]
    seen: dict[str, list[dict]] = {"run_dir": [], "export": []}

    def measure(side: str) -> float:
        model = facts["run_dir"] if side == "run_dir" else facts["export"]
        done = timed(command(family, name, model, subject, "--beam-size", str(args.beam_size)),
                     args.timeout)
        seen[side].append(done)
        print(f"  {family} {name} {side}: {done['wall_s']:.1f} s wall, {done['cpu_s']:.1f} s "
              "CPU", flush=True)
        return done["wall_s"]

    alternate({side: (lambda side=side: measure(side)) for side in seen}, args.rounds)
    return summarize_cli(seen)


def summarize_cli(seen: dict[str, list[dict]]) -> dict:
    """Medians of each side's rounds, the export's over the run directory's, and whether
    every run printed the same output."""
    out: dict = {}
    for side, rounds in seen.items():
        walls, cpus = [r["wall_s"] for r in rounds], [r["cpu_s"] for r in rounds]
        out[side] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
                     "rounds_wall_s": walls, "rounds_cpu_s": cpus}
    outputs = {r["stdout"] for rounds in seen.values() for r in rounds}
    out["ratio_wall"] = out["export"]["wall_s"] / out["run_dir"]["wall_s"]
    out["ratio_cpu"] = out["export"]["cpu_s"] / out["run_dir"]["cpu_s"]
    out["same_output"] = len(outputs) == 1
    out["output"] = sorted(outputs)[0].strip() if outputs else ""
    return out


# -- where an export's time goes ------------------------------------------------------------


def requests(family: str, info: dict, subject: str, beam_size: int) -> dict:
    """Signature -> inputs (JSON, images as `{"b64": ...}`) for one input of `subject`."""
    if family == "captioner":
        value = {"b64": base64.b64encode(Path(subject).read_bytes()).decode()}
        name = "images"
    else:
        value, name = subject, "sentences"
    options = info.get("options_signature", "serving_default")
    return {options: {name: [value], "beam_size": beam_size},
            "serving_default": {name: [value]}}


def probe(export: str, calls: dict, timeout: float) -> dict:
    """`PROBE` in a new process: load and first-call times, graph sizes."""
    info = json.loads((Path(export) / "assets.extra" / "export_info.json").read_text())
    full = {}
    for signature, inputs in calls.items():
        if signature != "serving_default":  # every input, as a TensorFlow Serving client
            inputs = {"max_length": info["max_decode_length"], "n_best": 1,
                      "no_repeat_ngram": 0, **inputs}
        full[signature] = inputs
    done = timed([sys.executable, "-c", PROBE, str(export), json.dumps(full)], timeout,
                 f"loading {export} and calling its signatures")
    return json.loads(done["stdout"].strip().splitlines()[-1])


def summarize_probes(probes: list[dict]) -> dict:
    """Medians over the probes' rounds (the graph sizes are the same in every one)."""
    first = probes[0]
    out = {key: statistics.median(p[key] for p in probes) for key in ("import_s", "load_s")}
    out.update(library_functions=first["library_functions"],
               library_nodes=first["library_nodes"], rounds=probes, signatures={})
    for name, row in first["signatures"].items():
        out["signatures"][name] = {
            "nodes": row.get("nodes"),
            **{key: statistics.median(p["signatures"][name][key] for p in probes)
               for key in ("first_call_s", "second_call_s")}}
    return out


# -- serve ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: dict | None = None, timeout: float = 60.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data), timeout=timeout) as answer:
        return json.loads(answer.read())


@contextlib.contextmanager
def server(family: str, export: str, port: int, timeout: float):
    """`FAMILY serve EXPORT` on `port`; yields `(process, start time)`; stopped on exit."""
    argv = command(family, "serve", export, "--port", str(port), "--model-name", "m")
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(argv, stdout=log, stderr=log, cwd=ROOT,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        yield process, time.perf_counter(), log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def serve_round(family: str, export: str, calls: dict, args: argparse.Namespace) -> dict:
    """One cold start of `serve`: seconds to AVAILABLE, each signature's first request and
    steady state (the median of `--requests` more)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1/models/m"
    with server(family, export, port, args.timeout) as (process, start, log):
        while True:
            if process.poll() is not None:
                log.seek(0)
                tail = " ".join(log.read().decode(errors="replace").strip().splitlines()[-2:])
                raise UserError(f"serve {export} stopped with status {process.returncode}: "
                                f"{tail[-300:]}")
            if time.perf_counter() - start > args.timeout:
                raise UserError(f"serve {export} was not AVAILABLE within {args.timeout} s "
                                "(--timeout)")
            try:
                states = http(base, timeout=5)["model_version_status"]
                if states and all(s["state"] == "AVAILABLE" for s in states):
                    break
            except (OSError, urllib.error.URLError, ValueError):
                pass  # not listening yet
            time.sleep(0.05)
        available = time.perf_counter() - start
        signatures = {}
        for name, inputs in calls.items():
            body = ({"instances": inputs[next(iter(inputs))]} if name == "serving_default"
                    else {"signature_name": name, "inputs": inputs})

            def call(body=body) -> float:
                begin = time.perf_counter()
                http(base + ":predict", body)
                return 1000 * (time.perf_counter() - begin)

            first = call()
            steady = statistics.median(call() for _ in range(args.requests))
            signatures[name] = {"first_ms": first, "steady_ms": steady, "ratio": first / steady}
    return {"available_s": available, "signatures": signatures}


def summarize_serve(rounds: list[dict]) -> dict:
    """Medians over the cold starts; `within_2x`: every signature's median ratio <= 2."""
    out: dict = {"available_s": statistics.median(r["available_s"] for r in rounds),
                 "rounds": rounds, "signatures": {}}
    for name in rounds[0]["signatures"]:
        rows = [r["signatures"][name] for r in rounds]
        out["signatures"][name] = {key: statistics.median(row[key] for row in rows)
                                   for key in ("first_ms", "steady_ms", "ratio")}
    out["within_2x"] = all(row["ratio"] <= 2 for row in out["signatures"].values())
    return out


# -- the whole ------------------------------------------------------------------------------


def measure(family: str, args: argparse.Namespace, work: Path) -> dict:
    facts = prepare(family, args, work)
    info = json.loads((Path(facts["export"]) / "assets.extra" / "export_info.json").read_text())
    subject = SENTENCE if family == "translator" else str(ROOT / IMAGE)
    calls = requests(family, info, subject, args.beam_size)
    print(f"{family}: {facts['run_dir']} and {facts['export']}", flush=True)
    cli = cli_rounds(family, facts, args, subject)
    probes = [probe(facts["export"], calls, args.timeout) for _ in range(min(args.rounds, 3))]
    serve = summarize_serve([serve_round(family, facts["export"], calls, args)
                             for _ in range(args.serve_rounds)])
    warmup = Path(facts["export"]) / "assets.extra" / "tf_serving_warmup_requests"
    return {"family": family, **facts, "beam_size": args.beam_size,
            "subject": SENTENCE if family == "translator" else IMAGE,
            "warmup_file": warmup.is_file(), "cli": cli, "load": summarize_probes(probes),
            "serve": serve}


def print_row(row: dict) -> None:
    cli, load, serve = row["cli"], row["load"], row["serve"]
    run_dir, export = cli["run_dir"], cli["export"]
    print(f"{row['family']}, end to end (median of {len(export['rounds_wall_s'])}): run "
          f"directory {run_dir['wall_s']:.1f} s ({run_dir['cpu_s']:.1f} s CPU), export "
          f"{export['wall_s']:.1f} s ({export['cpu_s']:.1f} s CPU): x{cli['ratio_wall']:.2f} "
          f"wall, x{cli['ratio_cpu']:.2f} CPU; same output: {cli['same_output']}")
    calls = ", ".join(f"{name} {r['first_call_s']:.2f} s ({r['nodes']} nodes)"
                      for name, r in load["signatures"].items())
    print(f"  load {load['load_s']:.2f} s ({load['library_nodes']} nodes); first calls: {calls}")
    firsts = ", ".join(f"{name} {r['first_ms']:.0f} ms vs {r['steady_ms']:.0f} ms "
                       f"(x{r['ratio']:.2f})" for name, r in serve["signatures"].items())
    print(f"  serve: AVAILABLE after {serve['available_s']:.1f} s; first requests: {firsts}")


def main(argv=None) -> int:
    """Parses `argv` and runs the benchmark; a bad option or path prints one line and gives 2."""
    return run_cli(build_parser(), argv)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    from _lib.benchmark import write_json

    with contextlib.ExitStack() as stack:
        if args.work:
            work = Path(args.work)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="first_answer.")))
        rows = [measure(family, args, work) for family in args.families]
    for row in rows:
        print_row(row)
    same = all(row["cli"]["same_output"] for row in rows)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT).stdout.strip()
        with reported_write(args.out, "--out"):
            path = write_json(args.out, rows, commit=commit, rounds=args.rounds,
                              serve_rounds=args.serve_rounds, requests=args.requests,
                              quick=args.quick, same_output=same)
        print(f"wrote {path}")
    if not same:
        print("error: the export and the run directory printed different outputs",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
