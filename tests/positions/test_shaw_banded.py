"""The banded CPU path of Shaw attention (``ShawHook.banded``, :class:`ToeplitzShaw`) against the
explicit (L, L, Dh) reference of Eq. 3-4 and against the general explicit path."""

from __future__ import annotations

import pytest
import torch

from posenc.models.attention import may_attend_mask
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions.base import default_positions
from posenc.positions.shaw import (
    RelativeContext,
    ShawParams,
    ShawRelativePosition,
    band_masks,
    relative_index,
    set_backend,
)
from tests.conftest import tiny_config
from tests.helpers.reference_attention import explicit_shaw

H, DH = 2, 8
VARIANTS = {
    "keys+values": ShawParams(k=3),
    "values": ShawParams(k=3, keys=False),
    "shared": ShawParams(k=3, share_tables=True),
    "k1": ShawParams(k=1),
}


def _inputs(lengths: list[int], length: int, causal: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    q, k, v = (torch.randn(len(lengths), H, length, DH, generator=g, requires_grad=True) for _ in range(3))
    return q, k, v, default_positions(mask), may_attend_mask(mask, length, causal=causal)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length", [4, 5, 6, 11, 40])  # 4 = 2k − 2 (the shortest banded length for k = 3)
def test_banded_equals_explicit_l_l_dh_reference(variant: str, causal: bool, length: int) -> None:
    """Output and every gradient (q, k, v, both tables) within 1e-5 of the (L, L, Dh) reference,
    with right padding (rows of length 1 and 2) and without."""
    params = VARIANTS[variant]
    rel = ShawRelativePosition(H * DH, params, num_layers=1, num_heads=H)
    hook = rel.hook(0)
    for lengths in ([length] * 3, [length, 2, 1]):
        q, k, v, pos, allowed = _inputs(lengths, length, causal)
        ctx = rel.context(pos, pos)
        out = hook.banded(q, k, v, allowed, ctx, 0.0)
        assert out is not None, "the banded path must apply to full Toeplitz self-attention on CPU"
        inputs = [q, k, v, *hook.parameters()]
        wide = [t.detach().double().requires_grad_() for t in inputs]  # the reference in float64
        tables = dict(zip(("key_table", "value_table"), wide[3:])) if not params.share_tables else {"key_table": wide[3], "value_table": wide[3]}
        if not params.keys:
            tables = {"key_table": None, "value_table": wide[3]}
        ref = explicit_shaw(*wide[:3], allowed, index=relative_index(pos, pos, params.k), **tables)
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(ref)
        grads = torch.autograd.grad((out.double() * weights).sum(), inputs)
        ref_grads = torch.autograd.grad((ref * weights).sum(), wide)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
        # Gradients: the value-table one sums B·H·L² fp32 terms; the general explicit path is off the
        # float64 reference by up to ~2e-5 of its scale too (k = 1, L = 40), so 3e-5 of the scale.
        for got, want in zip(grads, ref_grads):
            torch.testing.assert_close(got.double(), want, atol=3e-5 * max(1.0, want.abs().max().item()), rtol=0)


def test_banded_applies_only_where_it_is_exact() -> None:
    """None (the layer's general paths) for dropout, decoding steps, non-Toeplitz positions,
    L < 2k − 2, and a keys-only hook; used by the CPU "auto" backend from ``banded_min_len`` on."""
    rel = ShawRelativePosition(H * DH, ShawParams(k=3), 1, H)
    hook = rel.hook(0)
    q, k, v, pos, allowed = _inputs([6, 6], 6, causal=False)
    ctx = rel.context(pos, pos)
    assert hook.banded(q, k, v, allowed, ctx, 0.1) is None
    assert hook.banded(q[:, :, -1:], k, v, allowed[..., -1:, :], rel.context(pos[:, -1:], pos), 0.0) is None
    assert hook.banded(q, k, v, allowed, rel.context(pos * 1.5, pos * 1.5), 0.0) is None
    assert hook.banded(q, k, v, allowed, RelativeContext(relative_index(pos, pos, 3)), 0.0) is None
    short = _inputs([3, 3], 3, causal=False)
    assert hook.banded(*short[:3], short[4], rel.context(short[3], short[3]), 0.0) is None
    keys_only = ShawRelativePosition(H * DH, ShawParams(k=3, values=False), 1, H).hook(0)
    assert keys_only.banded(q, k, v, allowed, ctx, 0.0) is None
    assert hook.backend == "auto" and hook.attend(q, k, v, allowed, ctx, 0.0) is None  # L = 6 < banded_min_len
    hook.banded_min_len = 6
    assert torch.equal(hook.attend(q, k, v, allowed, ctx, 0.0), hook.banded(q, k, v, allowed, ctx, 0.0))
    hook.backend = "explicit"
    assert hook.attend(q, k, v, allowed, ctx, 0.0) is None
    hook.backend = "banded"  # forced: from 2k − 2 on, whatever banded_min_len says
    assert hook.attend(q, k, v, allowed, ctx, 0.0) is not None


def test_band_masks_by_hand() -> None:
    allowed = may_attend_mask(torch.ones(2, 5, dtype=torch.bool), 5, causal=True)
    masks = band_masks(allowed, 5, 2, torch.float32)
    assert masks.right is None  # causal: j − i ≥ 2 is always masked
    assert masks.bias is not None and masks.bias.shape == (1, 1, 5, 5)  # one mask for both rows
    assert torch.equal(masks.valid[0], torch.tensor([False, True, True])) and torch.equal(masks.valid[4], torch.tensor([True, True, False]))
    padded = may_attend_mask(torch.arange(5)[None] < torch.tensor([[5], [3]]), 5, causal=False)
    masks = band_masks(padded, 5, 2, torch.float32)
    assert masks.right is not None and masks.right[0].tolist() == [0, 0, 1, 1, 1] and masks.bias.shape == (2, 1, 5, 5)
    assert band_masks(torch.ones(2, 1, 1, 5, dtype=torch.bool), 5, 2, torch.float32).bias is None


@pytest.mark.parametrize("name", ["rpe", "rr"])
def test_model_banded_equals_explicit(name: str) -> None:
    """Seq2seq teacher forcing (padding, both stacks), banded CPU default vs the general explicit
    path: logits within 1e-5 (tests/models/test_textbook.py runs at L ≤ 6, below ``banded_min_len``)."""
    torch.manual_seed(0)
    cfg = tiny_config(name, vocab=20, position_params={"shaw": {"k": 2}})
    model = Seq2SeqTransformer(cfg, pad_id=0)
    src, tgt = torch.randint(4, 20, (2, 9)), torch.randint(4, 20, (2, 7))
    src_mask = torch.arange(9)[None] < torch.tensor([[9], [5]])
    tgt_mask = torch.arange(7)[None] < torch.tensor([[7], [4]])
    outs = {}
    for backend in ("explicit", "banded"):
        set_backend(model, backend)
        torch.manual_seed(1)  # randomized positions draw the same samples
        logits = model(src, src_mask, tgt, tgt_mask)
        grads = torch.autograd.grad(logits.sum(), list(model.parameters()), allow_unused=True)
        outs[backend] = (logits.detach(), grads)
    torch.testing.assert_close(outs["banded"][0], outs["explicit"][0], atol=1e-5, rtol=0)
    # gradients: float summation order differs between the paths, so entries near zero differ by
    # rounding relative to the gradients' scale (1.7e-5 at a scale of 43 on an Intel Xeon)
    scale = max(float(w.abs().max()) for w in outs["explicit"][1] if w is not None)
    for got, want in zip(outs["banded"][1], outs["explicit"][1]):
        if want is not None:
            torch.testing.assert_close(got, want, atol=1e-6 * scale, rtol=1e-5)
