"""`scripts/benchmarks/benchmark_images.py`: both forms of each op timed, and the re-encoded
images decode to the same pixels (the figures themselves are the benchmark's, not a test's)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "benchmarks" / "benchmark_images.py"
ENV = {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=ENV)


def test_encode_times_bmp_and_png_and_both_decode_to_the_pixels(tmp_path):
    out = tmp_path / "encode.json"
    result = run("--height", "30", "--width", "41", "--rounds", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["image"] == [30, 41] and set(report["runs"]) == {"bmp", "png", "png-fast"}
    assert all(len(runs) == 3 for runs in report["runs"].values())
    median = report["median"]
    assert report["png_over_bmp"] == median["png"]["encode"] / median["bmp"]["encode"]
    assert report["png_fast_over_bmp"] == median["png-fast"]["encode"] / median["bmp"]["encode"]
    assert median["bmp"]["bytes"] == 54 + 30 * 124  # rows padded to 4 bytes, plus the header
    assert "PNG / BMP" in result.stdout


def test_load_check_times_both_checks_over_a_folder(tmp_path, shared_data):
    out = tmp_path / "check.json"
    folder = shared_data / "coco-mini" / "train2017"
    result = run("--op", "load-check", "--folder", str(folder), "--rounds", "2", "--out",
                 str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["median"]["check_image"]["images"] == 26
    assert report["check_image_over_verify"] == (report["median"]["check_image"]["per_image"]
                                                 / report["median"]["verify"]["per_image"])


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--op", "load-check", "--folder", "/no/such/folder"], "no .jpg files"),
])
def test_bad_options_are_one_line_and_exit_2(args, message):
    result = run(*args)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_growth_compares_the_bounded_reencoding_with_a_bmp(tmp_path):
    out = tmp_path / "growth.json"
    result = run("--op", "growth", "--height", "600", "--width", "800", "--rounds", "2",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    median = json.loads(out.read_text())["median"]
    assert median["bmp"]["bytes"] == 54 + 600 * 800 * 3
    assert median["bounded"]["bytes"] <= 32 * median["bounded"]["sent"] < median["bmp"]["bytes"]
    assert "bounded" in result.stdout
