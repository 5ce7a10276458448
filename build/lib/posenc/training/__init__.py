"""Training: config, Noam schedule, label-smoothed loss, pickle-free checkpoints, the trainer."""

from posenc.training.checkpoint import (
    Checkpoint, average_checkpoints, checkpoint_name, latest_checkpoint, list_checkpoints, load_checkpoint,
    prune_checkpoints, restore_model, save_average, save_checkpoint,
)
from posenc.training.config import TrainConfig
from posenc.training.loss import LossOutput, Seq2SeqLoss, label_smoothed_nll
from posenc.training.rng import seed_everything
from posenc.training.schedule import noam_factor, noam_lr, noam_scheduler
from posenc.training.trainer import Trainer, TrainResult, TrainState, train

__all__ = [
    "Checkpoint", "LossOutput", "Seq2SeqLoss", "TrainConfig", "TrainResult", "TrainState", "Trainer",
    "average_checkpoints", "checkpoint_name", "label_smoothed_nll", "latest_checkpoint", "list_checkpoints",
    "load_checkpoint", "noam_factor", "noam_lr", "noam_scheduler", "prune_checkpoints", "restore_model",
    "save_average", "save_checkpoint", "seed_everything", "train",
]
