"""Trains the tiny regressor under a multi-device strategy; run in a subprocess by
`test_distribute.py`, because the devices must be configured before TensorFlow starts.

    python distributed_check.py mirrored OUT_DIR   # 2 logical CPUs, vs the default strategy
    python distributed_check.py worker OUT_DIR     # one worker of TF_CONFIG's cluster

Prints one JSON line: the weights and losses of each run, and what the checks observed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common.errors import UserError  # noqa: E402
from common.training import (  # noqa: E402
    DeviceConfigError,
    Trainer,
    TrainingConfig,
    make_strategy,
)

HERE = Path(__file__).resolve().parent


def load_conftest():
    spec = importlib.util.spec_from_file_location("training_conftest", HERE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(run_dir, strategy, batch_size, clip_norm):
    import keras

    tiny = load_conftest()
    config = TrainingConfig(
        epochs=2, batch_size=batch_size, learning_rate=0.1, clip_norm=clip_norm,
        checkpoint_every=2, log_every=1,
    )
    trainer = Trainer(run_dir, config, tiny.TinyRegressor, strategy=strategy,
                      build_optimizer=lambda c: keras.optimizers.SGD(c.learning_rate))
    history = trainer.fit(tiny.dataset_maker(batch_size, shuffle=False), verbose=0)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "weights": [keras.ops.convert_to_numpy(w).tolist() for w in trainer.model.weights
                    if w.trainable],
        "losses": [r["loss"] for r in history],
        "abs_errors": [r["abs_error"] for r in history],
        "steps": history[-1]["step"],
        "chief": trainer.chief,
    }


def mirrored(out: Path) -> dict:
    strategy = make_strategy("mirrored", logical_cpus=2)  # before any other TensorFlow op
    result = {}
    try:
        make_strategy("mirrored", logical_cpus=3)
    except DeviceConfigError as exc:
        result["late_error"] = str(exc)
    result["same_layout_again"] = make_strategy("mirrored", 2).num_replicas_in_sync
    try:
        train(out / "odd", strategy, batch_size=7, clip_norm=None)
    except UserError as exc:
        result["odd_batch_error"] = str(exc)
    for batch_size, clip_norm in [(8, None), (12, 0.5)]:
        key = f"b{batch_size}"
        result[f"mirrored_{key}"] = train(out / f"m{key}", strategy, batch_size, clip_norm)
        result[f"single_{key}"] = train(out / f"s{key}", make_strategy("none"), batch_size,
                                        clip_norm)
    return result


def worker(out: Path) -> dict:
    strategy = make_strategy("multi-worker")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    result = {"multi_worker": train(out / "run", strategy, batch_size=8, clip_norm=0.5)}
    result["single"] = train(out / f"single{index}", make_strategy("none"), 8, 0.5)
    return result


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(mirrored(out) if mode == "mirrored" else worker(out)))
