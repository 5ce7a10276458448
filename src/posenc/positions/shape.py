"""SHAPE: shifted absolute position embedding (Kiyono et al. 2021, §2.3, Eq. 2).

Training: PE(i + k) with k ~ U{0, …, K} drawn per sequence and per step, independently for the
source and the target. Inference: the paper sets k = 0 (its §2.3).

The public SHAPE code draws k from {0, …, K−1} and adds K at inference; ``inference_offset``
(default 0, the paper) lets both be compared, and ``exclusive_max`` draws from {0, …, K−1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import Augmentation
from posenc.positions.registry import register

#: Largest shift: positions stay exact integers in float32 (2^24).
MAX_SHIFT = 2**24


@dataclass
class ShapeParams:
    """Options of SHAPE (each field's meaning in the ``#:`` comment above it)."""

    #: $K \ge 0$ (paper §3.1: 500; the paper chose 40 for EXTRAPOLATE on validation BLEU)
    max_shift: int = 500
    #: constant added to eval positions of both sides (paper: 0)
    inference_offset: int = 0
    #: draw $k$ from $\{0, \dots, K-1\}$ instead of $\{0, \dots, K\}$
    exclusive_max: bool = False

    def __post_init__(self) -> None:
        for name in ("max_shift", "inference_offset"):  # integers, exact as float32 positions (K < 2^24)
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SHIFT
            require(ok, f"shape.{name} must be an integer in [0, {MAX_SHIFT}], got {value!r}")
        require(not (self.exclusive_max and self.max_shift == 0), "shape.exclusive_max needs max_shift >= 1")


@register("augment", "shape", ShapeParams,
          paper="Kiyono et al. 2021 (SHAPE)", what="a random offset per sequence in training, none at inference")
class ShapeAugmentation(Augmentation):
    """SHAPE: a random integer shift k per sequence in training; ``inference_offset`` (0) in eval.

    Args:
        params: the method's options.
    """

    integer_valued = True  # an integer shift k (§2.3)

    def __init__(self, params: ShapeParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def sample_offsets(self, batch: int, sides: int, like: Tensor) -> Tensor:
        """The shifts k, uniform over {0..K} (or {0..K−1}), per sequence and side.

        One on-device draw for all sides (no host sync; integers are exact in float32 for K < 2^24).

        Args:
            batch: sequences B.
            sides: independent draws per sequence (2 for a source/target pair).
            like: a tensor whose device and dtype the shifts take.

        Returns:
            The shifts ``(B, sides)``.
        """
        high = self.params.max_shift + (0 if self.params.exclusive_max else 1)
        return torch.randint(0, high, (batch, sides), device=like.device, dtype=like.dtype)

    def _eval(self, positions: Tensor) -> Tensor:
        offset = self.params.inference_offset
        return positions + offset if offset else positions

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Shift each sequence by its own k in training; by ``inference_offset`` in eval.

        Args:
            positions: float positions ``(B, L)``.
            mask: ``(B, L)`` (not read: the shift is the same at every token).

        Returns:
            The shifted positions ``(B, L)``.
        """
        if not self.training:
            return self._eval(positions)
        return positions + self.sample_offsets(positions.shape[0], 1, positions)

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Shift source and target by independent k in training; by ``inference_offset`` in eval.

        Args:
            src_pos: float source positions ``(B, Ls)``.
            src_mask: ``(B, Ls)`` (not read).
            tgt_pos: float target positions ``(B, Lt)``.
            tgt_mask: ``(B, Lt)`` (not read).

        Returns:
            The source ``(B, Ls)`` and target ``(B, Lt)`` positions.
        """
        # Independent draws for source and target (paper §2.3), taken in one call.
        if not self.training:
            return self._eval(src_pos), self._eval(tgt_pos)
        k = self.sample_offsets(src_pos.shape[0], 2, src_pos)
        return src_pos + k[:, :1], tgt_pos + k[:, 1:]

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """The inference transform of target positions: + ``inference_offset``.

        Args:
            tgt_pos: float target positions ``(B, Lt)``.
            mask: ``(B, Lt)`` or None (not read).

        Returns:
            The positions ``(B, Lt)``.
        """
        return self._eval(tgt_pos)
