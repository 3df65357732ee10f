"""`scripts/gpu_train_jax.py --quick` and `scripts/gpu_check_jax.sh --quick`: the GPU check runs
end to end on CPU, with TensorFlow hidden as the GPU machine has none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jax.conftest import REPO, requires_jax, worker_env

pytestmark = [requires_jax, pytest.mark.slow]


def hide_tensorflow(folder: Path) -> Path:
    """`folder/tensorflow`, a package that raises ImportError: first on PYTHONPATH, it hides
    TensorFlow as the GPU machine lacks it (as `tests/test_scripts_recipes.py` does), so keras
    and keras_hub run without it, and a process that needed it would fail here as there."""
    package = folder / "tensorflow"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        'raise ImportError("TensorFlow is hidden: the GPU machine has none")\n')
    return folder


def device_env(tmp_path, **extra: str) -> dict[str, str]:
    """`worker_env` as on the GPU machine: TensorFlow hidden (`hide_tensorflow`)."""
    hidden = hide_tensorflow(tmp_path / "without-tensorflow")
    return worker_env(PYTHONPATH=f"{hidden}{os.pathsep}{REPO}", **extra)


def run_check(tmp_path, folder, *args: str, timeout: int = 900, **env: str):
    """`scripts/gpu_check_jax.sh ARGS` on this CPU as on the GPU machine (`device_env`):
    `folder` prepared, no wheels, and what comes back under `tmp_path/out`."""
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check_jax.sh"), *args],
        env=device_env(tmp_path, OUT=str(tmp_path / "out"), PREPARED=str(folder),
                       PYTHON=sys.executable, WHEELS=str(tmp_path / "no-wheels"), **env),
        capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_quick_run_writes_the_report_and_split_weights(translation_folder, tmp_path):
    from common.training.flops import transformer_training_flops

    script = REPO / "scripts" / "gpu_train_jax.py"
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(script), "--quick", "--prepared", str(translation_folder),
         "--out", str(out), "--peak-tflops", "1e-3"],
        env=device_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "gpu_train_jax.json").read_text())
    # --quick: 2 epochs of 3 steps; the second (no compilation) is timed.
    assert report["steps"] == 6 and report["timed_epochs"] == 1 and report["timed_steps"] == 3
    assert report["platform"] == "cpu"
    # MFU = FLOPs per step (the tiny Transformer, batch 8 x 8 tokens) x steps/s / peak.
    flops = transformer_training_flops(1, 16, 32, len(
        (translation_folder / "vocab.target.txt").read_text().splitlines()), 8, 8, 8, 16)
    assert report["mfu"] == pytest.approx(
        flops * report["examples_per_s"] / 8 / 1e9, rel=1e-6)
    # The weights come back in parts; the averaged ones are the mean of the two checkpoints.
    run = out / "run"
    for key, name in (("weights", "model.weights.h5"), ("average_weights", "model.avg2.weights.h5")):
        parts = sorted(run.glob(f"{name}.part-*"))
        assert [p.name for p in parts] == report[key] and parts
        assert all(p.stat().st_size <= 15 * 2**20 for p in parts)
    assert report["averaged"] == ["ckpt-6", "ckpt-3"]
    # Two checkpoints for --average 5 (the default): those two, said, and nothing lost.
    assert "gpu_train_jax: 2 checkpoint(s) to average, not 5" in result.stderr
    for name in ("config.json", "vocab.source.txt", "vocab.target.txt"):
        assert (run / name).is_file()


def test_the_device_script_runs_end_to_end_in_its_quick_mode(translation_folder, tmp_path):
    """`scripts/gpu_check_jax.sh --quick`: both parts on CPU at tiny sizes, and what comes
    back fits the device tool's limits (at most 8 files, each under 16 MiB)."""
    import tarfile
    from importlib.metadata import version

    out = tmp_path / "out"
    # The device call's budget (560 s) is not what is tested here (see the budget test below):
    # a CPU shared with other work may take longer over these steps.
    result = run_check(tmp_path, translation_folder, "--quick", timeout=1800,
                       GPU_CHECK_BUDGET="1800")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).stat().st_size < 16 * 2**20 for f in files)
    assert {"gpu_train_jax.json", "history.jsonl", "results.tar.gz"} <= set(files)
    assert any(f.startswith("model.avg2.weights.h5.part-") for f in files)
    with tarfile.open(out / "results.tar.gz") as archive:
        names = archive.getnames()
        machine = archive.extractfile("results/machine.txt").read().decode()
        runs = {name: json.load(archive.extractfile(f"results/{name}_bf16.json"))
                for name in ("before", "closed", "paper", "paper_projections", "paper_norm",
                             "paper_sizes")}
        profiles = [json.load(archive.extractfile("results/profile_paper_norm/summary.json"))]
        assert "results/profile_paper_norm/train_step.hlo.txt" in names
    assert f"{version('jax')} {version('keras')}" in machine  # what the machine runs
    # Each step adds one lever to the one before, all with XLA's Triton matrix products off,
    # the paper's attention (no dropout on its weights) and rbg dropout bits.
    rows = [(name, r["batch_size"], r["loss"], r["activation_dropout"], r["fused_projections"],
             r["layer_norm"]) for name, run in runs.items() for r in run["results"]]
    assert rows == [("before", 16, "autodiff", 0.1, False, "keras"),
                    ("closed", 16, "logits", 0.1, False, "keras"),
                    ("paper", 16, "logits", 0.0, False, "keras"),
                    ("paper_projections", 16, "logits", 0.0, True, "keras"),
                    ("paper_projections", 32, "logits", 0.0, True, "keras"),
                    ("paper_norm", 16, "logits", 0.0, True, "closed"),
                    ("paper_norm", 32, "logits", 0.0, True, "closed"),
                    ("paper_sizes", 8, "logits", 0.0, True, "closed")]
    for run in runs.values():
        assert "--xla_gpu_enable_triton_gemm=false" in run["xla_flags"]
        assert all((r["attention_dropout"], r["dropout"], r["dropout_rng"]) == (0.0, 0.1, "rbg")
                   for r in run["results"])
        assert not any(r["fused_attention"] for r in run["results"])  # no cuDNN on a CPU
    # The same model, data and seed: the closed-form gradient trains as autodiff does.
    assert runs["closed"]["results"][0]["final_loss"] == pytest.approx(
        runs["before"]["results"][0]["final_loss"], rel=1e-2)
    for profile in profiles:
        busy = profile["device"]["busy_ms_per_step"]
        assert busy > 0 and profile["device"]["by_hlo_op"]
        by_source = profile["by_source"]["ms_per_step"]
        assert sum(by_source.values()) == pytest.approx(busy)
        assert {"dropout", "optimizer", "attention"} <= set(by_source)


