"""Summarize a `pytest --record-durations FILE` record: the slowest tests, each file's time,
the wall time and each worker's busy time.

    python -m tests.durations RECORD.jsonl [--top 25] [--json OUT.json]
                              [--write-durations tests/durations.json]

`--write-durations` writes `{"tests": {node id: seconds}}` (every phase, fixtures included),
which `tests/conftest.py` reads to run the slowest files first and to choose the fast tier.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def summarize(lines: list[dict], top: int) -> dict:
    """The summary of the records `lines` (see the module docstring)."""
    tests: dict[str, float] = defaultdict(float)
    files: dict[str, float] = defaultdict(float)
    workers: dict[str, float] = defaultdict(float)
    outcomes: dict[str, int] = defaultdict(int)
    for line in lines:
        tests[line["nodeid"]] += line["seconds"]
        files[line["nodeid"].split("::")[0]] += line["seconds"]
        workers[line.get("worker", "main")] += line["seconds"]
        if line["when"] == "call" or line["outcome"] != "passed":
            outcomes[line["outcome"]] += 1
    finished = [line["finished"] for line in lines if "finished" in line]
    first = min(finished) - lines[0]["seconds"] if finished else 0.0
    slowest = sorted(tests.items(), key=lambda kv: -kv[1])[:top]
    return {
        "tests": len(tests),
        "outcomes": dict(outcomes),
        "wall_s": round(max(finished) - first, 1) if finished else None,
        "busy_s_by_worker": {k: round(v, 1) for k, v in sorted(workers.items())},
        "slowest_tests": [{"test": k, "seconds": round(v, 2)} for k, v in slowest],
        "slowest_files": [{"file": k, "seconds": round(v, 1)}
                          for k, v in sorted(files.items(), key=lambda kv: -kv[1])[:top]],
        "files": {k: round(v, 1) for k, v in sorted(files.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", type=Path, help="the JSONL of --record-durations")
    parser.add_argument("--top", type=int, default=25, help="how many slowest tests and files")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--write-durations", type=Path,
                        help='write {"tests": {node id: seconds}} here (tests/durations.json)')
    args = parser.parse_args(argv)
    try:
        lines = [json.loads(text) for text in args.record.read_text().splitlines() if text]
    except (OSError, ValueError) as exc:
        print(f"durations: error: {args.record}: {exc}", file=sys.stderr)
        return 2
    if not lines:
        print(f"durations: error: {args.record}: no records", file=sys.stderr)
        return 2
    summary = summarize(lines, args.top)
    print(f"{summary['tests']} tests, {summary['outcomes']}, wall {summary['wall_s']} s, "
          f"busy by worker {summary['busy_s_by_worker']}")
    for row in summary["slowest_tests"]:
        print(f"{row['seconds']:9.2f}s  {row['test']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if args.write_durations:
        tests = {line["nodeid"]: 0.0 for line in lines}
        for line in lines:
            tests[line["nodeid"]] += line["seconds"]
        record = {"tests": {k: round(v, 2) for k, v in sorted(tests.items())}}
        args.write_durations.write_text(json.dumps(record, indent=0) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
