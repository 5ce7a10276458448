"""Shaw et al. (2018) relative positions: the efficient Eq. 5 split against a naive Eq. 3-4 reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions.base import default_positions
from posenc.positions.shaw import RelativeContext, ShawHook, ShawParams, ShawRelativePosition, relative_index

D, H = 16, 2
DH = D // H


def naive_shaw(mha: MultiHeadAttention, hook: ShawHook, xq, xkv, q_pos, k_pos, allowed, k: int):
    """Shaw Eq. 3-4 per head with an explicit (Lq, Lk, Dh) tensor a_ij = w_{clip(j−i, k)} (Eq. 6).

    e_ij = q_i·(k_j + a^K_ij) / sqrt(Dh);  z_i = Σ_j α_ij (v_j + a^V_ij);  returns (out (B, Lq, D), e).
    """
    b, lq, _ = xq.shape
    lk = xkv.shape[1]
    allowed = allowed.expand(b, 1, lq, lk)
    q = mha.q_proj(xq).view(b, lq, H, DH)
    kk = mha.k_proj(xkv).view(b, lk, H, DH)
    v = mha.v_proj(xkv).view(b, lk, H, DH)
    out = torch.zeros(b, lq, H, DH)
    logits = torch.full((b, H, lq, lk), float("-inf"))
    for n in range(b):
        a_k = torch.zeros(lq, lk, DH)
        a_v = torch.zeros(lq, lk, DH)
        for i in range(lq):
            for j in range(lk):
                dist = int(round(k_pos[n, j].item())) - int(round(q_pos[n, i].item()))
                r = max(-k, min(k, dist)) + k
                if hook.key_table is not None:
                    a_k[i, j] = hook.key_table[r]
                if hook.value_table is not None:
                    a_v[i, j] = hook.value_table[r]
        for h in range(H):
            for i in range(lq):
                e = torch.stack([(q[n, i, h] * (kk[n, j, h] + a_k[i, j])).sum() for j in range(lk)]) / math.sqrt(DH)
                e = e.masked_fill(~allowed[n, 0, i], float("-inf"))
                logits[n, h, i] = e
                alpha = torch.softmax(e, dim=0)
                out[n, i, h] = sum(alpha[j] * (v[n, j, h] + a_v[i, j]) for j in range(lk))
    return mha.out_proj(out.reshape(b, lq, D)), logits


def make(params: ShawParams) -> tuple[MultiHeadAttention, ShawRelativePosition]:
    """One attention layer and a one-layer Shaw module (contexts built as the model builds them)."""
    rel = ShawRelativePosition(D, params, num_layers=1, num_heads=H)
    mha = MultiHeadAttention(D, H, hook=rel.hook(0)).eval()
    with torch.no_grad():  # non-zero biases so that a bias bug cannot hide
        for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            lin.bias.normal_(0, 0.1)
    return mha, rel


def positions_of(kind: str, mask: torch.Tensor) -> torch.Tensor:
    """default 0..L-1; shifted per row (SHAPE-like); gappy: strictly increasing with random gaps."""
    pos = default_positions(mask)
    if kind == "shifted":
        return pos + torch.arange(mask.shape[0], dtype=torch.float32)[:, None] * 7
    if kind == "gappy":
        return torch.randint(1, 4, mask.shape).float().cumsum(1)
    return pos


VARIANTS = {
    "keys+values": ShawParams(k=2),
    "keys": ShawParams(k=2, values=False),
    "values": ShawParams(k=2, keys=False),
    "shared": ShawParams(k=2, share_tables=True),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["default", "shifted", "gappy"])
def test_efficient_path_equals_naive_reference(variant: str, causal: bool, kind: str) -> None:
    params = VARIANTS[variant]
    mha, rel = make(params)
    b, length = 3, 7
    lengths = torch.tensor([7, 5, 2])  # right padding
    mask = torch.arange(length)[None, :] < lengths[:, None]
    x = torch.randn(b, length, D)
    pos = positions_of(kind, mask)
    allowed = may_attend_mask(mask, length, causal=causal)
    with torch.no_grad():
        got = mha(x, x, allowed, rel.context(pos, pos))
        expected, _ = naive_shaw(mha, rel.hook(0), x, x, pos, pos, allowed, params.k)
        # the general (B, 1, Lq, Lk) index context gives the same result
        general = mha(x, x, allowed, RelativeContext(relative_index(pos, pos, params.k)))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(general, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_incremental_query_against_longer_keys(variant: str) -> None:
    """Decoder step: one query at position t against keys 0..t (Lq = 1 ≠ Lk), shifted positions."""
    params = VARIANTS[variant]
    mha, rel = make(params)
    b, lk = 2, 9
    x = torch.randn(b, lk, D)
    k_pos = default_positions(torch.ones(b, lk, dtype=torch.bool)) + 100.0  # absolute offset is irrelevant
    q_pos = k_pos[:, -1:]
    allowed = torch.ones(b, 1, 1, lk, dtype=torch.bool)
    with torch.no_grad():
        got = mha(x[:, -1:], x, allowed, rel.context(q_pos, k_pos))
        expected, _ = naive_shaw(mha, rel.hook(0), x[:, -1:], x, q_pos, k_pos, allowed, params.k)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_score_term_equals_explicit_dot_products() -> None:
    """hook.score(q) = q_i · a^K_ij, the second term of Eq. 5 (before the 1/sqrt(Dh) scaling)."""
    k = 2
    hook = ShawHook(DH, ShawParams(k=k))
    q = torch.randn(2, H, 5, DH)
    pos = default_positions(torch.ones(2, 5, dtype=torch.bool))
    ctx = RelativeContext(relative_index(pos, pos, k))
    got = hook.score(q, ctx)
    expected = torch.empty(2, H, 5, 5)
    for i in range(5):
        for j in range(5):
            expected[:, :, i, j] = q[:, :, i] @ hook.key_table[max(-k, min(k, j - i)) + k]
    torch.testing.assert_close(got, expected.detach(), atol=1e-6, rtol=0)
    attn = torch.softmax(torch.randn(2, H, 5, 5), -1)
    value = hook.value(attn, ctx)
    expected_v = torch.zeros(2, H, 5, DH)
    for i in range(5):
        for j in range(5):
            expected_v[:, :, i] += attn[:, :, i, j, None] * hook.value_table[max(-k, min(k, j - i)) + k]
    torch.testing.assert_close(value, expected_v.detach(), atol=1e-6, rtol=0)


def test_keys_only_uses_fused_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys-only Shaw takes the fused SDPA path (a^K as an additive bias); with values it cannot."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("attn_mask").dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    x = torch.randn(1, 4, D)
    pos = default_positions(torch.ones(1, 4, dtype=torch.bool))
    allowed = may_attend_mask(torch.ones(1, 4, dtype=torch.bool), 4, causal=True)
    for variant, fused in (("keys", True), ("keys+values", False), ("values", False)):
        calls.clear()
        mha, rel = make(VARIANTS[variant])
        mha(x, x, allowed, rel.context(pos, pos))
        assert calls == ([torch.float32] if fused else [])


def test_relative_index_by_hand() -> None:
    pos = torch.arange(4.0)[None]
    expected = torch.tensor([[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]])  # clip(j − i, 1) + 1
    assert torch.equal(relative_index(pos, pos, 1)[0, 0], expected)
    assert relative_index(pos, pos, 1).shape == (1, 1, 4, 4)
    # a constant shift of every position leaves the index unchanged
    assert torch.equal(relative_index(pos + 17, pos + 17, 1), relative_index(pos, pos, 1))


def test_tables_per_layer_and_sharing() -> None:
    k, layers = 4, 3
    rel = ShawRelativePosition(D, ShawParams(k=k), num_layers=layers, num_heads=H)
    assert sum(p.numel() for p in rel.parameters()) == layers * 2 * (2 * k + 1) * DH
    assert rel.hook(0).key_table is not rel.hook(1).key_table  # unique per layer, shared across heads
    shared = ShawRelativePosition(D, ShawParams(k=k, share_tables=True), num_layers=layers, num_heads=H)
    assert shared.hook(2).value_table is shared.hook(2).key_table
    assert sum(p.numel() for p in shared.parameters()) == layers * (2 * k + 1) * DH
    keys_only = ShawHook(DH, ShawParams(k=k, values=False))
    assert keys_only.value_table is None and not keys_only.has_value and keys_only.has_score


def test_relative_index_of_mean_normalised_positions() -> None:
    """ape+shaw+cape: CAPE's eval positions are i − mean, half-integers for even lengths; the
    relative distance j − i must not change (it does when each position is rounded first)."""
    mask = torch.ones(1, 4, dtype=torch.bool)
    pos = default_positions(mask)
    shifted = pos - 1.5  # mean-normalised 0..3
    assert torch.equal(relative_index(shifted, shifted, 16), relative_index(pos, pos, 16))
