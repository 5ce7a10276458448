"""Accuracy of a ViT by test resolution (CAPE §5.1 "Evaluation": test images resized) and with
resize test-time augmentation (CAPE Table 1: r and r ± 32 px at 224 px, i.e. ± 2 patches; here
± ``eval.tta_offset``).

Shape legend: B images, C channels, H/W image size, R resolution, V classes.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from posenc.data.images import ImageSet, to_model_input
from posenc.tasks.vision.config import DEFAULT_RESOLUTIONS, VisionConfig


@torch.no_grad()
def predict_logits(model: nn.Module, images: Tensor, resolution: int, batch_size: int = 500) -> Tensor:
    """uint8 images ``(B, C, H, W)`` resized to ``resolution`` → logits ``(B, V)`` (eval mode)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = torch.cat([model(to_model_input(chunk.to(device), resolution)).cpu() for chunk in images.split(batch_size)])
    model.train(was_training)
    return out


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Top-1 accuracy of logits ``(B, V)`` against labels ``(B,)``."""
    return float((logits.argmax(-1) == labels).float().mean())


def _logits(model: nn.Module, test_set: ImageSet, resolutions: Sequence[int], batch_size: int,
            cache: dict[int, Tensor] | None) -> dict[int, Tensor]:
    cache = {} if cache is None else cache
    for r in resolutions:
        if r not in cache:
            cache[r] = predict_logits(model, test_set.images, r, batch_size)
    return cache


def evaluate_resolutions(model: nn.Module, test_set: ImageSet, resolutions: Sequence[int] = DEFAULT_RESOLUTIONS,
                         batch_size: int = 500, cache: dict[int, Tensor] | None = None) -> dict[int, float]:
    """Top-1 accuracy of ``model`` on ``test_set`` resized to each resolution: ``{R: accuracy}``."""
    logits = _logits(model, test_set, resolutions, batch_size, cache)
    return {int(r): accuracy(logits[r], test_set.labels) for r in resolutions}


def evaluate_tta(model: nn.Module, test_set: ImageSet, resolutions: Sequence[int], batch_size: int = 500,
                 cache: dict[int, Tensor] | None = None) -> float:
    """Top-1 accuracy of the logits averaged over ``resolutions`` (resize TTA, CAPE Table 1).

    ``cache`` maps resolution → logits already computed for ``test_set``; missing ones are added.
    """
    logits = _logits(model, test_set, resolutions, batch_size, cache)
    return accuracy(torch.stack([logits[r] for r in resolutions]).mean(0), test_set.labels)


def tta_resolutions(cfg: VisionConfig) -> list[int]:
    """r − offset, r, r + offset around the training resolution r, keeping multiples of the patch."""
    r0, off, p = cfg.model.image_size, cfg.eval.tta_offset, cfg.model.patch
    return sorted({r for r in (r0 - off, r0, r0 + off) if r >= p and r % p == 0})
