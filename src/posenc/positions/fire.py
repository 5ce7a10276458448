"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional Interpolation
for Relative Positions Improves Long Context Transformers", §3, Eq. 3-4).

Shape legend: B batch, H heads, Lq/Lk query/key length, K distinct (distance, normaliser) pairs,
M hidden units.

Each head adds a learned function of the normalised, log-compressed distance to its (scaled) logits:

    b(i, j) = f_θ( ψ(i − j) / ψ(max(L, i)) ),   ψ(x) = log(c·x + 1),

f_θ: R → R^H an MLP (one hidden ReLU layer of M units, one output per head), c > 0 and the
threshold L learned. Dividing by ψ(max(L, i)) maps every distance of a query into [0, 1], so
longer inputs interpolate instead of extrapolating; L keeps short queries from being over-stretched.

The MLP runs over the *distinct* inputs, not over (Lq, Lk): a pair's input depends on its distance
and, only when i > L, on i, so the distinct (distance, i-if-beyond-L) pairs are found on integer
keys (no gradient), the input recomputed for each with gradients to c and L, the MLP applied to
those K values and the result gathered to ``(B, H, Lq, Lk)`` (as x-transformers' dynamic position
bias does for plain distances). Positions are rounded (integer token positions, as in the paper);
masked future keys get distance 0 (they are masked anyway). Causal only (the paper's form; a
bidirectional stack is refused). ``fire+randomized`` is the randomized variant (Ruoss et al.
positions, used with FIRE by Zhou et al. 2024 for addition).
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
class FireParams:
    """Options of FIRE (each field's meaning in the ``#:`` comment above it)."""

    #: hidden units of $f_\theta$
    hidden: int = 32
    #: $c$ at initialisation (kept $\ge 10^{-6}$)
    init_c: float = 0.1
    #: $L$ at initialisation
    init_threshold: float = 512.0
    #: one $f_\theta, c, L$ per layer; `false`: one per stack, shared by its layers like T5's table
    per_layer: bool = False

    def __post_init__(self) -> None:
        require(self.hidden >= 1, f"fire.hidden must be >= 1, got {self.hidden}")
        require(self.init_c > 0 and self.init_threshold > 0, "fire.init_c and fire.init_threshold must be > 0")


