"""`scripts/benchmarks/cider_reward.py`: the three sides timed over the same batches, the
stages of each, and the same scores as pycocoevalcap (the figures are the benchmark's, not a
test's)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "benchmarks" / "cider_reward.py"
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=ENV)


def test_quick_run_times_every_side_and_stage(tmp_path):
    out = tmp_path / "cider.json"
    result = run("--quick", "--rounds", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["corpus_images"] == 200 and report["candidates_per_batch"] == 8 * 3
    assert set(report["runs"]) == {"cider_d", "cider_d_rebuilt", "pycocoevalcap"}
    assert all(len(runs) == 3 for runs in report["runs"].values())
    assert set(report["median"]["cider_d"]) == {"ms", "tokenize", "word_ids", "ngrams",
                                                "similarity"}
    assert set(report["median"]["pycocoevalcap"]) == {"ms", "cook", "doc_freq", "cider"}
    median = report["median"]
    assert report["pycocoevalcap_over_cider_d"] == (median["pycocoevalcap"]["ms"]
                                                    / median["cider_d"]["ms"])
    assert all(abs(sum(shares.values()) - 1) < 1e-9 for shares in report["shares"].values())
    assert report["max_abs_difference"] < 1e-6
    assert "pycocoevalcap / CiderD" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--corpus", "3", "--images", "4"], "--images 4 is more than --corpus 3"),
    (["--out", "/no/such/folder/x.json"], "--out /no/such/folder/x.json"),
])
def test_bad_options_are_one_line_and_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
