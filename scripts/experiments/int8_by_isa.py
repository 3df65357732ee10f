"""int8 against float32 on a real test set, under two instruction-set settings (issue 45).

    python scripts/experiments/int8_by_isa.py RUN_DIR --data ../shared/data/spa-eng/test.tsv \
        --out docs/records/results/spa_eng_int8_isa.json

CTranslate2 and oneDNN (under TensorFlow's kernels) choose their kernels by the CPU's
instruction set, so int8's loss may differ from one CPU to another. The run is exported four
ways (`seq2seq export`: SavedModel float32 and int8, CTranslate2 float32 and int8, the beam
size `--beam-size` compiled in) and the run directory and each export are scored by `seq2seq
evaluate --json` (sacreBLEU on the raw references, beam `--beam-size`), each in a process of
its own, once with the machine's own kernels and once with `--other` (default
`ONEDNN_MAX_CPU_ISA=SSE41 CT2_FORCE_CPU_ISA=GENERIC`: no modern CPU's default). The JSON
holds every evaluation, CTranslate2's compute types on the CPU under each setting, and per
setting the int8 - float32 BLEU of each engine. Only the package's commands run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from common.cli import HelpFormatter, Parser, positive_int, run_cli
from common.errors import UserError
from common.outputs import check_output_file

PROG = "int8_by_isa.py"
EXPORTS = {"savedmodel_float32": [], "savedmodel_int8": ["--quantization", "int8"],
           "ctranslate2_float32": ["--format", "ctranslate2", "--quantization", "float32"],
           "ctranslate2_int8": ["--format", "ctranslate2", "--quantization", "int8"]}
DEFAULT_OTHER = "ONEDNN_MAX_CPU_ISA=SSE41 CT2_FORCE_CPU_ISA=GENERIC"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a trained Transformer translator run")
    p.add_argument("--data", required=True, help="a TSV of source<TAB>reference pairs")
    p.add_argument("--beam-size", type=positive_int, default=4)
    p.add_argument("--other", default=DEFAULT_OTHER,
                   help="the other setting, as NAME=VALUE words")
    p.add_argument("--limit", type=positive_int, help="only the first N pairs")
    p.add_argument("--out", required=True, help="the JSON to write")
    p.set_defaults(_run=run_main)
    return p


def _seq2seq(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "seq2seq", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"seq2seq {' '.join(args[:2])} failed: "
                        f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")


def _compute_types(env: dict[str, str]) -> list[str]:
    code = "import ctranslate2, json; print(json.dumps(sorted(ctranslate2.get_supported_compute_types('cpu'))))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []


def _cpu() -> dict[str, object]:
    """The CPU's model and the vector instruction sets it has (Linux's /proc/cpuinfo)."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(),
            "has": sorted(f for f in flags if f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni"))}


def run_main(args: argparse.Namespace) -> int:
    check_output_file(args.out, "--out")
    if not (Path(args.run_dir) / "config.json").is_file():
        raise UserError(f"RUN_DIR {args.run_dir}: not a run directory (no config.json)")
    if not Path(args.data).is_file():
        raise UserError(f"--data {args.data}: no such file")
    try:
        other = dict(word.split("=", 1) for word in shlex.split(args.other))
    except ValueError:
        raise UserError(f"--other {args.other!r}: expected NAME=VALUE words") from None
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    settings = {"default": base, "other": {**base, **other}}
    limit = ["--limit", str(args.limit)] if args.limit else []
    results: dict[str, dict[str, dict]] = {name: {} for name in settings}
    with tempfile.TemporaryDirectory(prefix="int8-isa-") as tmp:
        models = {"run_directory": args.run_dir}
        for name, options in EXPORTS.items():
            out = Path(tmp) / name
            _seq2seq(["export", args.run_dir, str(out), "--beam-sizes", f"1,{args.beam_size}",
                      "--beam-size", str(args.beam_size), *options], base)
            models[name] = str(out)
        for setting, env in settings.items():
            for name, path in models.items():
                json_path = Path(tmp) / f"{setting}-{name}.json"
                _seq2seq(["evaluate", path, "--data", args.data, "--beam-size",
                          str(args.beam_size), "--json", str(json_path), *limit], env)
                results[setting][name] = json.loads(json_path.read_text())
                print(f"{setting} {name}: BLEU {results[setting][name]['bleu']:.2f}", flush=True)
    loss = {setting: {family: round(found[f"{family}_int8"]["bleu"]
                                    - found[f"{family}_float32"]["bleu"], 2)
                      for family in ("savedmodel", "ctranslate2")}
            for setting, found in results.items()}
    report = {"what": __doc__.split("\n\n")[0], "command": " ".join([PROG, *sys.argv[1:]]),
              "run_dir": args.run_dir, "data": args.data, "beam_size": args.beam_size,
              "cpu": _cpu(), "settings": {"default": "the machine's own kernels", "other": other},
              "ctranslate2_compute_types": {s: _compute_types(env) for s, env in settings.items()},
              "int8_minus_float32_bleu": loss, "evaluations": results}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(loss))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
