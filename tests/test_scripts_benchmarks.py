"""The benchmark and profiling scripts refuse bad input as the command lines do: one line on
stderr, `<script>.py: error: ...` naming the option or path, exit status 2, and all of it
before any work (nothing printed, nothing written): an output that cannot be written, a path
that is not there, a count or size that cannot run, options that cannot go together.

Each refusal runs the script's `main(argv)` in this process (TensorFlow is imported once, not
once per case); that a script runs from the command line, exit status and all, is
tests/test_scripts.py's (`--help` and an unknown option, as subprocesses)."""

import functools
import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.benchmarks import load_script

REPO = Path(__file__).resolve().parents[1]

# Small settings, so that a script that failed to refuse would still end soon.
GRADIENTS = ["--rows", "4", "--width", "8", "--steps", "1", "--rounds", "1"]
LATENCY = ["--quick", "--models", "bahdanau", "--beams", "2", "--batches", "1"]
TRAINING = ["--size", "tiny", "--steps", "1", "--warmup", "1", "--batch-size", "4"]
PROFILE = ["--size", "tiny", "--steps", "1", "--warmup", "1", "--attention", "fused"]
DETERMINISM = ["--rounds", "1", "--steps", "1", "--warmup", "0", "--batch-size", "1"]
IMAGES = ["--height", "8", "--width", "8", "--rounds", "1"]
JAX = ["--size", "tiny", "--batch-size", "2", "--length", "4", "--steps", "1", "--warmup", "1",
       "--precision", "float32"]

