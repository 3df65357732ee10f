"""The translators under tf.distribute: mirrored replicas and two worker processes against one
device, through the step function and through the real `seq2seq train` command line.

The distributed runs are subprocesses: logical CPUs and `TF_CONFIG` must be in place before
TensorFlow initializes its devices (and two strategies' collectives do not share a process).
The chief's checkpoint resumes in the test process, which has neither.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHECK = HERE / "distributed_check.py"
TIMEOUT = 420  # seconds for any one subprocess (the CPU is shared)


def environment(**extra: str) -> dict[str, str]:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", **extra}
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def start(args: list[str], **extra_env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=environment(**extra_env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(processes: list[subprocess.Popen]) -> list[str]:
    """The output of each process; kills them all if one fails or runs past `TIMEOUT`."""
    try:
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, output in zip(processes, outputs):
        assert p.returncode == 0, output[-3000:]
    return outputs


def train_command(out: Path, *options: str) -> list[str]:
    return ["-m", "seq2seq", "train", "--dataset", "dates", "--arch", "transformer",
            "--preset", "tiny", "--out", str(out), "--verbose", "2", *options]


def step_losses(run: Path) -> dict[int, float]:
    lines = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if r["kind"] == "step"}


def printed_losses(output: str) -> list[float]:
    """The epoch losses of the `--verbose 2` progress lines (`3/3 - 1s ... - loss: 2.9` )."""
    return [float(m) for m in re.findall(r"\bloss: ([-+0-9.eE]+)", output)]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(command: Callable[[int], list[str]], count: int = 2
                  ) -> list[subprocess.Popen]:
    """`count` processes of one `MultiWorkerMirroredStrategy` cluster on localhost; worker
    `index` runs `command(index)` with its `TF_CONFIG`."""
    workers = [f"localhost:{port}" for port in free_ports(count)]
    processes = []
    for index in range(count):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(start(command(index), TF_CONFIG=json.dumps(tf_config)))
    return processes


@pytest.mark.slow
def test_mirrored_step_matches_one_device_for_both_translators():
    (output,) = finish([start([str(CHECK), "transformer", "bahdanau"])])
    results = json.loads(output.strip().splitlines()[-1])
    for arch in ("transformer", "bahdanau"):
        result = results[arch]
        assert result["replicas"] == [1, 2], arch
        assert result["max_start_diff"] == 0.0, arch
        single, mirrored = result["losses"]
        np.testing.assert_allclose(mirrored, single, rtol=1e-5, err_msg=arch)
        assert single[0] != single[1], arch  # the second step saw updated weights
        # The step moved the weights far more than the two runs differ.
        assert result["max_weight_change"] > 1e-2, arch
        assert result["max_weight_diff"] < 1e-5, arch


@pytest.mark.slow
def test_two_workers_train_like_two_replicas_and_the_chief_checkpoint_resumes(tmp_path, capfd):
    from seq2seq.cli import main

    runs = [tmp_path / "chief", tmp_path / "worker1"]
    processes = start_workers(
        lambda index: train_command(runs[index], "--distribute", "multi-worker"))
    # The reference: one process mirroring over two logical CPUs. With one input pipeline
    # the replicas take consecutive per-replica batches, as the two workers' shards do.
    reference = tmp_path / "mirrored"
    two_cpus = tmp_path / "two_cpus.json"  # logical_cpus: a config file's setting alone
    two_cpus.write_text(json.dumps({"training": {"logical_cpus": 2}}))
    processes.append(start(train_command(reference, "--distribute", "mirrored",
                                         "--config", str(two_cpus))))
    chief_output, worker_output, _ = finish(processes)

    chief = step_losses(runs[0])
    assert sorted(chief) == [1, 2, 3]
    want = step_losses(reference)
    np.testing.assert_allclose([chief[s] for s in sorted(chief)],
                               [want[s] for s in sorted(want)], rtol=1e-5)
    # Both workers ran the same collective steps and report the same epoch loss.
    assert printed_losses(chief_output) and printed_losses(chief_output) == printed_losses(
        worker_output)
    # Only the chief wrote history, checkpoints and status.
    assert json.loads((runs[0] / "status.json").read_text())["state"] == "finished"
    for name in ("history.jsonl", "status.json", "checkpoints"):
        assert not (runs[1] / name).exists(), name

    # The chief's checkpoint resumes in a single process (this one, no TF_CONFIG) for one
    # more epoch.
    assert "TF_CONFIG" not in os.environ
    capfd.readouterr()
    assert main(train_command(runs[0], "--resume", "--epochs", "2")[2:]) == 0
    output = "".join(capfd.readouterr())
    assert "Resuming from" in output
    resumed = step_losses(runs[0])
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    assert all(resumed[s] == chief[s] for s in chief)
    assert json.loads((runs[0] / "status.json").read_text())["state"] == "finished"
    assert np.all(np.isfinite(list(resumed.values())))
