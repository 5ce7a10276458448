"""Shaw et al. (2018) relative attention without any (L, L) tensor kept for backward.

Shape legend: B batch, H heads, L length (self-attention, Lq = Lk = L), Dh head width,
c clipping distance (Shaw's k), R = 2c + 1 buckets, T band block, W = T + 2c − 2 window.

Shaw Eq. 3-4 with a_ij = w_{clip(j − i, c)} (Eq. 6):
e_ij = q_i·(k_j + a^K_ij)/√Dh,  z_i = Σ_j α_ij (v_j + a^V_ij).
For every query row i the keys split into three regions by r = j − i:

* left  (r ≤ −c): a^K_ij = w^K_{−c} and a^V_ij = w^V_{−c} are constant over the region;
* band  (|r| < c): 2c − 1 keys, each with its own bucket;
* right (r ≥ +c): constant w^K_{+c}, w^V_{+c}.

A constant score shift cancels inside a softmax, so the left and right regions are *plain*
attention restricted to their keys (one block-sparse FlexAttention call each, no score_mod),
returning their outputs O^L, O^R and log-sum-exps; Shaw's key term only shifts those by
q_i·w^K_{∓c}/√Dh. The band scores are computed directly (O(L·c·Dh)). The three parts are merged
exactly by their log-sum-exps (the flash-attention merge), and the value term (Eq. 3, second
sum) is w_L·w^V_{−c} + w_R·w^V_{+c} + Σ_band α_ij w^V_r with w_L, w_R the regions' total weights.
Gradients flow through the kernel's outputs and its log-sum-exp (FlexAttention differentiates
the lse); the merge is recomputed in backward (activation checkpointing), so the extra memory kept
for backward is O^L, O^R, two lse and q·w^K: O(L·(Dh + c)) per head. In causal self-attention the
right region is empty (its block mask has no blocks, so that call does no work).

Region backends, by name: ``flex`` (``torch.compile(flex_attention)`` on CUDA; eager FlexAttention,
forward only, elsewhere) and ``dense`` (an explicit masked softmax, any device, differentiable:
the reference that tests the merge on CPU).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

#: Query rows per block of the band computation.
BAND_BLOCK = 64
#: A region backend: (q, k, v, allowed (B, 1, L, L) bool, c, side, cache) → (out (B, H, L, Dh), lse (B, H, L) fp32).
Region = Callable[[Tensor, Tensor, Tensor, Tensor, int, str, dict], tuple[Tensor, Tensor]]


def region_allowed(lq: int, c: int, side: str, device: torch.device) -> Tensor:
    """The keys of one region of each query: j ≤ i − c (``left``) or j ≥ i + c (``right``).

    Args:
        lq: L, query (and key) positions.
        c: the clipping distance.
        side: ``left`` or ``right``.
        device: where the mask is built.

    Returns:
        Bool ``(L, L)``, True at the region's keys.
    """
    rel = torch.arange(lq, device=device)[None, :] - torch.arange(lq, device=device)[:, None]
    return rel <= -c if side == "left" else rel >= c


def dense_region(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, c: int, side: str, cache: dict
) -> tuple[Tensor, Tensor]:
    """Explicit masked softmax over one region (the reference region backend); rows without keys
    give out 0, lse −inf (as the kernel).

    Args:
        q: queries ``(B, H, L, Dh)``, unscaled.
        k: keys ``(B, H, L, Dh)``.
        v: values ``(B, H, L, Dh)``.
        allowed: ``(B, 1, L, L)`` bool (broadcastable), True where attention is allowed.
        c: the clipping distance.
        side: ``left`` or ``right``.
        cache: the stack's cache (not read).

    Returns:
        The region's output ``(B, H, L, Dh)`` and its log-sum-exp ``(B, H, L)`` in float32.
    """
    mask = allowed & region_allowed(q.shape[-2], c, side, q.device)  # (B, 1, L, L)
    has_key = mask.any(-1)  # (B, 1, L)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key[..., None], 0.0)
    probs = torch.softmax(scores, -1) * has_key[..., None]
    lse = torch.logsumexp(scores, -1).masked_fill(~has_key, float("-inf"))
    return torch.matmul(probs, v.float()).to(q.dtype), lse


_COMPILED: dict[str, Callable] = {}


def _flex_functions(device: torch.device) -> tuple[Callable, Callable]:
    """``(flex_attention, create_block_mask)``: compiled once, lazily, with dynamic shapes on CUDA
    (one graph for all lengths and batch sizes); eager elsewhere (compiled FlexAttention on CPU
    has no lse and no backward in torch 2.13)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if device.type != "cuda":
        return flex_attention, create_block_mask
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=True)
        _COMPILED["mask"] = torch.compile(create_block_mask, dynamic=True)
    return _COMPILED["flex"], _COMPILED["mask"]


