"""T5 relative position bias (Raffel et al. 2020, §2.1 "Position embeddings").

Shape legend: B batch, H heads, Lq/Lk query/key length, R number of buckets.

Each head adds a learned scalar ``b_h[bucket(j − i)]`` to its attention logits. Buckets: in a
bidirectional stack half of the R buckets are for j > i; within a half, distances below
``R'/2`` (R' the buckets of that half) get one bucket each, larger distances share buckets
whose ranges grow logarithmically up to ``max_distance``, and every farther distance shares the
last bucket. A causal stack only has j ≤ i and uses all R buckets for i − j. One table
``(R, H)`` is shared across the layers of a stack (as in T5). Deviation: T5 does not scale its
logits by 1/√Dh; here the bias is added to the scaled logits (the layer's convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register


@dataclass
class T5Params:
    """Options of the T5 bias (each field's meaning in the ``#:`` comment above it)."""

    #: $R$
    num_buckets: int = 32
    #: distances beyond share the last bucket
    max_distance: int = 128

    def __post_init__(self) -> None:
        require(self.num_buckets >= 4, f"t5.num_buckets must be >= 4, got {self.num_buckets}")
        require(self.max_distance > self.num_buckets // 2, "t5.max_distance must exceed num_buckets/2")


def t5_bucket(rel: Tensor, num_buckets: int, max_distance: int, causal: bool) -> Tensor:
    """The bucket of each relative distance (T5's layout: exact near, log-spaced far).

    Args:
        rel: relative distances j − i, long, any shape.
        num_buckets: R.
        max_distance: distances beyond share the last bucket.
        causal: only j ≤ i occur, so all R buckets go to i − j (else half per direction).

    Returns:
        Long bucket ids in [0, num_buckets), ``rel``'s shape.
    """
    if causal:
        offset, n, buckets = torch.zeros_like(rel), (-rel).clamp(min=0), num_buckets
    else:
        buckets = num_buckets // 2
        offset, n = (rel > 0).long() * buckets, rel.abs()
    exact = buckets // 2
    ratio = torch.log(n.double().clamp(min=1) / exact) / math.log(max_distance / exact)
    large = (exact + (ratio * (buckets - exact)).floor().long()).clamp(max=buckets - 1)
    return offset + torch.where(n < exact, n, large)


@dataclass
class T5Context(PositionContext):
    """What the hooks of a stack read.

    Args:
        bucket: long bucket ids ``(B, 1, Lq, Lk)``.
    """

    bucket: Tensor


class T5Hook(AttentionHook[T5Context]):
    """Bias only: the per-head b_h[bucket] for the scaled logits (the attention interface's bias hook).

    Args:
        table: the stack's ``(R, H)`` table (shared by its layers).
    """

    has_bias = True

    def __init__(self, table: nn.Embedding) -> None:
        super().__init__()
        self.table = table

    def bias(self, ctx: T5Context) -> Tensor:
        """The bias added to the scaled logits.

        Args:
            ctx: the stack's bucket ids.

        Returns:
            b_h[bucket], ``(B, H, Lq, Lk)``.
        """
        return self.table(ctx.bucket[:, 0]).permute(0, 3, 1, 2)

@register("attention", "t5", T5Params, augmentable_by=("randomized",),
          paper="Raffel et al. 2020", what="a learned bias per log-bucketed distance, shared across layers")
class T5RelativeBias(AttentionPosition[T5Context]):
    """One ``(R, H)`` table per stack; ``causal`` picks the bucket layout.

    Args:
        d_model: model width (not read).
        params: the method's options.
        num_layers: self-attention layers of the stack (they share the table).
        num_heads: H, the table's columns.
        causal: the stack's self-attention is causal (all buckets for i − j ≥ 0).
    """

    def __init__(self, d_model: int, params: T5Params, num_layers: int, num_heads: int, causal: bool = False,
                 **_: Any) -> None:
        super().__init__()
        self.params, self.causal = params, causal
        table = nn.Embedding(params.num_buckets, num_heads)
        nn.init.normal_(table.weight, std=0.02)
        self.shared = T5Hook(table)

    def context(self, q_positions: Tensor, k_positions: Tensor) -> T5Context:
        """The stack's buckets of round(p_j − p_i).

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            Bucket ids ``(B, 1, Lq, Lk)``.
        """
        rel = (k_positions[:, None, :] - q_positions[:, :, None]).round().long()
        bucket = t5_bucket(rel, self.params.num_buckets, self.params.max_distance, self.causal)
        return T5Context(bucket.unsqueeze(1))

    def hook(self, layer: int) -> T5Hook:
        """The hook every layer shares (one table per stack).

        Args:
            layer: the layer index (not read).

        Returns:
            The shared hook.
        """
        return self.shared

    def ct2_spec(self) -> dict[str, Any]:
        """CTranslate2's T5 bias (it buckets the encoder bidirectionally and the decoder causally, as here).

        Returns:
            ``relative_attention_bias`` True.
        """
        return {"relative_attention_bias": True}

    def ct2_layer(self, layer: int) -> dict[str, Tensor | int]:
        """The stack's one table, in every layer.

        Args:
            layer: the layer index (not read).

        Returns:
            ``relative_attention_bias``: the ``(R, H)`` table; ``relative_attention_max_distance``.
        """
        return {"relative_attention_bias": self.shared.table.weight,
                "relative_attention_max_distance": self.params.max_distance}
