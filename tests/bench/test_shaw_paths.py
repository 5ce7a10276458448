"""Every fast Shaw path equals the reference path (atol 1e-5), and none builds an (L, L, Dh) tensor."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions.base import default_positions
from posenc.positions.shaw import (
    RelativeContext,
    ShawHook,
    ShawParams,
    ShawRelativePosition,
    relative_index,
    toeplitz_shift,
)
from tests.conftest import tiny_config
from tests.helpers.reference_attention import general_context, use_reference_path

D, H = 16, 2
VARIANTS = {
    "keys+values": ShawParams(k=3),
    "keys": ShawParams(k=3, values=False),
    "values": ShawParams(k=3, keys=False),
    "shared": ShawParams(k=3, share_tables=True),
}


def _pair(params: ShawParams) -> tuple[MultiHeadAttention, ShawHook]:
    hook = ShawHook(D // H, params)
    mha = MultiHeadAttention(D, H, hook=hook)
    with torch.no_grad():
        for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            lin.bias.normal_(0, 0.1)
    return mha, hook


def _run(mha: MultiHeadAttention, hook: ShawHook, x: torch.Tensor, allowed: torch.Tensor, ctx: RelativeContext, path: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and gradients (input, every parameter) of one path."""
    use_reference_path(mha, path == "reference")
    x = x.clone().requires_grad_(True)
    out = mha(x, x, allowed, ctx)
    params = [*mha.parameters(), *hook.parameters()]
    grads = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), [x, *params])
    return out.detach(), list(grads)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("causal", [False, True])
def test_fast_paths_equal_reference_with_padding(variant: str, causal: bool) -> None:
    mha, hook = _pair(VARIANTS[variant])
    lengths = torch.tensor([11, 6, 2])  # right padding; k = 3 so both clipped buckets are used
    mask = torch.arange(11)[None, :] < lengths[:, None]
    x, pos = torch.randn(3, 11, D), default_positions(mask)
    allowed = may_attend_mask(mask, 11, causal=causal)
    ref_ctx = RelativeContext(relative_index(pos, pos, 3))
    fast_ctx = ShawRelativePosition(D, VARIANTS[variant], 1, H).context(pos, pos)
    assert fast_ctx.shift == 0 and fast_ctx.index.stride(0) == 0  # Toeplitz: one (Lq, Lk) matrix
    assert torch.equal(fast_ctx.index, ref_ctx.index)
    out, grads = _run(mha, hook, x, allowed, fast_ctx, "fast")
    ref_out, ref_grads = _run(mha, hook, x, allowed, ref_ctx, "reference")
    # padded query rows attend to real keys only; compare the real rows (padding rows equal too)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=0)


def test_toeplitz_shift_detects_only_consecutive_rows() -> None:
    base = torch.arange(6.0)[None].repeat(3, 1)
    assert toeplitz_shift(base, base) == 0
    assert toeplitz_shift(base + torch.tensor([[0.0], [5.0], [9.0]]), base + torch.tensor([[0.0], [5.0], [9.0]])) == 0  # SHAPE shift
    assert toeplitz_shift(base[:, 5:], base) == 5  # decoder step t = 5
    assert toeplitz_shift(base * 1.5, base * 1.5) is None  # CAPE-like scaling
    assert toeplitz_shift(base[:, :1] + torch.tensor([[0.0], [1.0], [0.0]]), base) is None  # per-row different shift
    scaled = base * 1.5
    ctx = ShawRelativePosition(D, ShawParams(k=2), 1, H).context(scaled, scaled)
    assert ctx.shift is None and torch.equal(ctx.index, relative_index(scaled, scaled, 2))


