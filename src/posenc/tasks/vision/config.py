"""Typed config of the vision task (CAPE §5.1 at small scale): ViT on Fashion-MNIST.

``train`` is the shared :class:`~posenc.training.config.TrainConfig` with the ViT recipe as
defaults: AdamW (β = 0.9, 0.999, ε = 1e-8, weight decay 0.05), linear warm-up over 10 % of the
updates then cosine decay to 0, no label smoothing, epochs as the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from posenc.config import require, with_defaults
from posenc.experiments.task_grid import MethodsExperimentConfig
from posenc.models.vit import ViTConfig
from posenc.runs.spec import RunSpec
from posenc.tasks.vision.spec import SPEC
from posenc.training.config import AdamWCosineConfig

#: Default test resolutions: all divisible by the default patch size 4 (7×7 grid at 28 px).
DEFAULT_RESOLUTIONS = (16, 20, 28, 36, 44)


@dataclass
class VisionDataConfig:
    root: str | None = None  # Fashion-MNIST directory (None: $POSENC_FASHION_MNIST or Debian's)
    train_size: int | None = None  # first examples of the 60k training split (None: all)
    test_size: int | None = None  # first examples of the 10k test split
    batch_size: int = 128  # images per training batch
    valid_size: int = 0  # > 0: the last N training images (never trained on) give a validation loss

    def __post_init__(self) -> None:
        require(self.valid_size >= 0, f"data.valid_size must be >= 0, got {self.valid_size}")
        for name in ("train_size", "test_size"):
            value = getattr(self, name)
            require(value is None or value >= 1, f"data.{name} must be >= 1, got {value}")
        require(self.batch_size >= 1, f"data.batch_size must be >= 1, got {self.batch_size}")


VisionTrainConfig = with_defaults(
    AdamWCosineConfig, "VisionTrainConfig", "The shared TrainConfig with the ViT recipe as defaults.", __name__,
    max_steps=0, max_epochs=3, weight_decay=0.05, warmup_fraction=0.1, log_every=10, num_threads=2)


@dataclass
class UniViTConfig:
    """UniViT (CAPE §5.1.2): every training batch resized to a resolution drawn uniformly."""

    enabled: bool = False
    resolutions: list[int] = field(default_factory=lambda: [16, 20, 24, 28, 32, 36, 40])

    def __post_init__(self) -> None:
        require(not self.enabled or len(self.resolutions) > 0, "univit.enabled needs univit.resolutions")


@dataclass
class VisionEvalConfig:
    resolutions: list[int] = field(default_factory=lambda: list(DEFAULT_RESOLUTIONS))
    tta_offset: int = 8  # TTA averages resolutions r - offset, r, r + offset at r = model.image_size
    batch_size: int = 500

    def __post_init__(self) -> None:
        require(len(self.resolutions) > 0, "eval.resolutions must not be empty")
        require(self.tta_offset >= 0 and self.batch_size >= 1, "eval.tta_offset must be >= 0, eval.batch_size >= 1")


@dataclass
class VisionConfig:
    model: ViTConfig = field(default_factory=ViTConfig)
    data: VisionDataConfig = field(default_factory=VisionDataConfig)
    train: VisionTrainConfig = field(default_factory=VisionTrainConfig)
    univit: UniViTConfig = field(default_factory=UniViTConfig)
    eval: VisionEvalConfig = field(default_factory=VisionEvalConfig)
    out_dir: str = "runs/vision"

    #: What the task declares about its runs (runs/spec.py).
    run_spec: ClassVar[RunSpec] = SPEC

    def __post_init__(self) -> None:
        p = self.model.patch
        for where, sizes in (("univit.resolutions", self.univit.resolutions),
                             ("eval.resolutions", self.eval.resolutions)):
            bad = [r for r in sizes if r < p or r % p]
            require(not bad, f"{where}: {bad[0] if bad else ''} is not a positive multiple of model.patch {p}")


@dataclass
class VisionExperimentConfig(MethodsExperimentConfig):
    """``posenc experiment`` of ``task: vision``: methods × seeds over a ``base`` VisionConfig
    (a UniViT variant is a method with ``univit.enabled: true``)."""

    name: str = "vision"
    task: str = "vision"

    def __post_init__(self) -> None:
        require(self.task == "vision", f"task must be 'vision' for this schema, got {self.task!r}")
        super().__post_init__()
