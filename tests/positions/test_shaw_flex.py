"""Shaw RPE split into left/band/right regions (positions/shaw_flex.py) against the reference path.

On CPU the merge is tested forward and backward with the differentiable ``dense`` region backend,
and FlexAttention (eager, forward only: torch has no CPU backward for it) forward; on CUDA the
compiled FlexAttention backend forward and backward, in fp32 and bf16 (skipped without CUDA).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from posenc.errors import ConfigError
from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import shaw_flex
from posenc.positions.base import default_positions
from posenc.positions.shaw import (
    RelativeContext,
    ShawHook,
    ShawParams,
    ShawRelativePosition,
    relative_index,
    set_backend,
)
from tests.conftest import tiny_config
from tests.helpers.cuda import cuda_only
from tests.helpers.inductor import compiled_or_skip
from tests.helpers.reference_attention import use_reference_path

D, H = 32, 2  # Dh = 16: the smallest head width FlexAttention's CUDA kernels take
CUDA = cuda_only("CUDA FlexAttention path: needs a CUDA device")
VARIANTS = {
    "keys+values": ShawParams(k=3),
    "keys": ShawParams(k=3, values=False),
    "values": ShawParams(k=3, keys=False),
    "shared": ShawParams(k=3, share_tables=True),
}


def _setup(params: ShawParams, lengths: list[int], causal: bool, device: str = "cpu"):
    """Layer, Shaw module, input, positions and mask for right-padded rows of the given lengths."""
    rel = ShawRelativePosition(D, params, 1, H).to(device)
    mha = MultiHeadAttention(D, H, hook=rel.hook(0)).to(device)
    with torch.no_grad():
        for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            lin.bias.normal_(0, 0.1)
    length = max(lengths)
    mask = torch.arange(length, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
    x = torch.randn(len(lengths), length, D, device=device)
    return mha, rel, x, default_positions(mask), may_attend_mask(mask, length, causal=causal)


def _run(mha, rel, x, pos, allowed, backend: str, grads: bool = True):
    """Output and gradients (input, every projection and table) with one hook backend; the
    explicit backend runs the textbook reference path with the general (B, 1, L, L) index."""
    hook = rel.hook(0)
    hook.backend = backend
    use_reference_path(mha, backend == "explicit")
    ctx = RelativeContext(relative_index(pos, pos, rel.k)) if backend == "explicit" else rel.context(pos, pos)
    xg = x.clone().requires_grad_(grads)
    with torch.set_grad_enabled(grads), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not compiled
        out = mha(xg, xg, allowed, ctx)
    if not grads:
        return out, []
    params = [xg, *mha.parameters(), *hook.parameters()]
    weights = torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out)
    return out.detach(), list(torch.autograd.grad((out.float() * weights).sum(), params))


def _close(got, ref, atol: float, rtol: float = 1e-5) -> None:
    (out, grads), (ref_out, ref_grads) = got, ref
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol, rtol=rtol)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g.float(), r.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("c", [1, 3, 5])
@pytest.mark.parametrize("block", [4, 64])
def test_band_scores_and_values_equal_the_full_matrix_band(c: int, block: int) -> None:
    q, k, v = torch.randn(3, 2, 2, 13, 8).unbind(0)
    full = q @ k.transpose(-1, -2)  # (B, H, L, L)
    p = torch.rand(2, 2, 13, 2 * c - 1)
    expected_s = torch.zeros(2, 2, 13, 2 * c - 1)
    expected_v = torch.zeros(2, 2, 13, 8)
    for i in range(13):
        for m, r in enumerate(range(1 - c, c)):
            if 0 <= i + r < 13:
                expected_s[:, :, i, m] = full[:, :, i, i + r]
                expected_v[:, :, i] += p[:, :, i, m, None] * v[:, :, i + r]
    torch.testing.assert_close(shaw_flex.band_scores(q, k, c, block), expected_s, atol=1e-5, rtol=0)
    torch.testing.assert_close(shaw_flex.band_values(p, v, c, block), expected_v, atol=1e-5, rtol=0)


def test_band_allowed_and_region_masks_by_hand() -> None:
    allowed = may_attend_mask(torch.tensor([[True, True, True, False]]), 4, causal=True)
    band = shaw_flex.band_allowed(allowed, 4, 2)[0, 0]  # columns r = −1, 0, +1
    assert band.tolist() == [[False, True, False], [True, True, False], [True, True, False], [True, False, False]]
    assert shaw_flex.region_allowed(4, 2, "left", torch.device("cpu")).int().tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert torch.equal(shaw_flex.region_allowed(4, 2, "right", torch.device("cpu")), shaw_flex.region_allowed(4, 2, "left", torch.device("cpu")).T)


def test_dense_region_softmax_and_empty_rows() -> None:
    """Out and lse of a softmax restricted to the region; rows without keys: out 0, lse −inf."""
    q, k, v = torch.randn(3, 1, 1, 5, 4).unbind(0)
    allowed = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    out, lse = shaw_flex.dense_region(q, k, v, allowed, 2, "left", {})
    s = (q @ k.transpose(-1, -2))[0, 0] / 2.0
    for i in range(5):
        keys = list(range(0, i - 1))
        if not keys:
            assert lse[0, 0, i] == float("-inf") and torch.all(out[0, 0, i] == 0)
            continue
        torch.testing.assert_close(lse[0, 0, i], torch.logsumexp(s[i, keys], 0))
        torch.testing.assert_close(out[0, 0, i], torch.softmax(s[i, keys], 0) @ v[0, 0, keys])


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", [[11, 6, 2], [70, 41]])
def test_region_merge_equals_reference_forward_and_backward(variant: str, causal: bool, lengths: list[int]) -> None:
    """Dense region backend: the merge (Eq. 3-4 by log-sum-exps) and its checkpointed backward."""
    setup = _setup(VARIANTS[variant], lengths, causal)
    _close(_run(*setup, "dense"), _run(*setup, "explicit"), atol=2e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
def test_flex_forward_on_cpu_equals_reference(variant: str, causal: bool) -> None:
    pytest.importorskip("torch.nn.attention.flex_attention", reason="FlexAttention not in this torch")
    setup = _setup(VARIANTS[variant], [11, 6, 2], causal)
    _close(_run(*setup, "flex", grads=False), _run(*setup, "explicit", grads=False), atol=2e-5)


def test_nothing_of_size_l_by_l_kept_for_backward_outside_the_regions() -> None:
    """Shaw's terms add O(L·k) saved memory: record every tensor autograd saves, except inside the
    region calls (the kernel's own), for L = 40 ≫ k = 3."""
    saved: list[tuple[int, ...]] = []

    def quiet_region(*args):  # type: ignore[no-untyped-def]
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return shaw_flex.dense_region(*args)

    mha, rel, x, pos, allowed = _setup(VARIANTS["keys+values"], [40, 33], causal=False)
    q, k, v = (torch.randn(2, H, 40, D // H, requires_grad=True) for _ in range(3))
    hook = rel.hook(0)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = shaw_flex.shaw_attention(q, k, v, allowed, hook.key_table, hook.value_table, 3, quiet_region, {})
    out.sum().backward()
    assert saved and q.grad is not None and hook.value_table.grad is not None
    assert not any(s[-2:] == (40, 40) for s in saved), saved


def test_backend_selection() -> None:
    """auto: the banded path on CPU; a region backend only for full Toeplitz self-attention passes."""
    rel = ShawRelativePosition(D, ShawParams(k=2), 1, H)
    hook = rel.hook(0)
    q = torch.randn(1, H, 6, D // H)
    pos = torch.arange(6.0)[None]
    assert hook.backend == "auto" and hook.region(q, rel.context(pos, pos), 0.0) is None  # CPU
    assert [hook.auto_backend(cuda, n) for cuda, n in ((True, 511), (True, 512), (False, 4096))] == ["explicit", "flex", "banded"]
    hook.backend = "dense"
    assert hook.region(q, rel.context(pos, pos), 0.0) is shaw_flex.dense_region
    assert hook.region(q, rel.context(pos, pos), 0.1) is None  # attention dropout
    assert hook.region(q[:, :, -1:], rel.context(pos[:, -1:], pos), 0.0) is None  # decoding step
    assert hook.region(q, rel.context(pos * 1.5, pos * 1.5), 0.0) is None  # CAPE-like scaled positions
    hook.backend = "explicit"
    assert hook.region(q, rel.context(pos, pos), 0.0) is None
    assert set_backend(rel, "flex") == 1 and hook.backend == "flex"
    with pytest.raises(ConfigError, match="shaw backend"):
        set_backend(rel, "triton")


@pytest.mark.parametrize("variant", ["keys+values", "shared"])
def test_model_dense_backend_equals_explicit_and_decoding(variant: str) -> None:
    """Seq2seq with padding: teacher forcing through the region merge equals the explicit paths;
    step-by-step decoding (explicit, cached) equals teacher forcing."""
    params = {kk: getattr(VARIANTS[variant], kk) for kk in ("keys", "values", "share_tables")}
    model = Seq2SeqTransformer(tiny_config("rpe", position_params={"shaw": {"k": 2, **params}})).eval()
    src, tgt = torch.randint(4, 40, (2, 9)), torch.randint(4, 40, (2, 7))
    src_mask = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])
    tgt_mask = torch.ones(2, 7, dtype=torch.bool)
    with torch.no_grad():
        assert set_backend(model, "explicit") > 0
        explicit = model(src, src_mask, tgt, tgt_mask)
        set_backend(model, "dense")
        merged = model(src, src_mask, tgt, tgt_mask)
        state = model.init_state(model.encode(src, src_mask), src_mask)
        steps = torch.stack([model.step(tgt[:, t], state) for t in range(7)], 1)
    torch.testing.assert_close(merged, explicit, atol=1e-5, rtol=0)
    torch.testing.assert_close(steps, merged, atol=1e-5, rtol=0)


#: Each case compiles FlexAttention afresh (tens of seconds on a GPU): every variant, both
#: attention kinds and both length sets are covered by four cases rather than their 16 products.
FLEX_CASES = [("keys+values", False, [300, 130, 7]), ("keys", True, [11, 6, 2]),
              ("values", True, [300, 130, 7]), ("shared", False, [11, 6, 2])]


@CUDA
@pytest.mark.parametrize(("variant", "causal", "lengths"), FLEX_CASES)
def test_cuda_flex_equals_reference_fp32(variant: str, causal: bool, lengths: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled FlexAttention regions and merge (forward and backward) against the reference, fp32."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(ShawHook, "flex_min_len", 2)  # "auto" = flex at these short lengths too
    setup = _setup(VARIANTS[variant], lengths, causal, "cuda")
    rel, pos = setup[1], setup[3]
    assert rel.hook(0).region(torch.empty(1, H, pos.shape[1], 1, device="cuda"), rel.context(pos, pos), 0.0) is shaw_flex.flex_region
    _close(_run(*setup, "auto"), _run(*setup, "explicit"), atol=1e-4, rtol=1e-4)


@CUDA
@pytest.mark.parametrize(("variant", "causal"), [("keys+values", True), ("values", False)])
def test_cuda_flex_bf16_autocast_close_to_fp32_reference(variant: str, causal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 autocast (as the bench trains): the flex path is within bf16 error of the fp32 reference,
    and no further from it than the explicit path under the same autocast (relative Frobenius error
    of the output and every gradient)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    setup = _setup(VARIANTS[variant], [257, 200], causal, "cuda")
    ref = _run(*setup, "explicit")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        flex, explicit = _run(*setup, "flex"), _run(*setup, "explicit")

    def errors(got) -> list[float]:  # type: ignore[no-untyped-def]
        pairs = zip([got[0], *got[1]], [ref[0], *ref[1]])
        return [((g.float() - r.float()).norm() / r.float().norm()).item() for g, r in pairs]

    for e_flex, e_explicit in zip(errors(flex), errors(explicit)):
        assert e_flex < 5e-2 and e_flex <= 2 * e_explicit + 1e-3, (e_flex, e_explicit)


@CUDA
def test_cuda_auto_backend_in_a_model_equals_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seq2seq on CUDA (fp32): gradients of the auto path (FlexAttention regions, taken by every
    self-attention layer of both stacks) equal the explicit path's."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(ShawHook, "flex_min_len", 2)  # "auto" = flex at these short lengths too
    calls: list[str] = []

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(args[5])
        return shaw_flex.flex_region(*args)

    monkeypatch.setitem(shaw_flex.REGIONS, "flex", counted)
    model = Seq2SeqTransformer(tiny_config("rpe", position_params={"shaw": {"k": 3}})).cuda()
    src, tgt = torch.randint(4, 40, (2, 150), device="cuda"), torch.randint(4, 40, (2, 140), device="cuda")
    src_mask = torch.arange(150, device="cuda")[None, :] < torch.tensor([[150], [90]], device="cuda")
    tgt_mask = torch.arange(140, device="cuda")[None, :] < torch.tensor([[140], [77]], device="cuda")
    results = []
    for backend in ("auto", "explicit"):
        set_backend(model, backend)
        model.zero_grad()
        model(src, src_mask, tgt, tgt_mask).float().square().mean().backward()
        results.append([p.grad.clone() for p in model.parameters()])
    assert len(calls) == 2 * (2 + 2)  # left and right regions of 2 encoder + 2 decoder self-attention layers
    for got, ref in zip(*results):
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-3)


def test_compiled_merge_equals_eager_forward_and_backward() -> None:
    """The merge as compiled on CUDA (here by inductor on CPU), checkpointed, forward and gradients."""
    hook = ShawRelativePosition(D, ShawParams(k=3), 1, H).hook(0)
    q, k, v = (torch.randn(2, H, 70, D // H, requires_grad=True) for _ in range(3))
    allowed = may_attend_mask(torch.arange(70)[None, :] < torch.tensor([[70], [51]]), 70, causal=True)

    def forward_and_grads(compiled: bool) -> list[torch.Tensor]:
        out = shaw_flex.shaw_attention(q, k, v, allowed, hook.key_table, hook.value_table, 3, shaw_flex.dense_region, {}, compiled)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)
        return [out, *torch.autograd.grad((out * weights).sum(), [q, k, v, hook.key_table, hook.value_table])]

    eager = forward_and_grads(False)
    compiled = compiled_or_skip(lambda: forward_and_grads(True))
    for got, ref in zip(compiled, eager):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
