"""One trainer for both families: strategies, mixed precision, checkpoints, resume, logging."""

from common.training.checkpoints import CheckpointKeeper, TrainingState, restore_model
from common.training.config import TrainingConfig
from common.training.distribute import DeviceConfigError, is_chief, make_strategy
from common.training.run_dir import RunDir
from common.training.trainer import Trainer, TrainingDiverged

__all__ = [
    "CheckpointKeeper",
    "DeviceConfigError",
    "RunDir",
    "Trainer",
    "TrainingConfig",
    "TrainingDiverged",
    "TrainingState",
    "is_chief",
    "make_strategy",
    "restore_model",
]
