"""Shared pieces of the JAX tests: the worker subprocess and tiny prepared folders.

The tests run Keras on JAX in subprocesses (`worker.py`): this process keeps the TensorFlow
backend that the rest of the suite uses. They are skipped when `jax` is not installed
(`pip install -e .[jax]`). Every subprocess of a session shares one persistent compilation
cache (`jax_compilation_cache`): most of them compile the same tiny models on the same shapes,
and compiling, not training, is most of their time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("worker.py")
REPO = Path(__file__).resolve().parents[2]


def jax_missing() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return True
    return False


requires_jax = pytest.mark.skipif(jax_missing(), reason="jax is not installed (pip install -e "
                                  ".[jax]): the JAX backend tests need it")


# The session's compilation cache folder, once `jax_compilation_cache` has made it.
_COMPILATION_CACHE: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """A folder that JAX's persistent compilation cache shares between this session's
    subprocesses (`worker_env`): a program compiled once, by any of them, is read back by the
    next. It keeps executables only (keyed by the program, its shapes, devices and flags), so
    a process still traces and lowers every function, and `jax_log_compiles` still names
    each compilation it asks for."""
    _COMPILATION_CACHE[:] = [tmp_path_factory.mktemp("jax-compilation-cache")]
    yield _COMPILATION_CACHE[0]
    _COMPILATION_CACHE.clear()


def worker_env(backend: str = "jax", devices: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu",
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if _COMPILATION_CACHE:  # every program cached, however fast it compiled
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(_COMPILATION_CACHE[0]))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env.update(extra)
    return env


def start_worker(task: str, args: dict, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), task, json.dumps(args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


def finish_worker(process: subprocess.Popen, timeout: float = 300) -> dict:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    assert process.returncode == 0, f"worker failed ({process.returncode}):\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def run_worker(task: str, args: dict, backend: str = "jax", devices: int = 1,
               **extra: str) -> dict:
    """Run `worker.py TASK ARGS` and return its JSON result (an assertion error with its
    stderr when it fails)."""
    return finish_worker(start_worker(task, args, worker_env(backend, devices, **extra)))


def run_worker_batch(tasks: dict, timeout: float = 1800) -> dict:
    """`worker.py batch`: each of `tasks` ({name: [TASK, ARGS]}) in turn in one JAX process
    (Keras and JAX imported once); {name: its result, or {"crashed": its traceback}}."""
    return finish_worker(start_worker("batch", {"tasks": tasks}, worker_env()), timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TINY_TRANSFORMER = {"num_layers": 1, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32,
                    "max_length": 16, "warmup_steps": 4}


def _prepare_pairs(root: Path, lines: list[str], max_length: int, training: dict) -> Path:
    """The prepared folder of these spa-eng `lines` for the tiny Transformer."""
    from common.config import from_dict
    from seq2seq.config import RunConfig
    from seq2seq.prepared import prepare_translation

    tsv = root / "pairs.tsv"
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = from_dict(RunConfig, {
        "model": {"arch": "transformer", "transformer": TINY_TRANSFORMER,
                  "max_decode_length": max_length + 6},
        "data": {"dataset": "tsv", "data": str(tsv), "max_length": max_length},
        # Validated by the loss alone: decoding is tested in test_jax_validation.py.
        "training": {"batch_size": 8, "learning_rate": 0.01, "log_every": 5,
                     "validation_examples": 0, **training},
    })
    return prepare_translation(config, root / "prepared", verbose=0)


def _spa_eng_lines(shared_data: Path) -> list[tuple[str, list[int]]]:
    """Each training pair of spa-eng with its two lengths in words."""
    lines = (shared_data / "spa-eng" / "train.tsv").read_text(encoding="utf-8").splitlines()
    return [(line, [len(s.split()) for s in line.split("\t")]) for line in lines]


@pytest.fixture(scope="session")
def translation_folder(tmp_path_factory, shared_data) -> Path:
    """A prepared folder of 200 spa-eng pairs of at most 6 tokens (one bucket, 8 wide), for a
    tiny Transformer with dropout; batches of 8, 2 epochs."""
    short = [line for line, n in _spa_eng_lines(shared_data) if max(n) <= 4]
    return _prepare_pairs(tmp_path_factory.mktemp("translation"), short[:200], 6,
                          {"epochs": 2, "checkpoint_every": 10, "seed": 7})


@pytest.fixture(scope="session")
def two_bucket_folder(tmp_path_factory, shared_data) -> Path:
    """A prepared folder of 60 spa-eng pairs, 27 of up to 4 words and 33 of 8 to 10 (the 8- and
    16-wide buckets), for the tiny Transformer; batches of 8, one epoch (neither bucket a
    multiple of 8)."""
    pairs = _spa_eng_lines(shared_data)
    short = [line for line, n in pairs if max(n) <= 4]
    long = [line for line, n in pairs if 8 <= min(n) and max(n) <= 10]
    return _prepare_pairs(tmp_path_factory.mktemp("two-buckets"), short[:27] + long[:33], 12,
                          {"epochs": 1, "checkpoint_every": 0, "seed": 5})


@pytest.fixture(scope="session")
def caption_folder(tmp_path_factory) -> Path:
    """A prepared folder of 24 generated shapes images (16 x 16) for a tiny soft-attention
    captioner; batches of 8, validated by the loss alone."""
    from captioner.config import CaptionerRunConfig, DataConfig, DecoderConfig, EncoderConfig
    from captioner.prepared import prepare_captions

    config = CaptionerRunConfig(
        encoder=EncoderConfig(image_size=(16, 16), weights="none", filters=(4, 8)),
        decoder=DecoderConfig(embedding_dim=8, units=16, attention_units=8, dropout=0.0),
        data=DataConfig(dataset="shapes", max_length=8, options={"num_images": 24}),
        training={"batch_size": 8, "epochs": 3, "learning_rate": 0.01, "log_every": 5,
                  "seed": 3, "validation_examples": 0},
    )
    return prepare_captions(config, tmp_path_factory.mktemp("prepared") / "captions", verbose=0)


@pytest.fixture(scope="session")
def single_device_run(tmp_path_factory, translation_folder) -> dict:
    """The tiny Transformer trained 2 epochs on one JAX device: the reference of the
    distributed and resumed runs. `run_dir`, `state` (its final `.npz`) and `result`."""
    root = tmp_path_factory.mktemp("single")
    args = {"prepared": str(translation_folder), "run_dir": str(root / "run"),
            "state": str(root / "state.npz"), "training": {}}
    return {**args, "result": run_worker("train", args)}


def load_state(path: str | Path) -> dict:
    import numpy as np

    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}
