"""Training (knows no task), cut by what it does: the loop (trainer), the step's machinery (device,
precision, compiled), optimization (optimizer and schedule), checkpoints (checkpoint, state,
averaging), stopping (patience and flatness) beside convergence, and what a run returns (result)."""

from posenc.training.averaging import average_checkpoints, save_average
from posenc.training.checkpoint import (
    Checkpoint,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_model,
    save_checkpoint,
)
from posenc.training.config import TrainConfig
from posenc.training.loss import LossOutput, label_smoothed_nll
from posenc.training.optimization import SCHEDULES, build_scheduler, cosine_factor, noam_factor, noam_lr, noam_scheduler
from posenc.training.result import TrainResult
from posenc.training.rng import seed_everything
from posenc.training.state import RunContents, TrainState
from posenc.training.trainer import Trainer

__all__ = [
    "SCHEDULES", "Checkpoint", "LossOutput", "RunContents", "TrainConfig", "TrainResult", "TrainState", "Trainer",
    "average_checkpoints", "build_scheduler", "checkpoint_name", "cosine_factor", "label_smoothed_nll",
    "latest_checkpoint", "list_checkpoints",
    "load_checkpoint", "noam_factor", "noam_lr", "noam_scheduler", "restore_model",
    "save_average", "save_checkpoint", "seed_everything",
]
