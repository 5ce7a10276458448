"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018).

Eq. 3-4: e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z),  z_i = Σ_j α_ij (x_j W^V + a^V_ij),
with a_ij = w_{clip(j - i, k)} (Eq. 6) learned per layer and shared across heads.

Efficient split (Eq. 5): the key term q_i · a^K_{ij} is computed as q_i · w^K_r for the R = 2k+1
clipped distances r (``(B, H, Lq, R)``) and gathered to ``(B, H, Lq, Lk)``; the value term is
Σ_r (Σ_{j: r(i,j)=r} α_ij) w^V_r, i.e. attention weights summed per distance bucket and
multiplied by the table. No (Lq, Lk, Dh) tensor is ever built.

Fast paths (numerically equal to the reference, see ``docs/performance.md``): when every row of the
positions tensors is consecutive (the default positions, or SHAPE's per-row shift), the index is
Toeplitz, ``index[i, j] = clip(j − i − shift, k) + k``; the context then builds it once as
``(1, 1, Lq, Lk)`` (expanded, not copied, to the batch) and records ``shift``. That enables an
optional *band* value path (``ShawHook.value_path = "band"``): the 2k−1 middle buckets are one
diagonal band of α gathered with an ``(Lq, 2k−1)`` index (O(L·k)) and the two clipped buckets are
masked row sums; on CPU it measured slower than scatter_add over the broadcast index (two extra
L² passes), so scatter stays the default. Any other positions (CAPE's scaled positions, arbitrary
inputs) use the general ``(B, 1, Lq, Lk)`` index.

On CUDA, full self-attention passes go through FlexAttention instead (``ShawHook.backend``,
``positions/shaw_flex.py``): left/right regions of constant a^K, a^V as plain block-sparse attention,
the 2k−1 band computed directly, merged by log-sum-exp; nothing (L, L) is kept for backward.

Options: ``share_tables`` uses one table for a^K and a^V (as OpenNMT-py does); ``values=False``
drops a^V (the paper's ablation, Table 3); ``keys=False`` drops a^K.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.positions import shaw_flex
from posenc.positions.base import AttentionHook, AttentionPosition, PositionContext
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
class RelativeContext(PositionContext):
    """Clipped relative distances ``index (B, 1, Lq, Lk)`` in [0, 2k], shared by all layers.

    ``shift`` is set when the index is Toeplitz (``index[b, 0, i, j] = clip(j − i − shift, k) + k``
    for every row b); ``index`` may then be a stride-0 expansion of one ``(1, 1, Lq, Lk)`` matrix.
    """

    index: Tensor
    shift: int | None = None
    k: int | None = None
    cache: dict[str, Tensor] = field(default_factory=dict, repr=False)


def relative_index(q_positions: Tensor, k_positions: Tensor, k: int) -> Tensor:
    """clip(j − i, −k, k) + k from positions ``(B, Lq)``, ``(B, Lk)`` → long ``(B, 1, Lq, Lk)``."""
    rel = (k_positions[:, None, :] - q_positions[:, :, None]).round().long()
    return (rel.clamp(-k, k) + k).unsqueeze(1)


def toeplitz_shift(q_positions: Tensor, k_positions: Tensor) -> int | None:
    """``c`` when every row is consecutive, ``q = q0_b + i``, ``k = k0_b + j``, with ``q0_b − k0_b = c``
    the same for all rows b (positions rounded as in :func:`relative_index`); else None. O(B·L)."""
    qr, kr = q_positions.round().long(), k_positions.round().long()
    if qr.numel() == 0 or kr.numel() == 0 or qr.shape[0] != kr.shape[0]:
        return None
    steps_q = torch.arange(qr.shape[1], device=qr.device)
    steps_k = torch.arange(kr.shape[1], device=kr.device)
    shift = qr[:, 0] - kr[:, 0]
    ok = ((qr - qr[:, :1]) == steps_q).all() & ((kr - kr[:, :1]) == steps_k).all() & (shift == shift[0]).all()
    return int(shift[0]) if bool(ok) else None


def toeplitz_index(batch: int, lq: int, lk: int, shift: int, k: int, device: torch.device) -> Tensor:
    """``clip(j − i − shift, k) + k`` as one ``(1, 1, Lq, Lk)`` matrix expanded (no copy) to ``(B, 1, Lq, Lk)``."""
    rel = torch.arange(lk, device=device)[None, :] - torch.arange(lq, device=device)[:, None] - shift
    return (rel.clamp(-k, k) + k)[None, None].expand(batch, 1, lq, lk)


def band_buckets(attn: Tensor, ctx: RelativeContext) -> Tensor:
    """Per-bucket sums of ``attn (B, H, Lq, Lk)`` → ``(B, H, Lq, 2k+1)`` for a Toeplitz context.

    Bucket r ∈ [1, 2k−1] holds the single key j = i + shift + r − k (a band of α, gathered with an
    ``(Lq, 2k−1)`` index); bucket 0 sums keys with j − i − shift ≤ −k and bucket 2k those ≥ k.
    """
    assert ctx.shift is not None and ctx.k is not None
    k, (lq, lk) = ctx.k, attn.shape[-2:]
    key = f"band{lq}x{lk}"
    if key not in ctx.cache:
        dev = attn.device
        i = torch.arange(lq, device=dev)[:, None]
        col = i + ctx.shift + torch.arange(1 - k, k, device=dev)[None, :]  # (Lq, 2k−1)
        rel = torch.arange(lk, device=dev)[None, :] - i - ctx.shift  # (Lq, Lk)
        ctx.cache[key] = col.clamp(0, lk - 1)
        ctx.cache[key + "valid"] = (col >= 0) & (col < lk)
        ctx.cache[key + "low"], ctx.cache[key + "high"] = rel <= -k, rel >= k
    col, valid = ctx.cache[key], ctx.cache[key + "valid"]
    mid = torch.gather(attn, -1, col.expand(*attn.shape[:-1], col.shape[-1])) * valid.to(attn.dtype)
    low = (attn * ctx.cache[key + "low"].to(attn.dtype)).sum(-1, keepdim=True)
    high = (attn * ctx.cache[key + "high"].to(attn.dtype)).sum(-1, keepdim=True)
    return torch.cat((low, mid, high), -1)


class ShawHook(AttentionHook[RelativeContext]):
    """One layer's tables w^K, w^V ∈ R^{(2k+1) × Dh}."""

    #: Value-term path: "scatter" (scatter_add over the, possibly broadcast, index; the fastest in
    #: benchmarks/shaw_paths.py on CPU, see docs/performance.md) or "band" (Toeplitz contexts only:
    #: O(L·k) gather for the 2k−1 middle buckets + two masked row sums; else falls back to scatter).
    value_path: str = "scatter"

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

    #: Full-pass self-attention backend: "auto" (FlexAttention on CUDA from ``flex_min_len`` query
    #: positions on, the layer's explicit paths elsewhere), "explicit" (always the layer's paths), or
    #: a region backend of ``shaw_flex.REGIONS`` on any device ("flex"; "dense", the reference).
    backend: str = "auto"
    #: Shortest sequence "auto" sends to FlexAttention on CUDA. Measured on an H100 (transformer-base,
    #: bf16, docs/performance.md): flex 0.41x APE at 128 tokens where the explicit path gave 0.60x,
    #: and 0.65x at 2,048 where the explicit path gave 0.041x; 512 lies between (not measured).
    flex_min_len: int = 512

    def auto_backend(self, is_cuda: bool, length: int) -> str:
        """What "auto" means for a pass of ``length`` query positions on this device."""
        return "flex" if is_cuda and length >= self.flex_min_len else "explicit"

    def region(self, q: Tensor, ctx: RelativeContext, dropout_p: float) -> shaw_flex.Region | None:
        """The region backend for this call, or None for the layer's paths: only full self-attention
        passes (Lq = Lk ≥ 2, Toeplitz positions with shift 0: training, teacher forcing) without
        attention dropout; single-query decoding steps keep the cached explicit path."""
        name = self.auto_backend(q.is_cuda, q.shape[-2]) if self.backend == "auto" else self.backend
        if name not in shaw_flex.REGIONS or dropout_p > 0:
            return None
        lq, lk = ctx.index.shape[-2:]
        return shaw_flex.REGIONS[name] if ctx.shift == 0 and lq == lk == q.shape[-2] and lq >= 2 else None

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, ctx: RelativeContext, dropout_p: float) -> Tensor | None:
        """Shaw Eq. 3-4 through :func:`shaw_flex.shaw_attention` when :meth:`region` picks one."""
        region = self.region(q, ctx, dropout_p)
        if region is None or ctx.k is None:
            return None
        return shaw_flex.shaw_attention(q, k, v, allowed, self.key_table, self.value_table, ctx.k, region, ctx.cache)

    def score(self, q: Tensor, ctx: RelativeContext) -> Tensor:
        """q ``(B, H, Lq, Dh)`` → q_i · a^K_ij ``(B, H, Lq, Lk)`` via (B, H, Lq, R) and a gather."""
        per_bucket = torch.matmul(q, self.key_table.to(q.dtype).t())  # (B, H, Lq, R)
        b, h, lq, _ = q.shape
        index = ctx.index.expand(b, h, lq, ctx.index.shape[-1])
        return torch.gather(per_bucket, -1, index)

    def value(self, attn: Tensor, ctx: RelativeContext) -> Tensor:
        """attn ``(B, H, Lq, Lk)`` → Σ_j α_ij a^V_ij ``(B, H, Lq, Dh)`` via per-bucket sums."""
        if self.value_path == "band" and ctx.shift is not None and ctx.k is not None:
            buckets = band_buckets(attn, ctx)
        else:
            r = self.value_table.shape[0]
            index = ctx.index.expand_as(attn)
            buckets = attn.new_zeros(*attn.shape[:-1], r).scatter_add_(-1, index, attn)
        return torch.matmul(buckets, self.value_table.to(attn.dtype))


@register("attention", "shaw", ShawParams, augmentable_by=("randomized",))
class ShawRelativePosition(AttentionPosition[RelativeContext]):
    """Per-layer Shaw tables for a stack; the distance index is computed once per stack."""

    def __init__(self, d_model: int, params: ShawParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.k = params.k
        self.hooks = nn.ModuleList(ShawHook(d_model // num_heads, params) for _ in range(num_layers))

    def context(self, q_positions: Tensor, k_positions: Tensor) -> RelativeContext:
        """Positions ``(B, Lq)``, ``(B, Lk)`` → context; Toeplitz fast path for consecutive rows."""
        # One query (a decoding step): the general index is as cheap and needs no host sync.
        shift = toeplitz_shift(q_positions, k_positions) if q_positions.shape[1] > 1 else None
        if shift is None:
            return RelativeContext(relative_index(q_positions, k_positions, self.k))
        b, lq, lk = q_positions.shape[0], q_positions.shape[1], k_positions.shape[1]
        return RelativeContext(toeplitz_index(b, lq, lk, shift, self.k, q_positions.device), shift, self.k)

    def hook(self, layer: int) -> ShawHook:
        return self.hooks[layer]


def set_backend(module: nn.Module, name: str) -> int:
    """Set :attr:`ShawHook.backend` of every Shaw hook inside ``module``; returns how many."""
    require(name in ("auto", "explicit", *shaw_flex.REGIONS), f"shaw backend must be auto, explicit or one of {sorted(shaw_flex.REGIONS)}, got {name!r}")
    hooks = [m for m in module.modules() if isinstance(m, ShawHook)]
    for hook in hooks:
        hook.backend = name
    return len(hooks)
