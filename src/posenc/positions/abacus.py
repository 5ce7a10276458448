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
    integer_valued = True  # integer ids plus an integer k
    needs_task_ids = True  # digit places (data.position_ids: coupled); over 0..L−1 it would shift all but token 0

    def __init__(self, params: AbacusParams, **_: Any) -> None:
        super().__init__()
        self.params = params

    def shift(self, positions: Tensor) -> Tensor:
        """``positions`` (B, L) + k on the entries > 0 (digits), k ~ U{0..K} per batch or per row."""
        rows = positions.shape[0] if self.params.per_sequence else 1
        k = torch.randint(0, self.params.max_shift + 1, (rows, 1), device=positions.device, dtype=positions.dtype)
        return positions + k * (positions > 0).to(positions.dtype)

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        return self.shift(positions) if self.training else positions

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        if not self.training:
            return src_pos, tgt_pos
        return self.shift(src_pos), self.shift(tgt_pos)

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        return tgt_pos
