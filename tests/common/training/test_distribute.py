"""Strategies by name, and distributed training against one device (in subprocesses)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.errors import UserError
from common.registry import UnknownNameError
from common.training import TrainingConfig, is_chief, make_strategy

CHECK = Path(__file__).resolve().parent / "distributed_check.py"
REPO = Path(__file__).resolve().parents[3]


def run_check(mode: str, out: Path, env: dict | None = None) -> subprocess.Popen:
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
                   **(env or {})}
    return subprocess.Popen(
        [sys.executable, str(CHECK), mode, str(out)], cwd=REPO, env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def result_of(process: subprocess.Popen, timeout: float = 300) -> dict:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def assert_same_training(got: dict, want: dict) -> None:
    for a, b in zip(got["weights"], want["weights"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-5)
    np.testing.assert_allclose(got["abs_errors"], want["abs_errors"], rtol=1e-5)
    assert got["steps"] == want["steps"]


def test_unknown_strategy_lists_the_choices():
    with pytest.raises(UnknownNameError, match="none, mirrored, multi-worker, auto"):
        make_strategy("horovod")


def test_multi_worker_without_tf_config_is_a_user_error(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(UserError, match="TF_CONFIG"):
        make_strategy("multi-worker")


def test_default_strategy_is_one_replica_and_chief():
    strategy = make_strategy("none")
    assert strategy.num_replicas_in_sync == 1 and is_chief(strategy)
    assert make_strategy("auto").num_replicas_in_sync == 1  # no GPUs here


@pytest.mark.parametrize(
    "field, value",
    [("epochs", 0), ("batch_size", 2.5), ("learning_rate", -1.0), ("clip_norm", 0.0),
     ("distribute", "tpu"), ("precision", "float16"), ("logical_cpus", -1), ("jit_compile", 1)],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(UserError, match=field):
        TrainingConfig(**{field: value})


def test_mirrored_over_two_logical_cpus_matches_one_device(tmp_path):
    result = result_of(run_check("mirrored", tmp_path))
    assert "already initialized 2 CPU" in result["late_error"]
    assert result["same_layout_again"] == 2
    assert "does not split over 2 replicas" in result["odd_batch_error"]
    for key in ("b8", "b12"):  # b12: the last global batch of 8 splits 6 + 2; clipped
        mirrored, single = result[f"mirrored_{key}"], result[f"single_{key}"]
        assert (mirrored["replicas"], single["replicas"]) == (2, 1)
        # SGD is linear in the gradient: had the optimizer averaged the replicas' gradients
        # instead of summing them, the weights would differ.
        assert_same_training(mirrored, single)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow
def test_two_workers_match_one_device_and_only_the_chief_writes(tmp_path):
    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(run_check("worker", tmp_path, {"TF_CONFIG": json.dumps(tf_config)}))
    try:
        results = [result_of(p) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    assert [r["multi_worker"]["chief"] for r in results] == [True, False]
    for result in results:
        assert result["multi_worker"]["replicas"] == 2
        assert_same_training(result["multi_worker"], result["single"])
    run = tmp_path / "run"
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert len(list((run / "logs").iterdir())) == 1  # the chief's event file only
    steps = [json.loads(line)["step"] for line in (run / "history.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) + 2  # + 2 epoch lines
