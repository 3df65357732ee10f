"""The captioner under tf.distribute: mirrored replicas and two worker processes against one
device, through the step function and through the real `captioner train` command line.

Everything runs in subprocesses: logical CPUs and `TF_CONFIG` must be in place before
TensorFlow initializes its devices.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.seq2seq.test_distributed import finish, printed_losses, start, start_workers

HERE = Path(__file__).resolve().parent
CHECK = HERE / "distributed_check.py"


def train_command(out: Path, *options: str) -> list[str]:
    # No --cache-features: it is refused for the tiny preset's small-cnn, which trains from
    # scratch, and no pretrained encoder's weights can be downloaded here.
    return ["-m", "captioner", "train", "--preset", "tiny", "--weights", "none",
            "--out", str(out), "--verbose", "2", *options]


def epoch_losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if r["kind"] == "epoch"]


@pytest.mark.slow
def test_mirrored_step_matches_one_device():
    (output,) = finish([start([str(CHECK)])])
    result = json.loads(output.strip().splitlines()[-1])
    assert result["replicas"] == [1, 2]
    assert result["max_start_diff"] == 0.0
    single, mirrored = result["losses"]
    np.testing.assert_allclose(mirrored, single, rtol=1e-5)
    assert single[0] != single[1]  # the second step saw updated weights
    # The step moved the weights far more than the two runs differ (batch norm included:
    # it is synchronized across replicas, so it sees the global batch).
    assert result["max_weight_change"] > 1e-2
    assert result["max_weight_diff"] < 1e-5


@pytest.mark.slow
def test_two_workers_match_one_process_and_the_checkpoint_resumes(tmp_path):
    run = tmp_path / "run"  # one run directory, as on a shared file system
    processes = start_workers(lambda index: train_command(run, "--distribute", "multi-worker"))
    # The reference: one process mirroring over two logical CPUs.
    reference = tmp_path / "mirrored"
    two_cpus = tmp_path / "two_cpus.json"  # logical_cpus: a config file's setting alone
    two_cpus.write_text(json.dumps({"training": {"logical_cpus": 2}}))
    processes.append(start(train_command(reference, "--distribute", "mirrored",
                                         "--config", str(two_cpus))))
    chief_output, worker_output, _ = finish(processes)

    np.testing.assert_allclose(epoch_losses(run), epoch_losses(reference), rtol=1e-5)
    # Both workers ran the same collective steps and report the same epoch loss.
    assert printed_losses(chief_output) and printed_losses(chief_output) == printed_losses(
        worker_output)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"

    # The chief's checkpoint resumes in a single process for one more epoch.
    (output,) = finish([start(train_command(run, "--resume", "--epochs", "2",
                                            "--distribute", "none"))])
    assert "Resuming from" in output
    losses = epoch_losses(run)
    assert len(losses) == 2 and np.all(np.isfinite(losses))
    assert re.search(r"trained 6 steps", output)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
