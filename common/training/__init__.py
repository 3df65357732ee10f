"""One trainer for both families: strategies, mixed precision, checkpoints, resume, logging.

Names are imported on first use (PEP 562), so that `common.training.run_dir`,
`common.training.config` and the TensorFlow-free modules (the JAX path's) can be imported
without pulling TensorFlow in through this package.
"""

import importlib

_HOMES = {
    "CheckpointKeeper": "checkpoints", "TrainingState": "checkpoints",
    "restore_model": "checkpoints",
    "TrainingConfig": "config",
    "DeviceConfigError": "distribute", "is_chief": "distribute", "make_strategy": "distribute",
    "RunDir": "run_dir",
    "Trainer": "trainer", "TrainingDiverged": "trainer",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'common.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"common.training.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
