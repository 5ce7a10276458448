"""The vision task (CAPE §5.1): ViTs with 2-D position methods on Fashion-MNIST, evaluated at
resolutions not seen in training. ``posenc experiment configs/vision/fashion_mnist_small.yaml``.

The package's exports are loaded on first use (PEP 562): its config and spec (what a grid's
schema and :func:`~posenc.runs.spec.discover` read) import neither the task module nor its
evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.tasks.exports import lazy_exports

if TYPE_CHECKING:
    from posenc.tasks.vision.config import VisionConfig, VisionExperimentConfig, VisionTrainConfig
    from posenc.tasks.vision.evaluate import accuracy, evaluate_resolutions, evaluate_tta, predict_logits
    from posenc.tasks.vision.task import TASK, ImageBatch, VisionTask

__all__ = [
    "TASK", "ImageBatch", "VisionConfig", "VisionExperimentConfig", "VisionTask", "VisionTrainConfig", "accuracy",
    "evaluate_resolutions", "evaluate_tta", "predict_logits",
]

#: The package's exports, by the module of the package that defines them.
MODULES = {
    "config": ("VisionConfig", "VisionExperimentConfig", "VisionTrainConfig"),
    "evaluate": ("accuracy", "evaluate_resolutions", "evaluate_tta", "predict_logits"),
    "task": ("TASK", "ImageBatch", "VisionTask"),
}


__getattr__, __dir__ = lazy_exports(__name__, MODULES)