# (script, arguments, what the one line must name); paths are relative to the test's folder,
# which holds `adir/` (an empty folder), `afile.txt`, `translator_run/` and `captioner_run/`
# (a config.json each) and `broken_run/` (a config.json that is not JSON).
CASES = {
    # benchmark_gradients.py
    "gradients-out-is-a-folder": (
        "benchmark_gradients.py", [*GRADIENTS, "--out", "adir"], ["--out adir", "is a folder"]),
    "gradients-out-in-a-missing-folder": (
        "benchmark_gradients.py", [*GRADIENTS, "--out", "missing/g.json"],
        ["--out missing/g.json", "does not exist"]),
    "gradients-loss-over-one-word": (
        "benchmark_gradients.py", [*GRADIENTS, "--width", "1"], ["--width", "got 1"]),
    "gradients-label-smoothing-of-one": (
        "benchmark_gradients.py", [*GRADIENTS, "--label-smoothing", "1"],
        ["--label-smoothing", "[0, 1)"]),
    # benchmark_serving.py
    "serving-missing-run": (
        "benchmark_serving.py", ["MISSING_RUN"], ["RUN_DIR MISSING_RUN", "no such folder"]),
    "serving-config-not-json": (
        "benchmark_serving.py", ["broken_run"], ["broken_run/config.json", "not valid JSON"]),
    "serving-image-for-a-translator": (
        "benchmark_serving.py", ["translator_run", "--image", "afile.txt"],
        ["--image", "translator run"]),
    "serving-missing-image": (
        "benchmark_serving.py", ["captioner_run", "--image", "missing.png"],
        ["--image missing.png", "no such file"]),
    "serving-export-not-a-savedmodel": (
        "benchmark_serving.py", ["translator_run", "--export", "adir"],
        ["--export adir", "not a SavedModel"]),
    "serving-out-in-a-missing-folder": (
        "benchmark_serving.py", ["translator_run", "--out", "missing/s.json"],
        ["--out missing/s.json", "does not exist"]),
    "serving-zero-beam": (
        "benchmark_serving.py", ["translator_run", "--beam-sizes", "1,0"], ["--beam-sizes"]),
    # benchmark_decoding.py
    "decoding-heads-do-not-divide-the-width": (
        "benchmark_decoding.py", ["--heads", "3", "--hidden-dim", "16"],
        ["--hidden-dim 16", "--heads 3"]),
    "decoding-empty-vocabulary": (
        "benchmark_decoding.py", ["--vocab-size", "0"], ["--vocab-size", "got 0"]),
    "decoding-zero-layers": ("benchmark_decoding.py", ["--layers", "0"], ["--layers"]),
    "decoding-negative-seed": ("benchmark_decoding.py", ["--seed", "-1"], ["--seed"]),
    "decoding-out-in-a-missing-folder": (
        "benchmark_decoding.py", ["--quick", "--out", "missing/d.json"],
        ["--out missing/d.json", "does not exist"]),
    # benchmark_latency.py
    "latency-out-is-a-folder": (
        "benchmark_latency.py", [*LATENCY, "--out", "adir"], ["--out adir", "is a folder"]),
    "latency-out-in-a-missing-folder": (
        "benchmark_latency.py", [*LATENCY, "--out", "missing/l.json"],
        ["--out missing/l.json", "does not exist"]),
    "latency-zero-beam": ("benchmark_latency.py", ["--beams", "0"], ["--beams"]),
    "latency-batches-not-numbers": ("benchmark_latency.py", ["--batches", "x"], ["--batches"]),
    "latency-keras-io-too-long-before-the-table": (
        "benchmark_latency.py", ["--quick", "--models", "bahdanau,keras-io", "--beams", "2",
                                 "--batches", "1", "--tokens", "30"],
        ["at most 20 tokens", "--tokens 30"]),
    # benchmark_training.py
    "training-out-is-a-folder": (
        "benchmark_training.py", [*TRAINING, "--out", "adir"], ["--out adir", "is a folder"]),
    "training-out-in-a-missing-folder": (
        "benchmark_training.py", [*TRAINING, "--out", "missing/t.json"],
        ["--out missing/t.json", "does not exist"]),
    "training-unknown-second-size-before-the-first": (
        "benchmark_training.py", [*TRAINING, "--size", "tiny,huge"], ["unknown size 'huge'"]),
    "training-negative-warmup": (
        "benchmark_training.py", [*TRAINING, "--warmup", "-1"], ["--warmup", "got -1"]),
    "training-two-benchmarks-at-once": (
        "benchmark_training.py", ["--vs-peer", "--vs-keras-attention", "--rounds", "2"],
        ["--vs-peer", "--vs-keras-attention"]),
    "training-zero-length-vs-peer": (
        "benchmark_training.py", ["--vs-peer", "--length", "0", "--rounds", "2"],
        ["--length", "got 0"]),
    "training-missing-tsv": (
        "benchmark_training.py", [*TRAINING, "--data", "missing.tsv"],
        ["--data missing.tsv", "no such file"]),
    "training-zero-peak": (
        "benchmark_training.py", [*TRAINING, "--peak-tflops", "0"], ["--peak-tflops"]),
    # profile_translator.py
    "profile-out-is-a-folder": (
        "profile_translator.py", [*PROFILE, "--out", "adir"], ["--out adir", "is a folder"]),
    "profile-out-in-a-missing-folder": (
        "profile_translator.py", [*PROFILE, "--out", "missing/p.json"],
        ["--out missing/p.json", "does not exist"]),
    "profile-negative-warmup": (
        "profile_translator.py", [*PROFILE, "--warmup", "-1"], ["--warmup", "got -1"]),
    # benchmark_determinism.py
    "determinism-out-in-a-missing-folder": (
        "benchmark_determinism.py", [*DETERMINISM, "--out", "missing/x.json"],
        ["--out missing/x.json", "does not exist"]),
    "determinism-out-is-a-folder": (
        "benchmark_determinism.py", [*DETERMINISM, "--out", "adir"],
        ["--out adir", "is a folder"]),
    # benchmark_images.py
    "images-out-in-a-missing-folder": (
        "benchmark_images.py", [*IMAGES, "--out", "missing/i.json"],
        ["--out missing/i.json", "does not exist"]),
    # benchmark_transformer_jax.py
    "jax-out-in-a-missing-folder": (
        "benchmark_transformer_jax.py", [*JAX, "--out", "missing/j.json"],
        ["--out missing/j.json", "does not exist"]),
    "jax-profile-is-a-file": (
        "benchmark_transformer_jax.py", [*JAX, "--profile", "afile.txt"],
        ["--profile afile.txt", "is a file"]),
    "jax-hlo-without-profile": (
        "benchmark_transformer_jax.py", [*JAX, "--hlo"], ["--hlo", "--profile"]),
    "jax-zero-warmup": ("benchmark_transformer_jax.py", ["--warmup", "0"], ["--warmup"]),
    "jax-dropout-out-of-range": (
        "benchmark_transformer_jax.py", [*JAX, "--dropout", "1.5"],
        ["--dropout must be in [0, 1), got 1.5"]),
}