@pytest.mark.parametrize("variant", ["keys+values", "values", "shared"])
def test_incremental_decoding_fast_equals_reference(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model-level: teacher forcing and step-by-step decoding logits of the fast and reference paths."""
    cfg = tiny_config("rpe", position_params={"shaw": {"k": 2, **{kk: getattr(VARIANTS[variant], kk) for kk in ("keys", "values", "share_tables")}}})
    model = Seq2SeqTransformer(cfg).eval()
    src, tgt = torch.randint(4, 40, (2, 7)), torch.randint(4, 40, (2, 6))
    src_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    tgt_mask = torch.ones(2, 6, dtype=torch.bool)

    def logits() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            forced = model(src, src_mask, tgt, tgt_mask)
            state = model.init_state(model.encode(src, src_mask), src_mask)
            steps = torch.stack([model.step(tgt[:, t], state) for t in range(6)], 1)
        return forced, steps

    fast_forced, fast_steps = logits()
    monkeypatch.setattr(ShawRelativePosition, "context", general_context)
    use_reference_path(model)
    ref_forced, ref_steps = logits()
    torch.testing.assert_close(fast_forced, ref_forced, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast_steps, ref_steps, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast_steps, fast_forced, atol=1e-5, rtol=0)  # incremental = teacher forcing


class _Shapes(TorchDispatchMode):
    """Records the shape of every tensor an aten op returns (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("variant", ["keys+values", "values", "keys"])
@pytest.mark.parametrize("backend", ["explicit", "banded"])
def test_fast_path_never_builds_an_l_by_l_by_dh_tensor(variant: str, backend: str) -> None:
    """Shaw's memory claim (§3.3): the largest intermediate is (B, H, L, L), never (…, L, L, Dh)."""
    b, length, k = 2, 24, 3
    mha, hook = _pair(VARIANTS[variant])
    hook.backend = backend
    pos = default_positions(torch.ones(b, length, dtype=torch.bool))
    ctx = ShawRelativePosition(D, VARIANTS[variant], 1, H).context(pos, pos)
    allowed = may_attend_mask(torch.ones(b, length, dtype=torch.bool), length, causal=True)
    x = torch.randn(b, length, D, requires_grad=True)
    with _Shapes() as rec:
        mha(x, x, allowed, ctx).sum().backward()
    biggest = max(torch.Size(s).numel() for s in rec.shapes)
    slack = 2 * (k - 1)  # the banded CPU path's (B·H·L·L + 2(k−1),) buffers (strided band views)
    assert biggest <= b * H * length * length + slack < b * H * length * length * 2
    assert not any(s.count(length) >= 2 and len(s) >= 3 and s[-1] == D // H for s in rec.shapes)
    assert any(s in ((b, H, length, length), (b * H, length, length)) for s in rec.shapes)  # the recorder did see the attention


def test_bench_memory_ratio_to_ape_by_hand() -> None:
    from posenc.bench.runner import add_memory_ratio

    records = [
        {"kind": "train", "method": "ape", "length": 32, "peak_mem_mb": 200.0},
        {"kind": "train", "method": "shaw", "length": 32, "peak_mem_mb": 230.0},
        {"kind": "train", "method": "shaw", "length": 64, "peak_mem_mb": 10.0},  # no APE at 64
        {"kind": "greedy", "method": "shaw", "length": 32, "peak_mem_mb": None},
    ]
    add_memory_ratio(records)
    assert records[0]["peak_mem_ratio_to_ape"] == 1.0 and records[1]["peak_mem_ratio_to_ape"] == 1.15
    assert records[2]["peak_mem_ratio_to_ape"] is None and "peak_mem_ratio_to_ape" not in records[3]


def test_bench_shaw_backend_reaches_every_hook() -> None:
    from posenc.bench.core import BenchConfig, build_model
    from posenc.errors import ConfigError

    cfg = BenchConfig(methods=["shaw"], preset="transformer-tiny", vocab=50, shaw_backend="dense")
    hooks = [m for m in build_model("shaw", cfg).modules() if isinstance(m, ShawHook)]
    assert hooks and all(h.backend == "dense" for h in hooks)
    assert all(h.backend == "auto" for h in build_model("shaw", BenchConfig(preset="transformer-tiny", vocab=50)).modules() if isinstance(h, ShawHook))
    with pytest.raises(ConfigError, match="shaw_backend"):
        BenchConfig(shaw_backend="triton")


def test_bench_reference_path_equals_the_tests_reference() -> None:
    """``posenc.bench.reference`` (the bench's own textbook path) gives the tests' reference output
    and gradients on a general Shaw index with padding (the bench copy never replaces the tests')."""
    from posenc.bench.reference import use_textbook_shaw

    mha, hook = _pair(VARIANTS["keys+values"])
    mask = torch.arange(9)[None, :] < torch.tensor([9, 4])[:, None]
    x, pos = torch.randn(2, 9, D), default_positions(mask)
    allowed = may_attend_mask(mask, 9, causal=False)
    ctx = RelativeContext(relative_index(pos, pos, 3))
    want, want_grads = _run(mha, hook, x, allowed, ctx, "reference")
    use_reference_path(mha, False)
    use_textbook_shaw(mha)
    x_ = x.clone().requires_grad_(True)
    got = mha(x_, x_, allowed, ctx)
    grads = torch.autograd.grad((got * torch.linspace(-1, 1, got.numel()).view_as(got)).sum(),
                                [x_, *mha.parameters(), *hook.parameters()])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6)


def test_shaw_paths_runs_from_an_installed_copy_without_the_tests(tmp_path: Path) -> None:
    """The bench as a wheel installs it: ``posenc`` alone on the path (a copy of src/posenc, run from
    another directory), so ``tests`` cannot be imported; ``--help`` and a tiny timing run work."""
    import subprocess
    import sys

    import posenc

    site = tmp_path / "site"
    shutil.copytree(Path(posenc.__file__).parent, site / "posenc", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "posenc.bench.shaw_paths"]
    shown = subprocess.run([*cmd, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "--lengths" in shown.stdout, shown.stderr
    tiny = ["--lengths", "8", "--tokens", "16", "--reps", "1", "--d", "16", "--heads", "2"]
    ran = subprocess.run([*cmd, *tiny], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    rows = [line.split("|")[2].strip() for line in ran.stdout.splitlines() if line.startswith("| 8 |")]
    assert rows == ["reference", "scatter", "banded", "sdpa"]
