"""scripts/benchmark_decoding.py runs at a tiny size and finds identical tokens."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "benchmark_decoding.py"


def test_benchmark_runs_and_paths_agree(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_decoding", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "bench.json"
    status = module.main(["--layers", "1", "--hidden-dim", "8", "--heads", "2",
                          "--intermediate-dim", "16", "--vocab-size", "30", "--batch-size", "2",
                          "--source-length", "5", "--steps", "6", "--repeats", "1",
                          "--out", str(out)])
    result = json.loads(out.read_text())
    assert status == 0
    assert result["identical_tokens"] and result["all_outputs_full_length"]
    assert result["output_tokens"] == 6
    assert result["speedup"] > 0