@pytest.mark.parametrize("args, message", [
    (["everything"], "error: unknown argument 'everything'; expected --quick and one of all, "
                     "train, mfu, seeds"),
    (["mfu", "--fast"], "error: unknown argument '--fast'; expected --quick and one of all, "
                        "train, mfu, seeds"),
    (["mfu", "train"], "error: more than one part ('mfu', 'train')"),
])
def test_the_device_script_refuses_unknown_arguments(args, message):
    """Nothing is run on arguments it does not know (a `--quick` it ignored would start the
    full-size run on the device)."""
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check_jax.sh"), *args],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_the_device_script_runs_the_mfu_steps_it_is_given(translation_folder, tmp_path):
    """MFU_STEPS picks the steps of the mfu part (a device call's time is short): those named
    are reached, in the script's order, and no other. Each is then skipped (a budget of 1 s,
    as in the budget test below), so nothing is computed: that every step runs once reached is
    the end-to-end test's."""
    import tarfile

    out = tmp_path / "out"
    result = run_check(tmp_path, translation_folder, "--quick", "mfu", timeout=300,
                       MFU_STEPS="paper\n\tclosed",  # any whitespace between names
                       GPU_CHECK_BUDGET="1")
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    reached = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("==> ")
               and "skipped" in line]
    assert reached == ["closed", "paper"]
    assert result.stdout.strip().splitlines()[-1] == "failed: closed paper"
    with tarfile.open(out / "results.tar.gz") as archive:
        assert not [n for n in archive.getnames() if n.endswith("_bf16.json")]


