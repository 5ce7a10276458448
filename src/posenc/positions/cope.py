"""CoPE: contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", §3, Eq. 3-5).

Shape legend: B batch, H heads, Lq/Lk query/key length, Dh head width, T = max_positions.

Positions are counted by the context, not by tokens: a gate per query/key pair decides whether key
k counts, and the position of key j seen from query i is the number of counted keys from j to i,

    g_ik = σ(q_i·k_k / √Dh),     p_ij = Σ_{k=j..i} g_ik          (Eq. 3-4)

a real number in [0, i − j + 1], clamped to T − 1. Its embedding is interpolated between the
integer embeddings e[⌊p⌋] and e[⌈p⌉] (Eq. 5), and q_i·e[p_ij] is added to the logits:

    a_ij = softmax_j( q_i·k_j/√Dh + q_i·e[p_ij] ),   q_i·e[p] = w·q_i·e[⌈p⌉] + (1 − w)·q_i·e[⌊p⌋],  w = p − ⌊p⌋,

computed as the paper's reference code does: the products q_i·e[t] for the T integer positions
``(B, H, Lq, T)`` once, then gathered at ⌊p⌋ and ⌈p⌉ (no (Lq, Lk, Dh) tensor). As in that code the
gates read the scaled logits and the position term is not scaled. It needs the keys and the
logits, so it acts through the attention interface's *logits hook* (the layer runs an explicit
softmax). One table e ``(Dh, T)`` per layer, shared by the heads. Causal only (the sum runs over
the keys up to the query; a bidirectional stack is refused). No positions tensor is read, so no
augmentation composes with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
from posenc.positions.registry import register


@dataclass
class CopeParams:
    """Options of CoPE (each field's meaning in the ``#:`` comment above it)."""

    #: $T$: contextual positions are clamped to $T - 1$
    max_positions: int = 64

    def __post_init__(self) -> None:
        require(self.max_positions >= 2, f"cope.max_positions must be >= 2, got {self.max_positions}")


def cope_positions(logits: Tensor, max_positions: int) -> Tensor:
    """Contextual positions p_ij = Σ_{k≥j} σ(logit_ik), clamped to T − 1 (Eq. 3-4; masked keys have
    gate 0, so the causal sum runs over k = j..i).

    Args:
        logits: scaled, masked logits ``(B, H, Lq, Lk)``, −inf where masked.
        max_positions: T.

    Returns:
        The positions ``(B, H, Lq, Lk)``, real numbers in [0, T − 1].
    """
    gates = torch.sigmoid(logits)
    return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=max_positions - 1)


class CopeHook(AttentionHook[PositionContext]):
    """Logits hook only: adds q_i·e[p_ij] (interpolated) to the logits.

    Args:
        head_dim: Dh, the width of one head.
        max_positions: T, the rows of the position table.
    """

    has_logits = True

    def __init__(self, head_dim: int, max_positions: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(head_dim, max_positions))  # e, as the reference code initialises it
        self.max_positions = max_positions

    def logits(self, q: Tensor, k: Tensor, logits: Tensor, ctx: PositionContext | None) -> Tensor:
        """Add the interpolated position term q_i·e[p_ij] to the logits (Eq. 5).

        Args:
            q: queries ``(B, H, Lq, Dh)``.
            k: keys ``(B, H, Lk, Dh)`` (not read: the gates come from the logits).
            logits: scaled, masked logits ``(B, H, Lq, Lk)``.
            ctx: None (CoPE has no context).

        Returns:
            logits + q_i·e[p_ij], ``(B, H, Lq, Lk)``.
        """
        pos = cope_positions(logits, self.max_positions)
        floor = pos.floor()
        weight = pos - floor
        per_int = torch.matmul(q, self.table.to(q.dtype))  # (B, H, Lq, T): q_i·e[t]
        low = per_int.gather(-1, floor.long())
        high = per_int.gather(-1, pos.ceil().long())
        return logits + high * weight + low * (1 - weight)


@register("attention", "cope", CopeParams, causal_only=True,
          paper="Golovneva et al. 2024",
          what="contextual positions: gated counts of the keys between, interpolated embeddings in the logits")
class CopePosition(AttentionPosition[PositionContext]):
    """One table per layer; no context (the positions come from the gates).

    Args:
        d_model: model width D (the tables are D / num_heads wide).
        params: the method's options.
        num_layers: number of self-attention layers (one table each).
        num_heads: number of heads.
        causal: must be True.

    Raises:
        ConfigError: in a bidirectional stack (``causal`` False).
    """

    ct2_refusal = "positions counted by gates of q and k; CTranslate2 has no such attention"

    def __init__(self, d_model: int, params: CopeParams, num_layers: int, num_heads: int, causal: bool = False,
                 **_: Any) -> None:
        super().__init__()
        require(causal,
                "cope is causal only (Golovneva et al. 2024 count the keys up to the query); "
                "not in a bidirectional stack")
        self.hooks = nn.ModuleList(CopeHook(d_model // num_heads, params.max_positions) for _ in range(num_layers))

    def context(self, q_positions: Tensor, k_positions: Tensor) -> None:
        """No context: CoPE reads no positions.

        Args:
            q_positions: float query positions ``(B, Lq)`` (not read).
            k_positions: float key positions ``(B, Lk)`` (not read).
        """
        return None

    def hook(self, layer: int) -> CopeHook:
        """The hook of one layer, with its own table.

        Args:
            layer: the layer index, 0-based.

        Returns:
            That layer's hook.
        """
        return self.hooks[layer]
