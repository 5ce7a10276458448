"""The vision task (CAPE §5.1): ViTs with 2-D position methods on Fashion-MNIST, evaluated at
resolutions not seen in training. ``posenc experiment configs/vision/fashion_mnist_small.yaml``.

The package's exports are loaded on first use (PEP 562): its config and spec (what a grid's
schema and :func:`~posenc.runs.spec.discover` read) import neither the task module nor its
evaluation."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """An export of the package, its module (:data:`MODULES`) imported when first asked for.

    Args:
        name: the attribute asked for.

    Returns:
        Its value.

    Raises:
        AttributeError: ``name`` is none of the package's exports (a submodule is then imported).
    """
    for module, names in MODULES.items():
        if name in names:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