def _region_mask_mod(allowed: Tensor, bounds: Tensor) -> Callable:
    """FlexAttention mask_mod: ``bounds[0] ≤ j − i ≤ bounds[1]`` and ``allowed[b, 0, i, j]``.

    One function (same code object) for both regions and both masks, and ``allowed`` always
    contiguous ``(B, 1, L, L)``: torch.compile then guards on nothing that differs between calls."""

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        rel = kv_idx - q_idx
        return (rel >= bounds[0]) & (rel <= bounds[1]) & allowed[b, 0, q_idx, kv_idx]

    return mask_mod


def flex_region(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, c: int, side: str, cache: dict
) -> tuple[Tensor, Tensor]:
    """One FlexAttention call over a region; its block mask is built once per (allowed, side) and
    kept in ``cache`` (the stack's context, shared by all layers).

    Args:
        q: queries ``(B, H, L, Dh)``, unscaled.
        k: keys ``(B, H, L, Dh)``.
        v: values ``(B, H, L, Dh)``.
        allowed: ``(B, 1, L, L)`` bool (broadcastable), True where attention is allowed.
        c: the clipping distance.
        side: ``left`` or ``right``.
        cache: the stack's cache, where the block mask is kept.

    Returns:
        The region's output ``(B, H, L, Dh)`` and its log-sum-exp ``(B, H, L)`` in float32.
    """
    from torch.nn.attention.flex_attention import AuxRequest

    flex, make_mask = _flex_functions(q.device)
    b, _, length, _ = q.shape
    key = f"flex-{side}-{c}-{b}x{length}"
    if key not in cache or cache[key][0] is not allowed:
        full = allowed.expand(b, 1, length, length).contiguous()  # a copy only for key-padding masks
        far = length + c  # beyond any distance
        bounds = torch.tensor([-far, -c] if side == "left" else [c, far], dtype=torch.int32, device=q.device)
        cache[key] = (allowed, make_mask(_region_mask_mod(full, bounds), b, None, length, length, device=q.device))
    out, aux = flex(q, k, v, block_mask=cache[key][1], scale=q.shape[-1] ** -0.5, return_aux=AuxRequest(lse=True))
    return out, aux.lse


REGIONS: dict[str, Region] = {"flex": flex_region, "dense": dense_region}


