"""The vision task (CAPE §5.1): ViTs with 2-D position methods on Fashion-MNIST, evaluated at
resolutions not seen in training. ``posenc experiment configs/vision/fashion_mnist_small.yaml``."""

from posenc.tasks.vision.config import VisionConfig, VisionExperimentConfig, VisionTrainConfig
from posenc.tasks.vision.evaluate import accuracy, evaluate_resolutions, evaluate_tta, predict_logits
from posenc.tasks.vision.task import TASK, ImageBatch, VisionTask

__all__ = [
    "TASK", "ImageBatch", "VisionConfig", "VisionExperimentConfig", "VisionTask", "VisionTrainConfig", "accuracy",
    "evaluate_resolutions", "evaluate_tta", "predict_logits",
]
