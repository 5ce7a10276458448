"""Abacus offset (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings", §3).

Abacus embeddings are a learned table indexed by each digit's place in its number (1-based, least
significant digit first; every other token 0): in posenc the ``learned`` input method over the
``coupled`` position ids of the length suite (``data.position_ids: coupled``). In training one
offset k ~ U{0, …, K} is added to the *digit* ids only (ids > 0): the separators keep id 0, so
they read one fixed vector, and the digits of one significance keep one shared id. The paper's
K is 100 (its public code's ``max_k`` default: 99, drawn from {0..99}; K here is inclusive).
Inference: k = 0.

Deviation switch: the reference code draws one k per *batch* (``random.randint`` in ``forward``);
``per_sequence: true`` draws one per sequence, as SHAPE does (``shape``, which also shifts id 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.positions.base import Augmentation
from posenc.positions.registry import register
from posenc.positions.shape import MAX_SHIFT


@dataclass
class AbacusParams:
    """Options of the Abacus offset (each field's meaning in the ``#:`` comment above it)."""

    #: $K$: training offsets $k \sim U\{0..K\}$ added to digit ids (> 0); reference code: 99
    max_shift: int = 99
    #: one $k$ per sequence instead of one per batch (the reference code: per batch)
    per_sequence: bool = False

    def __post_init__(self) -> None:
        value = self.max_shift
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SHIFT
        require(ok, f"abacus.max_shift must be an integer in [0, {MAX_SHIFT}], got {value!r}")


@register("augment", "abacus", AbacusParams,
          paper="McLeish et al. 2024 (Abacus)",
          what="a random offset of the digit ids (> 0) in training, none at inference")
class AbacusAugmentation(Augmentation):
    """A random offset k ~ U{0..K} of the digit ids (> 0) in training; the identity at inference.

    Args:
        params: the method's options (K, one k per batch or per sequence).
    """

    integer_valued = True  # integer ids plus an integer k
    needs_task_ids = True  # digit places (data.position_ids: coupled); over 0..L−1 it would shift all but token 0

    def __init__(self, params: AbacusParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def shift(self, positions: Tensor) -> Tensor:
        """Add one training offset k ~ U{0..K} (per batch or per row) to the digit ids.

        Args:
            positions: position ids ``(B, L)``: digit places > 0, every other token 0.

        Returns:
            ``positions`` + k on the entries > 0, ``(B, L)``.
        """
        rows = positions.shape[0] if self.params.per_sequence else 1
        k = torch.randint(0, self.params.max_shift + 1, (rows, 1), device=positions.device, dtype=positions.dtype)
        return positions + k * (positions > 0).to(positions.dtype)

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Shift the digit ids of one sequence in training; unchanged in eval.

        Args:
            positions: position ids ``(B, L)``.
            mask: ``(B, L)``, True at real tokens (not read: padding has id 0).

        Returns:
            The ids ``(B, L)``.
        """
        return self.shift(positions) if self.training else positions

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Shift the digit ids of source and target in training, each side its own k; unchanged in eval.

        Args:
            src_pos: source position ids ``(B, Ls)``.
            src_mask: ``(B, Ls)`` (not read).
            tgt_pos: target position ids ``(B, Lt)``.
            tgt_mask: ``(B, Lt)`` (not read).

        Returns:
            The source ``(B, Ls)`` and target ``(B, Lt)`` ids.
        """
        if not self.training:
            return src_pos, tgt_pos
        return self.shift(src_pos), self.shift(tgt_pos)

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """The inference transform of target ids: k = 0, the identity.

        Args:
            tgt_pos: target position ids ``(B, Lt)``.
            mask: ``(B, Lt)`` or None (not read).

        Returns:
            ``tgt_pos`` itself.
        """
        return tgt_pos