def _windows(x: Tensor, t: int, halo: int) -> Tensor:
    """``(B, H, L, Dh)`` → overlapping windows ``(B, H, nb, T + 2·halo, Dh)``; window n holds rows
    n·T − halo … n·T + T − 1 + halo (zeros outside 0 … L − 1); needs halo ≤ T.

    Built from non-overlapping block views (previous block's tail, the block, the next block's
    head) rather than ``Tensor.unfold``: compiled (inductor) backward of the overlapping unfold view
    gave wrong gradients in torch 2.13."""
    b, h, length, d = x.shape
    nb = -(-length // t)
    padded = F.pad(x, (0, 0, t, t + nb * t - length))  # block n of x is block n + 1 here
    blocks = padded.view(b, h, nb + 2, t, d)
    return torch.cat((blocks[:, :, :-2, t - halo:], blocks[:, :, 1:-1], blocks[:, :, 2:, :halo]), -2)


def band_scores(q: Tensor, k: Tensor, c: int, t: int = BAND_BLOCK) -> Tensor:
    """The band scores q_i·k_{i+r}, r = −(c−1) … c−1.

    Per block of T queries, one matmul against its key window ``(T, W)``; the band is read out of
    it by the skew view: row t of (T, W) flattened and re-viewed with rows of W + 1 puts key
    column t + m at column m.

    Args:
        q: queries ``(B, H, L, Dh)``.
        k: keys ``(B, H, L, Dh)``.
        c: the clipping distance.
        t: query rows per block T.

    Returns:
        The scores ``(B, H, L, 2c−1)``, 0 where i + r is outside 0 … L−1.
    """
    b, h, length, d = q.shape
    t = max(min(t, length), c - 1)  # no block longer than L; the key window's halo c − 1 ≤ T
    nb, w = -(-length // t), t + 2 * c - 2
    qb = F.pad(q, (0, 0, 0, nb * t - length)).view(b, h, nb, t, d)
    full = torch.matmul(qb, _windows(k, t, c - 1).transpose(-1, -2))  # (B, H, nb, T, W)
    skew = F.pad(full.flatten(-2), (0, t)).view(b, h, nb, t, w + 1)
    return skew[..., : 2 * c - 1].reshape(b, h, nb * t, 2 * c - 1)[:, :, :length]


def band_values(p: Tensor, v: Tensor, c: int, t: int = BAND_BLOCK) -> Tensor:
    """The band's share of the output Σ_r p_{i,r} v_{i+r} (inverse skew of :func:`band_scores`, then
    one matmul per block against its value window).

    Args:
        p: band weights ``(B, H, L, 2c−1)``.
        v: values ``(B, H, L, Dh)``.
        c: the clipping distance.
        t: query rows per block T.

    Returns:
        ``(B, H, L, Dh)``.
    """
    b, h, length, _ = p.shape
    t = max(min(t, length), c - 1)
    nb, w = -(-length // t), t + 2 * c - 2
    pb = F.pad(p, (0, t, 0, nb * t - length)).view(b, h, nb, t, w + 1)
    skew = pb.flatten(-2)[..., : t * w].view(b, h, nb, t, w)  # row t: p at columns t … t + 2c − 2
    out = torch.matmul(skew, _windows(v, t, c - 1))  # (B, H, nb, T, Dh)
    return out.reshape(b, h, nb * t, v.shape[-1])[:, :, :length]


def band_allowed(allowed: Tensor, length: int, c: int) -> Tensor:
    """The attention mask on the band: may i attend to i + r.

    Args:
        allowed: ``(B, 1, L, L)`` bool (broadcastable).
        length: L.
        c: the clipping distance.

    Returns:
        Bool ``(B, 1, L, 2c−1)`` (False where i + r is outside 0 … L−1).
    """
    dev = allowed.device
    cols = torch.arange(length, device=dev)[:, None] + torch.arange(1 - c, c, device=dev)[None, :]
    full = allowed.expand(allowed.shape[0], 1, length, length)
    got = torch.gather(full, -1, cols.clamp(0, length - 1).expand(allowed.shape[0], 1, length, 2 * c - 1))
    return got & (cols >= 0) & (cols < length)


def merge(q: Tensor, k: Tensor, v: Tensor, qa: Tensor | None, value_table: Tensor | None, ok: Tensor,
          out_l: Tensor, lse_l: Tensor, out_r: Tensor, lse_r: Tensor, c: int) -> Tensor:
    """Left, band and right parts of Shaw Eq. 3-4 merged by their log-sum-exps.

    Args:
        q: queries ``(B, H, L, Dh)``, unscaled.
        k: keys ``(B, H, L, Dh)``.
        v: values ``(B, H, L, Dh)``.
        qa: q_i·w^K_r ``(B, H, L, 2c+1)``, or None without a^K.
        value_table: w^V ``(2c+1, Dh)``, or None without a^V.
        ok: the band mask ``(B, 1, L, 2c−1)``.
        out_l: plain attention output of the left region ``(B, H, L, Dh)``.
        lse_l: its log-sum-exp ``(B, H, L)`` (without a^K).
        out_r: plain attention output of the right region ``(B, H, L, Dh)``.
        lse_r: its log-sum-exp ``(B, H, L)``.
        c: the clipping distance.

    Returns:
        The attention output ``(B, H, L, Dh)`` in q's dtype.
    """
    scale = q.shape[-1] ** -0.5
    s = band_scores(q, k, c).float() * scale  # (B, H, L, 2c−1)
    if qa is not None:  # Eq. 4's key term: per band bucket, and a constant shift of each region
        qa = qa.float() * scale
        s, lse_l, lse_r = s + qa[..., 1:-1], lse_l + qa[..., 0], lse_r + qa[..., -1]
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(torch.cat((lse_l[..., None], lse_r[..., None], s), -1), -1)  # (B, H, L)
    w_l, w_r = torch.exp(lse_l - lse)[..., None], torch.exp(lse_r - lse)[..., None]
    p = torch.exp(s - lse[..., None])  # α_ij on the band
    out = w_l * out_l + w_r * out_r + band_values(p.to(v.dtype), v, c)
    if value_table is not None:  # Eq. 3's value term: Σ_r (Σ_{j in bucket r} α_ij) w^V_r
        table = value_table.float()
        out = out + w_l * table[0] + w_r * table[-1] + torch.matmul(p, table[1:-1])
    return out.to(q.dtype)


def merge_function(compiled: bool) -> Callable[..., Tensor]:
    """:func:`merge`, or its ``torch.compile`` (made once, lazily), which fuses its many small ops.

    Args:
        compiled: return the compiled merge.

    Returns:
        The merge function.
    """
    if not compiled:
        return merge
    if "merge" not in _COMPILED:
        _COMPILED["merge"] = torch.compile(merge)
    return _COMPILED["merge"]


def shaw_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, key_table: Tensor | None,
                   value_table: Tensor | None, c: int, region: Region, cache: dict,
                   compiled: bool | None = None) -> Tensor:
    """Shaw self-attention (Eq. 3-4, Toeplitz positions with shift 0). Rows with no allowed key give
    NaN, as the softmax reference does.

    Args:
        q: queries ``(B, H, L, Dh)``, unscaled.
        k: keys ``(B, H, L, Dh)``.
        v: values ``(B, H, L, Dh)``.
        allowed: ``(B, 1, L, L)`` bool, broadcastable (padding, causality).
        key_table: w^K ``(2c+1, Dh)``, or None without a^K.
        value_table: w^V ``(2c+1, Dh)``, or None without a^V.
        c: the clipping distance.
        region: the region backend (``REGIONS``).
        cache: the stack's cache: block masks and the band mask, built once per stack.
        compiled: compile the merge; None: on CUDA.

    Returns:
        The attention output ``(B, H, L, Dh)``.
    """
    fn = merge_function(q.is_cuda if compiled is None else compiled)
    qa = None if key_table is None else torch.matmul(q, key_table.to(q.dtype).t())  # (B, H, L, R): O(L·c)
    out_l, lse_l = region(q, k, v, allowed, c, "left", cache)
    out_r, lse_r = region(q, k, v, allowed, c, "right", cache)
    key = f"band-{c}-{q.shape[-2]}"
    if key not in cache or cache[key][0] is not allowed:  # once per stack, shared by its layers
        cache[key] = (allowed, band_allowed(allowed, q.shape[-2], c))
    ok = cache[key][1]
    args = (q, k, v, qa, value_table, ok, out_l, lse_l, out_r, lse_r, c)
    if torch.is_grad_enabled():  # keep only the inputs; the O(L·c) band is recomputed in backward
        return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False)  # no randomness inside
    return fn(*args)