def unique_small(keys: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.unique(keys, sorted=True, return_inverse=True)`` for non-negative integer ``keys``
    with a small maximum (here ≤ (max position + 2) · (max distance + 1)): a presence mask over
    0..max and its running count instead of a sort, O(numel + max). Keys sparser than that (a
    maximum above 4 · numel, e.g. very large randomized positions) take torch.unique's sort.

    Args:
        keys: non-negative integer keys, any shape.

    Returns:
        The distinct keys, ascending ``(K,)``, and each key's index into them (``keys``' shape).
    """
    top = int(keys.max()) + 1 if keys.numel() else 0
    if not keys.numel() or top > 4 * keys.numel() + 1024:
        return torch.unique(keys, return_inverse=True)
    present = torch.zeros(top, dtype=torch.bool, device=keys.device)
    present[keys.flatten()] = True
    rank = present.cumsum(0) - 1
    return present.nonzero().squeeze(1), rank[keys]


@dataclass
class FireContext(PositionContext):
    """What the hooks of a stack read, as long integers.

    Args:
        distance: rounded distances i − j ``(B, Lq, Lk)``, ≥ 0 (future keys 0).
        query: rounded query positions ``(B, Lq)``.
    """

    distance: Tensor
    query: Tensor


class FireHook(AttentionHook[FireContext]):
    """Bias only: f_θ(ψ(i − j)/ψ(max(L, i))) per head, for the scaled logits.

    Args:
        num_heads: H, the MLP's outputs.
        params: the method's options (hidden units, c and L at initialisation).
    """

    has_bias = True

    def __init__(self, num_heads: int, params: FireParams) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, params.hidden), nn.ReLU(), nn.Linear(params.hidden, num_heads))
        self.c = nn.Parameter(torch.tensor(params.init_c))
        self.threshold = nn.Parameter(torch.tensor(params.init_threshold))

    def psi(self, x: Tensor) -> Tensor:
        """ψ(x) = log(c·x + 1) (c kept ≥ 1e-6 so that ψ stays defined).

        Args:
            x: non-negative values, any shape.

        Returns:
            ψ(x), same shape.
        """
        return torch.log1p(self.c.clamp_min(1e-6) * x)

    def inputs(self, distance: Tensor, query: Tensor) -> Tensor:
        """f_θ's input ψ(d)/ψ(max(L, i)).

        Args:
            distance: distances d, float.
            query: query positions i, same shape.

        Returns:
            The inputs, same shape, in [0, 1] for d ≤ i.
        """
        return self.psi(distance) / self.psi(torch.maximum(self.threshold, query.to(self.threshold.dtype)))

    def distinct(self, ctx: FireContext) -> tuple[Tensor, Tensor, Tensor]:
        """The distinct (distance, query-or-−1) pairs: queries at or below L share one normaliser (key −1).

        Args:
            ctx: the stack's distances and query positions.

        Returns:
            The pairs' distances ``(K,)`` and queries ``(K,)``, and each element's index into them
            ``(B, Lq, Lk)``.
        """
        with torch.no_grad():
            beyond = torch.where(ctx.query > self.threshold, ctx.query, torch.full_like(ctx.query, -1))
            stride = int(ctx.distance.max()) + 1 if ctx.distance.numel() else 1
            keys, index = unique_small((beyond[:, :, None] + 1) * stride + ctx.distance)
        return keys % stride, keys // stride - 1, index

    def bias(self, ctx: FireContext) -> Tensor:
        """The bias of the scaled logits: f_θ over the K distinct inputs, gathered.

        Args:
            ctx: the stack's distances and query positions.

        Returns:
            The bias ``(B, H, Lq, Lk)``.
        """
        distance, query, index = self.distinct(ctx)
        values = self.mlp(self.inputs(distance.float(), query.float())[:, None])  # (K, H)
        # index_select, not values[index]: its backward is an index_add (2x faster on one CPU core
        # for a (128, 41, 41) parity batch than advanced indexing's accumulate, the same sums)
        gathered = values.index_select(0, index.flatten()).view(*index.shape, values.shape[1])
        return gathered.permute(0, 3, 1, 2)


@register("attention", "fire", FireParams, augmentable_by=("randomized",), causal_only=True,
          paper="Li et al. 2023", what="a learned bias of the normalised distance, f(ψ(i−j)/ψ(max(L, i)))")
class FirePosition(AttentionPosition[FireContext]):
    """One hook per stack (or per layer with ``per_layer``).

    Args:
        d_model: model width (not read).
        params: the method's options.
        num_layers: number of self-attention layers (one hook each with ``per_layer``).
        num_heads: number of heads (the MLP's outputs).
        causal: must be True.

    Raises:
        ConfigError: in a bidirectional stack (``causal`` False).
    """

    capturable = False
    capture_blocker = "the distinct (distance, query) pairs of FireHook.distinct have a data-dependent count"
    ct2_refusal = "an MLP bias of normalised distances; CTranslate2 has no such bias"

    def __init__(self, d_model: int, params: FireParams, num_layers: int, num_heads: int, causal: bool = False,
                 **_: Any) -> None:
        super().__init__()
        require(causal,
                "fire is causal only (Li et al. 2023 define b(i, j) for j <= i); "
                "use t5 or alibi in a bidirectional stack")
        self.hooks = nn.ModuleList(FireHook(num_heads, params) for _ in range(num_layers if params.per_layer else 1))

    def context(self, q_positions: Tensor, k_positions: Tensor) -> FireContext:
        """The stack's rounded distances and query positions.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            Rounded i − j clamped at 0 ``(B, Lq, Lk)`` and rounded i ``(B, Lq)``.
        """
        query = q_positions.round().long()
        distance = (query[:, :, None] - k_positions.round().long()[:, None, :]).clamp_min(0)
        return FireContext(distance, query)

    def hook(self, layer: int) -> FireHook:
        """The hook of one layer (the stack's one hook unless ``per_layer``).

        Args:
            layer: the layer index, 0-based.

        Returns:
            That layer's hook.
        """
        return self.hooks[layer % len(self.hooks)]