def _files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@functools.cache
def _script(name: str):
    """The script `NAME.py` as a module (loaded once per test process)."""
    return load_script(name.removesuffix(".py"))


def _run_script(name: str, *args: str, cwd: Path, monkeypatch, capfd,
                **env: str) -> subprocess.CompletedProcess:
    """`main(ARGS)` of `scripts/benchmarks/NAME` in this process, from `cwd`, with no Keras
    backend of the caller's (`env` sets variables for the call); what it wrote to file
    descriptors 1 and 2 as stdout and stderr."""
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capfd.readouterr()
    status = _script(name).main(list(args))
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess([name, *args], status, out, err)


def _assert_refused(done: subprocess.CompletedProcess, name: str, named: list[str]) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"{name}: error: "), lines[0]
    for text in named:
        assert text in lines[0]
    assert done.stdout == ""  # refused before the work: no row, no figure


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile.txt").write_text("text\n")
    for run, config in (("translator_run", {"family": "seq2seq"}),
                        ("captioner_run", {"family": "captioner"})):
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.json").write_text(json.dumps(config))
    (tmp_path / "broken_run").mkdir()
    (tmp_path / "broken_run" / "config.json").write_text("{not json")
    return tmp_path


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_in_one_line_before_any_work(case, folder, monkeypatch, capfd):
    name, args, named = CASES[case]
    before = _files(folder)
    done = _run_script(name, *args, cwd=folder, monkeypatch=monkeypatch, capfd=capfd)
    _assert_refused(done, name, named)
    assert _files(folder) == before  # nothing written, no folder made


def test_the_jax_benchmark_refuses_another_keras_backend(folder, monkeypatch, capfd):
    done = _run_script("benchmark_transformer_jax.py", *JAX, cwd=folder,
                       monkeypatch=monkeypatch, capfd=capfd, KERAS_BACKEND="tensorflow")
    _assert_refused(done, "benchmark_transformer_jax.py",
                    ["needs KERAS_BACKEND=jax, got tensorflow"])


def test_the_jax_benchmark_needs_no_tensorflow():
    """It is for GPU machines without TensorFlow: it neither imports TensorFlow itself nor
    has `run_cli` import it."""
    module = load_script("benchmark_transformer_jax")
    args = module.build_parser().parse_args([])
    assert args._uses_tensorflow is False and args._runs_on_jax is True


def test_the_default_image_and_samples_folder_are_the_repositorys_from_any_folder(
        tmp_path, monkeypatch):
    """benchmark_serving.py's default `--image` and make_sample_images.py's default `--out`
    are the repository's files wherever the script runs (they were relative to the working
    folder, and the samples' --help printed this machine's absolute path)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"family": "captioner"}', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    serving = load_script("benchmark_serving")
    args = serving.build_parser().parse_args([str(run), "--quick"])
    assert serving.check_args(args) == "captioner"
    assert Path(args.image) == REPO / "assets" / "samples" / "shapes_2.png"
    samples = load_script("make_sample_images")
    assert str(REPO) not in " ".join(samples.build_parser().format_help().split())
