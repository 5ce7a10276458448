"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018).

Eq. 3-4: e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z),  z_i = Σ_j α_ij (x_j W^V + a^V_ij),
with a_ij = w_{clip(j - i, k)} (Eq. 6) learned per layer and shared across heads.

Efficient split (Eq. 5): the key term q_i · a^K_{ij} is computed as q_i · w^K_r for the R = 2k+1
clipped distances r (``(B, H, Lq, R)``) and gathered to ``(B, H, Lq, Lk)``; the value term is
Σ_r (Σ_{j: r(i,j)=r} α_ij) w^V_r, i.e. attention weights summed per distance bucket and
multiplied by the table. No (Lq, Lk, Dh) tensor is ever built.

Options: ``share_tables`` uses one table for a^K and a^V (as OpenNMT-py does); ``values=False``
drops a^V (the paper's ablation, Table 3); ``keys=False`` drops a^K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition
from posenc.positions.registry import register


@dataclass
class ShawParams:
    k: int = 16
    keys: bool = True
    values: bool = True
    share_tables: bool = False

    def __post_init__(self) -> None:
        require(self.k >= 1, f"shaw.k (clipping distance) must be >= 1, got {self.k}")
        require(self.keys or self.values, "shaw needs keys or values (both are false)")


@dataclass
class RelativeContext:
    """Clipped relative distances ``index (B, 1, Lq, Lk)`` in [0, 2k], shared by all layers."""

    index: Tensor


def relative_index(q_positions: Tensor, k_positions: Tensor, k: int) -> Tensor:
    """clip(j − i, −k, k) + k from positions ``(B, Lq)``, ``(B, Lk)`` → long ``(B, 1, Lq, Lk)``."""
    rel = k_positions.round().long()[:, None, :] - q_positions.round().long()[:, :, None]
    return (rel.clamp(-k, k) + k).unsqueeze(1)


class ShawHook(AttentionHook):
    """One layer's tables w^K, w^V ∈ R^{(2k+1) × Dh}."""

    def __init__(self, head_dim: int, params: ShawParams) -> None:
        super().__init__()
        r = 2 * params.k + 1
        self.has_score, self.has_value = params.keys, params.values
        self.key_table = nn.Parameter(torch.empty(r, head_dim)) if params.keys else None
        if params.values and params.share_tables and params.keys:
            self.value_table = self.key_table
        else:
            self.value_table = nn.Parameter(torch.empty(r, head_dim)) if params.values else None
        for p in (self.key_table, self.value_table):
            if p is not None:
                nn.init.xavier_uniform_(p)

    def score(self, q: Tensor, ctx: RelativeContext) -> Tensor:
        """q ``(B, H, Lq, Dh)`` → q_i · a^K_ij ``(B, H, Lq, Lk)`` via (B, H, Lq, R) and a gather."""
        per_bucket = torch.matmul(q, self.key_table.to(q.dtype).t())  # (B, H, Lq, R)
        b, h, lq, _ = q.shape
        index = ctx.index.expand(b, h, lq, ctx.index.shape[-1])
        return torch.gather(per_bucket, -1, index)

    def value(self, attn: Tensor, ctx: RelativeContext) -> Tensor:
        """attn ``(B, H, Lq, Lk)`` → Σ_j α_ij a^V_ij ``(B, H, Lq, Dh)`` via per-bucket sums."""
        r = self.value_table.shape[0]
        index = ctx.index.expand_as(attn)
        buckets = attn.new_zeros(*attn.shape[:-1], r).scatter_add_(-1, index, attn)
        return torch.matmul(buckets, self.value_table.to(attn.dtype))


@register("attention", "shaw", ShawParams)
class ShawRelativePosition(AttentionPosition):
    """Per-layer Shaw tables for a stack; the distance index is computed once per stack."""

    def __init__(self, d_model: int, params: ShawParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.k = params.k
        self.hooks = nn.ModuleList(ShawHook(d_model // num_heads, params) for _ in range(num_layers))

    def context(self, q_positions: Tensor, k_positions: Tensor) -> RelativeContext:
        return RelativeContext(relative_index(q_positions, k_positions, self.k))

    def hook(self, layer: int) -> ShawHook:
        return self.hooks[layer]
