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
``(1, 1, Lq, Lk)`` (expanded, not copied, to the batch) and records ``shift``. Any other positions
(CAPE's scaled positions, arbitrary inputs) use the general ``(B, 1, Lq, Lk)`` index.

On CPU, full self-attention passes of ``ShawHook.banded_min_len`` (128) positions or more with
Toeplitz positions (shift 0) and no attention dropout take the *banded* path (``ShawHook.backend``
"auto"/"banded", :class:`ToeplitzShaw`): dense ops only,
no index tensor read per element (gather/scatter_add were the CPU cost), a per-row shift instead of
the left clipped bucket, the 2k−1 band as a strided view, an additive mask; equal to the paths above
up to float rounding (not bitwise: see ``docs/perf/shaw_cpu.md``).

On CUDA, full self-attention passes go through FlexAttention instead (``ShawHook.backend``,
``positions/shaw_flex.py``): left/right regions of constant a^K, a^V as plain block-sparse attention,
the 2k−1 band computed directly, merged by log-sum-exp; nothing (L, L) is kept for backward.

Options: ``share_tables`` uses one table for a^K and a^V (as OpenNMT-py does); ``values=False``
drops a^V (the paper's ablation, Table 3); ``keys=False`` drops a^K.
"""

from __future__ import annotations

import math
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
    """Options of Shaw's relative positions (each field's meaning in the ``#:`` comment above it)."""

    #: clipping distance (the paper's base model, SHAPE and Neishi & Yoshinaga use 16)
    k: int = 16
    #: use $a^K$ (the score term)
    keys: bool = True
    #: use $a^V$ (the value term); `false` is the paper's ablation (Table 3)
    values: bool = True
    #: one table for $a^K$ and $a^V$ (as OpenNMT-py does)
    share_tables: bool = False

    def __post_init__(self) -> None:
        require(self.k >= 1, f"shaw.k (clipping distance) must be >= 1, got {self.k}")
        require(self.keys or self.values, "shaw needs keys or values (both are false)")


@dataclass
class RelativeContext(PositionContext):
    """Clipped relative distances shared by all layers of a stack.

    Args:
        index: long bucket ids clip(j − i, k) + k in [0, 2k], ``(B, 1, Lq, Lk)``; for Toeplitz
            positions possibly a stride-0 expansion of one ``(1, 1, Lq, Lk)`` matrix.
        shift: set when the index is Toeplitz (``index[b, 0, i, j] = clip(j − i − shift, k) + k`` for
            every row b); None otherwise.
        k: the clipping distance, set with ``shift`` (the fast paths read it).
        cache: what the hooks build once per stack call (the banded path's masks, the region
            backends' tensors), by key.
    """

    index: Tensor
    shift: int | None = None
    k: int | None = None
    cache: dict[str, Tensor] = field(default_factory=dict, repr=False)


def relative_index(q_positions: Tensor, k_positions: Tensor, k: int) -> Tensor:
    """The general index clip(j − i, −k, k) + k of rounded positions.

    Args:
        q_positions: float query positions ``(B, Lq)``.
        k_positions: float key positions ``(B, Lk)``.
        k: the clipping distance.

    Returns:
        Long bucket ids ``(B, 1, Lq, Lk)`` in [0, 2k].
    """
    rel = (k_positions[:, None, :] - q_positions[:, :, None]).round().long()
    return (rel.clamp(-k, k) + k).unsqueeze(1)


def toeplitz_shift(q_positions: Tensor, k_positions: Tensor) -> int | None:
    """Whether the index is Toeplitz: every row consecutive, ``q = q0_b + i``, ``k = k0_b + j``, with
    ``q0_b − k0_b = c`` the same for all rows b (positions rounded as in :func:`relative_index`). O(B·L),
    one host read.

    Args:
        q_positions: float query positions ``(B, Lq)``.
        k_positions: float key positions ``(B, Lk)``.

    Returns:
        The shift ``c``, or None when the positions are not of that form.
    """
    qr, kr = q_positions.round().long(), k_positions.round().long()
    if qr.numel() == 0 or kr.numel() == 0 or qr.shape[0] != kr.shape[0]:
        return None
    steps_q = torch.arange(qr.shape[1], device=qr.device)
    steps_k = torch.arange(kr.shape[1], device=kr.device)
    shift = qr[:, 0] - kr[:, 0]
    ok = ((qr - qr[:, :1]) == steps_q).all() & ((kr - kr[:, :1]) == steps_k).all() & (shift == shift[0]).all()
    return int(shift[0]) if bool(ok) else None


def toeplitz_index(batch: int, lq: int, lk: int, shift: int, k: int, device: torch.device) -> Tensor:
    """The Toeplitz index ``clip(j − i − shift, k) + k``, built once and expanded (no copy) to the batch.

    Args:
        batch: B.
        lq: query positions Lq.
        lk: key positions Lk.
        shift: the rows' common q0 − k0 (:func:`toeplitz_shift`).
        k: the clipping distance.
        device: where the index is built.

    Returns:
        Long bucket ids ``(B, 1, Lq, Lk)``, a stride-0 expansion of one ``(1, 1, Lq, Lk)`` matrix.
    """
    rel = torch.arange(lk, device=device)[None, :] - torch.arange(lq, device=device)[:, None] - shift
    return (rel.clamp(-k, k) + k)[None, None].expand(batch, 1, lq, lk)


@dataclass
class BandMasks:
    """What :class:`ToeplitzShaw` needs of one self-attention mask: built once per stack (kept in the
    context) for Toeplitz positions with shift 0 and Lq = Lk = L.

    Args:
        k: the clipping distance.
        right: ``(L, L)``, 1.0 where j − i ≥ k (the right clipped bucket), or None when every such key
            is masked (causal attention).
        valid: ``(L, 2k−1)`` bool, marks the band entries i + d, |d| < k, inside 0 … L−1.
        bias: ``(B|1, 1, L, L)``, 0 where attention is allowed and −inf elsewhere (None when
            everything is allowed).
        scratch: two L² buffers that every layer of the stack reuses, forward and backward, for its
            transient logits, ∂α, ∂logits and products (fresh multi-MB buffers per layer cost page
            faults); kept alive with the autograd graph, like the masks.
    """

    k: int
    right: Tensor | None
    valid: Tensor
    bias: Tensor | None
    scratch: dict[int, Tensor] = field(default_factory=dict, repr=False)

    def buffer(self, slot: int, n: int, length: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """A scratch buffer, as :func:`_slack_empty` gives it (same size, dtype and device), reused
        while those match.

        Args:
            slot: which of the two buffers (0 or 1).
            n: matrices (B·H).
            length: L.
            like: a tensor whose dtype and device the buffer takes.

        Returns:
            The flat buffer (with k−1 elements of slack on each side) and its ``(n, L, L)`` middle.
        """
        size = n * length * length + 2 * (self.k - 1)
        buf = self.scratch.get(slot)
        if buf is None or buf.numel() != size or buf.dtype != like.dtype or buf.device != like.device:
            buf = self.scratch[slot] = like.new_empty(size)
        return buf, buf[self.k - 1 : self.k - 1 + n * length * length].view(n, length, length)


_GEOMETRY: dict[tuple[int, int, torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}


def _geometry(length: int, k: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(right (L, L) 0/1 float, valid (L, 2k−1) bool)``, kept for the last few shapes (a training
    run sees one per batch length; cheaper than two L² passes per stack call)."""
    key = (length, k, dtype, device)
    if key not in _GEOMETRY:
        if len(_GEOMETRY) >= 8:
            _GEOMETRY.pop(next(iter(_GEOMETRY)))
        i = torch.arange(length, device=device)
        cols = i[:, None] + torch.arange(1 - k, k, device=device)[None, :]
        _GEOMETRY[key] = ((i[None, :] - i[:, None] >= k).to(dtype), (cols >= 0) & (cols < length))
    return _GEOMETRY[key]


def band_masks(allowed: Tensor, length: int, k: int, dtype: torch.dtype) -> BandMasks:
    """The :class:`BandMasks` of one self-attention mask.

    Args:
        allowed: ``(B, 1, L, L)`` (broadcastable), True where attention is allowed.
        length: L.
        k: the clipping distance.
        dtype: dtype of the float masks (the attention's).

    Returns:
        The masks.
    """
    right, valid = _geometry(length, k, dtype, allowed.device)
    full = allowed.expand(allowed.shape[0], 1, length, length)
    bias = None
    if not bool(full.all()):
        if allowed.shape[0] > 1 and bool((full == full[:1]).all()):  # one mask for every row: no batch copy
            full = full[:1]
        bias = torch.zeros(full.shape, dtype=dtype, device=allowed.device).masked_fill_(~full, float("-inf"))
    return BandMasks(k, right if bool((full & right.bool()).any()) else None, valid, bias)


def _slack_empty(n: int, length: int, slack: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """A flat buffer of ``n·L·L + 2·slack`` elements and its contiguous ``(n, L, L)`` middle; the
    slack lets :func:`_band_views` address x[i, i + d] for |d| ≤ slack without leaving the buffer."""
    buf = like.new_empty(n * length * length + 2 * slack)
    return buf, buf[slack : slack + n * length * length].view(n, length, length)


def _band_views(buf: Tensor, n: int, length: int, k: int) -> tuple[Tensor, Tensor]:
    """Views ``(n, L−1, 2k−1)`` (rows 0 … L−2) and ``(n, 1, 2k−1)`` (row L−1) of x[i, i + d],
    d = −(k−1) … k−1, of the matrices in ``buf`` (:func:`_slack_empty` with slack k−1): the band is
    the strided view with row stride L + 1. Entries with i + d outside 0 … L−1 alias other elements
    (or the slack): readers mask them, writers add 0. Two views because row L−1 of one matrix and
    row 0 of the next share such elements; within a view none are shared when L ≥ 2k − 2."""
    w, base = 2 * k - 1, buf.storage_offset()
    head = buf.as_strided((n, length - 1, w), (length * length, length + 1, 1), base)
    tail = buf.as_strided((n, 1, w), (length * length, length + 1, 1), base + (length - 1) * (length + 1))
    return head, tail


def _band_read(buf: Tensor, n: int, length: int, masks: BandMasks) -> Tensor:
    """x[i, i + d] ``(n, L, 2k−1)`` of the matrices in ``buf``, 0 outside them."""
    head, tail = _band_views(buf, n, length, masks.k)
    return torch.where(masks.valid, torch.cat((head, tail), 1), 0.0)


def _band_add(buf: Tensor, n: int, length: int, masks: BandMasks, band: Tensor) -> None:
    """x[i, i + d] += band[i, d] in place, ``band (n, L, 2k−1)`` (entries outside the matrices ignored)."""
    head, tail = _band_views(buf, n, length, masks.k)
    band = torch.where(masks.valid, band, 0.0)  # aliased elements get + 0
    head.add_(band[:, :-1])
    tail.add_(band[:, -1:])


def _add_relative(x: Tensor, buf: Tensor, masks: BandMasks, per_bucket: Tensor) -> None:
    """x_ij += per_bucket[i, clip(j − i, k) + k] − per_bucket[i, 0] in place, ``per_bucket (n, L, 2k+1)``.

    Shifting row i by −per_bucket[i, 0] leaves the left run (j − i ≤ −k) untouched; it is free where
    x feeds a softmax (logits) or a softmax backward (∂α: a per-row constant c adds c·α_i(1 − Σ_j α_ij)
    = 0 to ∂logits). The right run is skipped where it is masked everywhere (``masks.right`` None)."""
    n, length, _ = x.shape
    base = per_bucket[..., :1]
    if masks.right is not None:
        x.addcmul_(per_bucket[..., -1:] - base, masks.right)
    _band_add(buf, n, length, masks, per_bucket[..., 1:-1] - base)


def _bucket_sums(x: Tensor, buf: Tensor, masks: BandMasks, row_sum: float, product: Tensor) -> Tensor:
    """Σ_j x_ij per clipped distance ``(n, L, 2k+1)`` for x whose rows sum to ``row_sum`` (α: 1;
    ∂logits: 0): the band read off its view, the right run as one masked row sum (0 when masked
    everywhere; the product goes to ``product``, a free ``(n, L, L)`` buffer), the left run as what
    remains of the row."""
    n, length, _ = x.shape
    band = _band_read(buf, n, length, masks)
    if masks.right is not None:
        right = torch.mul(x, masks.right, out=product).sum(-1, keepdim=True)
    else:
        right = x.new_zeros(n, length, 1)
    left = row_sum - band.sum(-1, keepdim=True) - right
    return torch.cat((left, band, right), -1)


class ToeplitzShaw(torch.autograd.Function):
    """Shaw Eq. 3-4 self-attention for Toeplitz positions (shift 0) without attention dropout, on
    dense ops only (the CPU path). The general path's bucket gather and scatter_add (index-driven,
    several times slower per element than a dense pass on CPU) become a strided O(L·k) view for the
    2k−1 band buckets, one masked pass for the right clipped bucket (none in causal attention), and
    nothing for the left one (a softmax is invariant to a per-row shift, and the left bucket sum of
    α is 1 minus the others); the mask is an additive −inf bias instead of a masked_fill. Backward
    is written out: it keeps α ``(B, H, L, L)`` only, as the general path, and no autograd graph of
    L² intermediates (no masked_fill backward, no second ∂α accumulation).

    q, k, v ``(B, H, L, Dh)`` (q is scaled by 1/√Dh here, on its way into the head-major copy), tables ``(2k+1, Dh)``
    (``key_table`` may be None) → ``(B, H, L, Dh)``. Equal to the general path up to float rounding
    (the per-row shift and the bucket sums change the order of additions)."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, key_table: Tensor | None, value_table: Tensor,
                masks: BandMasks) -> Tensor:
        """Shaw attention of one layer (called through ``ToeplitzShaw.apply``).

        Args:
            ctx: autograd's context (keeps α and the masks for backward).
            q: queries ``(B, H, L, Dh)``, unscaled.
            k: keys ``(B, H, L, Dh)``.
            v: values ``(B, H, L, Dh)``.
            key_table: w^K ``(2k+1, Dh)``, or None without the score term.
            value_table: w^V ``(2k+1, Dh)``.
            masks: the stack's band masks.

        Returns:
            The attention output ``(B, H, L, Dh)``.
        """
        b, h, length, dh = q.shape
        n, slack = b * h, masks.k - 1
        q3 = torch.mul(q, 1.0 / math.sqrt(dh), out=q.new_empty(b, h, length, dh)).view(n, length, dh)
        k3t = k.transpose(-1, -2).reshape(n, dh, length)
        v3 = v.reshape(n, length, dh)
        lbuf, logits = masks.buffer(0, n, length, q)
        torch.bmm(q3, k3t, out=logits)
        if key_table is not None:
            _add_relative(logits, lbuf, masks, torch.matmul(q3, key_table.t()))
        if masks.bias is not None:
            logits.view(b, h, length, length).add_(masks.bias)
        abuf, attn = _slack_empty(n, length, slack, q)
        torch.ops.aten._softmax.out(logits, -1, False, out=attn)
        buckets = _bucket_sums(attn, abuf, masks, 1.0, logits)  # (B·H, L, 2k+1); the logits are free
        del lbuf, logits
        out = torch.bmm(attn, v3).add_(torch.matmul(buckets, value_table))
        ctx.masks = masks
        ctx.save_for_backward(q3, k3t, v3, key_table, value_table, abuf, attn, buckets)
        return out.view(b, h, length, dh)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        """The gradients of :meth:`forward`'s inputs.

        Args:
            ctx: autograd's context, as :meth:`forward` filled it.
            grad: the gradient of the output ``(B, H, L, Dh)``.

        Returns:
            ∂q, ∂k, ∂v ``(B, H, L, Dh)``, ∂w^K (None without a key table), ∂w^V ``(2k+1, Dh)``, and
            None for the masks.
        """
        q3, k3t, v3, key_table, value_table, abuf, attn, buckets = ctx.saved_tensors
        masks: BandMasks = ctx.masks
        shape = grad.shape
        n, length, dh = q3.shape
        r = value_table.shape[0]
        g = grad.reshape(n, length, dh)
        dv = torch.bmm(attn.transpose(1, 2), g)
        d_value_table = buckets.reshape(-1, r).t().mm(g.reshape(-1, dh))
        dbuf, dattn = masks.buffer(0, n, length, g)
        torch.bmm(g, v3.transpose(1, 2), out=dattn)
        _add_relative(dattn, dbuf, masks, torch.matmul(g, value_table.t()))
        lbuf, dlogits = masks.buffer(1, n, length, g)
        torch.ops.aten._softmax_backward_data.out(dattn, attn, -1, attn.dtype, grad_input=dlogits)
        dq = torch.bmm(dlogits, k3t.transpose(1, 2))
        d_key_table = None
        if key_table is not None:
            dp = _bucket_sums(dlogits, lbuf, masks, 0.0, dattn)  # ∂/∂(q·w^K_r) per bucket; ∂α is free
            dq.add_(torch.matmul(dp, key_table))
            d_key_table = dp.reshape(-1, r).t().mm(q3.reshape(-1, dh))
        dk = torch.bmm(dlogits.transpose(1, 2), q3)
        dq.mul_(1.0 / math.sqrt(dh))  # q was scaled on the way in
        return dq.view(shape), dk.view(shape), dv.view(shape), d_key_table, d_value_table, None


class ShawHook(AttentionHook[RelativeContext]):
    """One layer's tables w^K, w^V ∈ R^{(2k+1) × Dh}.

    Args:
        head_dim: Dh, the tables' width.
        params: the method's options (k, which terms, shared tables).
    """

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
    #: positions on, "banded" on CPU from ``banded_min_len`` on, the layer's explicit paths below),
    #: "explicit" (always the layer's paths), "banded" (:class:`ToeplitzShaw` on CPU where it applies, else the layer's
    #: paths), or a region backend of ``shaw_flex.REGIONS`` on any device ("flex"; "dense", the reference).
    backend: str = "auto"
    #: Shortest sequence "auto" sends to FlexAttention on CUDA (the crossover measured in docs/performance.md).
    flex_min_len: int = 512

    #: Shortest sequence "auto" sends to the banded path on CPU (the crossover measured in
    #: docs/perf/shaw_cpu.md); below it the explicit path is as fast (and the reference itself).
    banded_min_len: int = 128

    def auto_backend(self, is_cuda: bool, length: int) -> str:
        """What "auto" means for a pass of ``length`` query positions on this device.

        Args:
            is_cuda: the pass runs on CUDA.
            length: query positions Lq.

        Returns:
            ``banded``, ``flex`` or ``explicit``.
        """
        if not is_cuda:
            return "banded" if length >= self.banded_min_len else "explicit"
        return "flex" if length >= self.flex_min_len else "explicit"

    def banded(
        self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, ctx: RelativeContext, dropout_p: float
    ) -> Tensor | None:
        """:class:`ToeplitzShaw` for full self-attention passes on CPU (Lq = Lk = L ≥ 2k − 2,
        Toeplitz positions with shift 0, fp32 without autocast, no attention dropout, a value
        table); None (the layer's paths) for anything else. The masks are built once per stack.

        Args:
            q: queries ``(B, H, L, Dh)``.
            k: keys ``(B, H, L, Dh)``.
            v: values ``(B, H, L, Dh)``.
            allowed: ``(B|1, 1, L, L)``, True where attention is allowed.
            ctx: the stack's context (its ``cache`` keeps the masks).
            dropout_p: attention dropout probability (the path needs 0).

        Returns:
            The attention output ``(B, H, L, Dh)``, or None where the path does not apply.
        """
        length, c = q.shape[-2], ctx.k
        if (c is None or ctx.shift != 0 or self.value_table is None or dropout_p > 0 or q.device.type != "cpu"
                or length < max(2, 2 * c - 2) or ctx.index.shape[-2:] != (length, length) or k.shape[-2] != length
                or torch.is_autocast_enabled("cpu") or not (q.dtype == k.dtype == v.dtype == self.value_table.dtype)):
            return None
        key = f"banded-{length}-{q.dtype}"
        if key not in ctx.cache or ctx.cache[key][0] is not allowed:
            ctx.cache[key] = (allowed, band_masks(allowed, length, c, q.dtype))
        return ToeplitzShaw.apply(q, k, v, self.key_table, self.value_table, ctx.cache[key][1])

    def region(self, q: Tensor, ctx: RelativeContext, dropout_p: float) -> shaw_flex.Region | None:
        """The region backend for this call, or None for the layer's paths: only full self-attention
        passes (Lq = Lk ≥ 2, Toeplitz positions with shift 0: training, teacher forcing) without
        attention dropout; single-query decoding steps keep the cached explicit path.

        Args:
            q: queries ``(B, H, Lq, Dh)`` (their device and length pick the backend).
            ctx: the stack's context.
            dropout_p: attention dropout probability (region backends need 0).

        Returns:
            The region backend (``shaw_flex.REGIONS``), or None.
        """
        name = self.auto_backend(q.is_cuda, q.shape[-2]) if self.backend == "auto" else self.backend
        if name not in shaw_flex.REGIONS or dropout_p > 0:
            return None
        lq, lk = ctx.index.shape[-2:]
        return shaw_flex.REGIONS[name] if ctx.shift == 0 and lq == lk == q.shape[-2] and lq >= 2 else None

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, ctx: RelativeContext, dropout_p: float
    ) -> Tensor | None:
        """Shaw Eq. 3-4 through :meth:`banded` (CPU) or :func:`shaw_flex.shaw_attention` when
        :meth:`region` picks one.

        Args:
            q: queries ``(B, H, Lq, Dh)``, unscaled.
            k: keys ``(B, H, Lk, Dh)``.
            v: values ``(B, H, Lk, Dh)``.
            allowed: ``(B|1, 1, Lq, Lk)``, True where attention is allowed.
            ctx: the stack's context.
            dropout_p: attention dropout probability.

        Returns:
            The attention output ``(B, H, Lq, Dh)``, or None: the layer's explicit paths.
        """
        if (self.auto_backend(q.is_cuda, q.shape[-2]) if self.backend == "auto" else self.backend) == "banded":
            return self.banded(q, k, v, allowed, ctx, dropout_p)
        region = self.region(q, ctx, dropout_p)
        if region is None or ctx.k is None:
            return None
        return shaw_flex.shaw_attention(q, k, v, allowed, self.key_table, self.value_table, ctx.k, region, ctx.cache)

    def score(self, q: Tensor, ctx: RelativeContext) -> Tensor:
        """The key term q_i · a^K_ij, via q · w^K per bucket ``(B, H, Lq, R)`` and a gather.

        Args:
            q: queries ``(B, H, Lq, Dh)``, unscaled.
            ctx: the stack's index.

        Returns:
            The score term ``(B, H, Lq, Lk)``.
        """
        per_bucket = torch.matmul(q, self.key_table.to(q.dtype).t())  # (B, H, Lq, R)
        b, h, lq, _ = q.shape
        index = ctx.index.expand(b, h, lq, ctx.index.shape[-1])
        return torch.gather(per_bucket, -1, index)

    def value(self, attn: Tensor, ctx: RelativeContext) -> Tensor:
        """The value term Σ_j α_ij a^V_ij, via per-bucket sums of α.

        Args:
            attn: attention weights ``(B, H, Lq, Lk)``.
            ctx: the stack's index.

        Returns:
            The value term ``(B, H, Lq, Dh)``.
        """
        r = self.value_table.shape[0]
        index = ctx.index.expand_as(attn)
        buckets = attn.new_zeros(*attn.shape[:-1], r).scatter_add_(-1, index, attn)
        return torch.matmul(buckets, self.value_table.to(attn.dtype))


@register("attention", "shaw", ShawParams, augmentable_by=("randomized",),
          paper="Shaw et al. 2018",
          what="relative position representations: learned key and value terms per clipped distance")
class ShawRelativePosition(AttentionPosition[RelativeContext]):
    """Per-layer Shaw tables for a stack; the distance index is computed once per stack.

    Args:
        d_model: model width D (the tables are D / num_heads wide).
        params: the method's options.
        num_layers: self-attention layers (one pair of tables each).
        num_heads: heads.
    """

    def __init__(self, d_model: int, params: ShawParams, num_layers: int, num_heads: int, **_: Any) -> None:
        super().__init__()
        self.k = params.k
        self.hooks = nn.ModuleList(ShawHook(d_model // num_heads, params) for _ in range(num_layers))

    def context(self, q_positions: Tensor, k_positions: Tensor) -> RelativeContext:
        """The stack's index; the Toeplitz fast path for consecutive rows.

        Args:
            q_positions: float query positions ``(B, Lq)``.
            k_positions: float key positions ``(B, Lk)``.

        Returns:
            The context (``shift`` and ``k`` set on the fast path).
        """
        # One query (a decoding step): the general index is as cheap and needs no host sync. In a
        # compiled (captured) step the Toeplitz check, a host read, is not made: the general index
        # gives the same terms (the fast paths it unlocks, banded CPU and FlexAttention, stay eager).
        check = q_positions.shape[1] > 1 and not torch.compiler.is_compiling()
        shift = toeplitz_shift(q_positions, k_positions) if check else None
        if shift is None:
            return RelativeContext(relative_index(q_positions, k_positions, self.k))
        b, lq, lk = q_positions.shape[0], q_positions.shape[1], k_positions.shape[1]
        return RelativeContext(toeplitz_index(b, lq, lk, shift, self.k, q_positions.device), shift, self.k)

    def hook(self, layer: int) -> ShawHook:
        """The hook of one layer, with its own tables.

        Args:
            layer: the layer index, 0-based.

        Returns:
            That layer's hook.
        """
        return self.hooks[layer]

    def ct2_spec(self) -> dict[str, Any]:
        """CTranslate2's Shaw relative positions (its ``relative_position_keys/values``, clipped at k).

        Returns:
            ``relative_position`` True.
        """
        return {"relative_position": True}

    def ct2_layer(self, layer: int) -> dict[str, Tensor | int]:
        """One layer's tables (Eq. 3-4); a dropped term is an all-zero table.

        Args:
            layer: the layer index, 0-based.

        Returns:
            ``relative_position_keys`` a^K and ``relative_position_values`` a^V, each ``(R, Dh)``.
        """
        hook = self.hooks[layer]
        present = hook.key_table if hook.key_table is not None else hook.value_table
        keys, values = (torch.zeros_like(present) if t is None else t for t in (hook.key_table, hook.value_table))
        return {"relative_position_keys": keys, "relative_position_values": values}


def set_backend(module: nn.Module, name: str) -> int:
    """Set :attr:`ShawHook.backend` of every Shaw hook inside ``module``.

    Args:
        module: a model (or any module) holding Shaw hooks.
        name: ``auto``, ``explicit``, ``banded`` or a region backend of ``shaw_flex.REGIONS``.

    Returns:
        How many hooks were set.

    Raises:
        ConfigError: an unknown backend name.
    """
    require(name in ("auto", "explicit", "banded", *shaw_flex.REGIONS),
            f"shaw backend must be auto, explicit, banded or one of {sorted(shaw_flex.REGIONS)}, got {name!r}")
    hooks = [m for m in module.modules() if isinstance(m, ShawHook)]
    for hook in hooks:
        hook.backend = name
    return len(hooks)
