"""One trainer for both families: strategies, mixed precision, checkpoints, resume, logging.

Names are imported on first use (PEP 562), so that `common.training.run_dir`,
`common.training.config` and the TensorFlow-free modules (the JAX path's) can be imported
without pulling TensorFlow in through this package.
"""

from common.lazy import lazy_getattr

_HOMES = {
    "CheckpointKeeper": "checkpoints", "TrainingState": "checkpoints",
    "restore_model": "checkpoints",
    "TrainingConfig": "config",
    "DeviceConfigError": "distribute", "is_chief": "distribute", "make_strategy": "distribute",
    "RunDir": "run_dir",
    "Trainer": "trainer", "TrainingDiverged": "loop",
}

__getattr__ = lazy_getattr(__name__, {name: f"common.training.{home}" for name, home in _HOMES.items()})

__all__ = sorted(_HOMES)
