"""Training (knows no task): config, LR schedules by name, label-smoothed loss, pickle-free checkpoints, state
persistence (resume, best-N averaging) and the one training loop."""

from posenc.training.checkpoint import (
    Checkpoint,
    average_checkpoints,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_model,
    save_average,
    save_checkpoint,
)
from posenc.training.config import TrainConfig
from posenc.training.loss import LossOutput, label_smoothed_nll
from posenc.training.result import TrainResult
from posenc.training.rng import seed_everything
from posenc.training.schedule import SCHEDULES, build_scheduler, cosine_factor, noam_factor, noam_lr, noam_scheduler
from posenc.training.state import TrainState
from posenc.training.trainer import Trainer

__all__ = [
    "SCHEDULES", "Checkpoint", "LossOutput", "TrainConfig", "TrainResult", "TrainState", "Trainer",
    "average_checkpoints", "build_scheduler", "checkpoint_name", "cosine_factor", "label_smoothed_nll",
    "latest_checkpoint", "list_checkpoints",
    "load_checkpoint", "noam_factor", "noam_lr", "noam_scheduler", "restore_model",
    "save_average", "save_checkpoint", "seed_everything",
]
