"""One trainer for both families: strategies, mixed precision, checkpoints, resume, logging.

The names below are imported on first use (PEP 562), so that the TensorFlow-free modules of
this package (`common.training.prepare`'s reader, `common.training.jax_trainer`) can be
imported on a machine without TensorFlow: `import common.training.jax_trainer` runs this file
first, and an eager `from common.training.trainer import Trainer` here would load TensorFlow.
"""

from importlib import import_module

_EXPORTS = {
    "CheckpointKeeper": "common.training.checkpoints",
    "TrainingState": "common.training.checkpoints",
    "restore_model": "common.training.checkpoints",
    "TrainingConfig": "common.training.config",
    "DeviceConfigError": "common.training.distribute",
    "is_chief": "common.training.distribute",
    "make_strategy": "common.training.distribute",
    "RunDir": "common.training.run_dir",
    "Trainer": "common.training.trainer",
    "TrainingDiverged": "common.training.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