def test_the_device_script_refuses_an_unknown_mfu_step():
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check_jax.sh"), "mfu"],
                            env=dict(worker_env(), MFU_STEPS="closed fastest"),
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: unknown MFU_STEPS step 'fastest'; expected "
                                     "before, closed, paper, paper_projections, paper_norm, "
                                     "paper_sizes")


def test_the_device_script_refuses_bad_seeds():
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check_jax.sh"), "seeds"],
                            env=dict(worker_env(), SEEDS="1 two"),
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: SEEDS must be whole numbers, got 'two'"


def test_the_seeds_part_brings_back_each_seeds_averaged_weights(translation_folder, tmp_path):
    """`gpu_check_jax.sh seeds`: the spa-eng training again for each seed of SEEDS; what
    comes back is each seed's averaged weights in parts, and its report and history in the
    archive, which say which seed trained."""
    import tarfile

    out = tmp_path / "out"
    result = run_check(tmp_path, translation_folder, "seeds", "--quick", SEEDS="1 2")  # any order
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["results.tar.gz", "seed1.model.avg2.weights.h5.part-000",
                     "seed2.model.avg2.weights.h5.part-000"]
    with tarfile.open(out / "results.tar.gz") as archive:
        reports = {s: json.load(archive.extractfile(f"results/seed{s}/gpu_train_jax.json"))
                   for s in (1, 2)}
        assert archive.extractfile("results/seed2/history.jsonl").read()
    assert [reports[s]["seed"] for s in (1, 2)] == [1, 2]
    assert reports[1]["last_loss"] != reports[2]["last_loss"]  # two seeds, two runs
    weights = [(out / f).read_bytes() for f in files[1:]]
    assert weights[0] != weights[1]


def test_the_device_script_skips_what_its_budget_leaves_no_time_for(translation_folder, tmp_path):
    """GPU_CHECK_BUDGET caps the run: steps that would start with under 30 s left are skipped
    (exit 1, naming them), and what there is still comes back."""
    import tarfile

    out = tmp_path / "out"
    result = run_check(tmp_path, translation_folder, "--quick", "mfu", timeout=300,
                       GPU_CHECK_BUDGET="1")
    assert result.returncode == 1
    assert "failed: before closed paper paper_projections paper_norm paper_sizes" in result.stdout
    with tarfile.open(out / "results.tar.gz") as archive:
        assert "results/machine.txt" in archive.getnames()


@pytest.mark.parametrize("script, args, message", [
    ("gpu_train_jax.py", ["--prepared", "/no/such/folder"],
     "gpu_train_jax.py: error: --prepared /no/such/folder: no such prepared folder"),
    ("gpu_train_jax.py", ["--prepared", "x", "--average", "0"],
     "argument --average: expected a positive integer, got 0"),
    ("benchmarks/benchmark_transformer_jax.py", ["--size", "tiny", "--batch-size", "2",
                                                 "--length", "4", "--steps", "1", "--dropout",
                                                 "1.5"],
     "benchmark_transformer_jax.py: error: --dropout must be in [0, 1), got 1.5"),
])
def test_the_gpu_scripts_refuse_bad_input_in_one_line(script, args, message, tmp_path):
    _refused(script, args, message, tmp_path)


def test_the_training_script_refuses_a_folder_of_another_model(caption_folder, tmp_path):
    _refused("gpu_train_jax.py", ["--prepared", str(caption_folder)],
             f"gpu_train_jax.py: error: {caption_folder} is not a Transformer translation "
             "folder",
             tmp_path)


def _refused(script, args, message, tmp_path):
    """`script ARGS` exits with 2 and `message` on its last line of stderr, no traceback."""
    result = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args,
                             *(["--out", str(tmp_path / "out")] if script.startswith("gpu") else [])],
                            env=worker_env(), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
