"""The attention interface's bias and logits hooks (issue 27 §3).

* Bias hook: ALiBi and T5 hand the layer their bias for the *scaled* logits. Whole models (seq2seq
  teacher-forced logits: bidirectional encoder, causal decoder; LM full-pass and incremental
  logits) for alibi (symmetric and asymmetric) and t5 must equal, to float noise, the same weights
  run through textbook attention softmax(q·k/√Dh + b, masked)·v with the bias b written out from
  the papers in this file (ALiBi's slopes × distance, T5's buckets by the reference recipe); no
  stored numbers, so the test holds on every processor.
* Logits hook: a hook that sees q, k and the scaled, masked logits, checked against the explicit
  softmax it must equal.
"""

from __future__ import annotations

import math
import types
from typing import Callable

import pytest
import torch
from torch import Tensor

from posenc.config import from_dict
from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.models.lm import DecoderLM, LMConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import registry
from posenc.positions.base import AttentionHook, PositionContext
from tests.conftest import tiny_config
from tests.helpers.reference_attention import hooked

V, PAD, BOS = 20, 0, 2
#: Bias-only methods and their options (asymmetric ALiBi exercises the bidirectional left offset).
CASES = {"alibi": {}, "alibi-asym": {"alibi": {"asymmetric": True}}, "t5": {"t5": {"num_buckets": 8, "max_distance": 16}}}


def _name(case: str) -> str:
    return case.split("-")[0]


def _inputs() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fixed right-padded source ``(2, 7)`` and target ``(2, 6)`` with masks."""
    g = torch.Generator().manual_seed(27)
    src_mask = torch.arange(7)[None] < torch.tensor([7, 5])[:, None]
    tgt_mask = torch.arange(6)[None] < torch.tensor([6, 4])[:, None]
    src = torch.randint(4, V, (2, 7), generator=g).masked_fill(~src_mask, PAD)
    tgt = torch.randint(4, V, (2, 6), generator=g).masked_fill(~tgt_mask, PAD)
    tgt[:, 0] = BOS
    return src, src_mask, tgt, tgt_mask


def outputs(case: str, textbook: bool = False, bias: bool = True) -> dict[str, Tensor]:
    """Seq2seq logits and LM full-pass / incremental logits of one seeded model per case (``textbook``:
    every attention through :func:`_use_paper_attention`'s, with or without the ``bias``)."""
    src, src_mask, tgt, tgt_mask = _inputs()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(tiny_config(_name(case), vocab=V, position_params=CASES[case]), pad_id=PAD).eval()
    torch.manual_seed(0)
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 24, "heads": 4, "d_ff": 48, "vocab_size": V,
                               "position": {"name": _name(case), **CASES[case]}})
    lm = DecoderLM(cfg, pad_id=PAD).eval()
    if textbook:
        _use_paper_attention(model, case, lambda name: not name.startswith("encoder."), bias)
        _use_paper_attention(lm, case, lambda name: True, bias)
    with torch.no_grad():
        out = {"seq2seq": model(src, src_mask, tgt, tgt_mask), "lm": lm(tgt, tgt_mask)}
        state = lm.init_state(2)
        out["lm_steps"] = torch.stack([lm.step(tgt[:, t], state) for t in range(tgt.shape[1])], 1)
    return out


def _alibi_slopes(heads: int) -> Tensor:
    """Press et al. 2022, §3, for H a power of two: the geometric sequence 2^(-8/H), 2^(-16/H), ..., 2^-8."""
    assert heads & (heads - 1) == 0, heads
    return torch.tensor([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])


def _t5_bucket(rel: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5's bucket of the relative position ``rel = j - i`` (the reference recipe, one pair at a time):
    bidirectional → half the buckets for j > i; distances below half a half's buckets are exact,
    larger ones log-spaced up to ``max_distance``, farther ones in the last bucket."""
    n, bucket = -rel, 0
    if bidirectional:
        num_buckets //= 2
        bucket, n = (num_buckets if n < 0 else 0), abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


def _paper_bias(case: str, hook: AttentionHook, heads: int, lq: int, lk: int, causal: bool) -> Tensor:
    """The bias ``(1, H, Lq, Lk)`` of queries at positions lk-lq..lk-1 (a full pass or one cached step)
    and keys at 0..lk-1, from the papers: ALiBi -m_h·|i - j| (asymmetric, bidirectional: + m_h/2 for
    j < i), T5 the stack's learned scalar b_h[bucket(j - i)]."""
    i = torch.arange(lk - lq, lk, dtype=torch.float64)[:, None]
    j = torch.arange(lk, dtype=torch.float64)[None, :]
    if _name(case) == "alibi":
        distance = (i - j).abs() - (0.5 * (j < i) if case == "alibi-asym" and not causal else 0.0)
        return (-_alibi_slopes(heads).double()[:, None, None] * distance).float()[None]
    t5 = CASES[case]["t5"]
    buckets = torch.tensor([[_t5_bucket(int(b - a), t5["num_buckets"], t5["max_distance"], not causal)
                             for b in j[0]] for a in i[:, 0]])
    return hook.table.weight[buckets].permute(2, 0, 1)[None]


def _use_paper_attention(model: torch.nn.Module, case: str, causal: Callable[[str], bool], bias: bool) -> None:
    """Every attention module of ``model`` computes softmax(q·k/√Dh + bias, masked)·v, the bias from
    :func:`_paper_bias` in self-attention (bias hooks only: no score, value or logits term);
    ``causal(module name)``: is the module's stack causal; ``bias=False``: leave the bias out."""

    def attend(mha: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, hook: AttentionHook,
               ctx: PositionContext | None, is_causal: bool) -> Tensor:
        assert not (hook.has_score or hook.has_value or hook.has_logits or hook.has_transform)
        logits = q @ k.transpose(-1, -2) / math.sqrt(mha.dh)
        if hook.has_bias and bias:
            logits = logits + _paper_bias(case, hook, mha.h, q.shape[2], k.shape[2], is_causal)
        return torch.softmax(logits.masked_fill(~allowed, float("-inf")), -1) @ v

    for name, m in model.named_modules():
        if isinstance(m, MultiHeadAttention):
            m._attend = types.MethodType(lambda mha, *a, c=causal(name): attend(mha, *a, is_causal=c), m)  # noqa: B008


#: Largest |fast − textbook| over the logits of all cases: measured 1.3e-6 (Intel Xeon, ATen's avx2 and
#: avx512 kernels), 1.7e-6 (its default kernels); 1e-4 is a 60x margin, and 200x below the smallest effect of
#: leaving the bias out (0.027, t5).
TOLERANCE = 1e-4


@pytest.mark.parametrize("case", list(CASES))
def test_bias_methods_equal_the_paper_bias_in_textbook_attention(case: str) -> None:
    fast, textbook = outputs(case), outputs(case, textbook=True)
    for key, value in fast.items():
        torch.testing.assert_close(value, textbook[key], rtol=0, atol=TOLERANCE, msg=f"{case}/{key}")
        assert value.abs().max() > 0.1  # logits of a model, not zeros
    unbiased = outputs(case, textbook=True, bias=False)  # control: the bias is more than float noise
    assert all((value - unbiased[key]).abs().max() > 100 * TOLERANCE for key, value in fast.items())


class TableBias(AttentionHook[PositionContext]):
    """A bias hook with a fixed ``(1, H, Lq, Lk)`` table (any values: the layer must add them as given)."""

    has_bias = True

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = table

    def bias(self, ctx: PositionContext) -> Tensor:
        return self.table


class RecordingLogits(AttentionHook[PositionContext]):
    """A logits hook that records what it is given and adds q_i·(k_j ⊙ w) (reads both q and k)."""

    has_logits = True

    def __init__(self, w: Tensor) -> None:
        super().__init__()
        self.w = w
        self.seen: dict[str, Tensor] = {}

    def logits(self, q: Tensor, k: Tensor, logits: Tensor, ctx: PositionContext) -> Tensor:
        self.seen = {"q": q.clone(), "k": k.clone(), "logits": logits.clone()}
        return logits + q @ (k * self.w).transpose(-1, -2)


def _attention_case(causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    torch.manual_seed(3)
    x = torch.randn(2, 5, 12)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    return x, mask, may_attend_mask(mask, 5, causal)


def _textbook(mha: MultiHeadAttention, x: Tensor, allowed: Tensor, extra: Tensor) -> Tensor:
    """softmax(q·k/√Dh + extra, masked)·v through the output projection ``(B, L, D)``."""
    q, (k, v) = mha._split(mha.q_proj(x)), mha.project_kv(x)
    logits = (q @ k.transpose(-1, -2) / (mha.dh ** 0.5) + extra).masked_fill(~allowed, float("-inf"))
    out = torch.softmax(logits, -1) @ v
    return mha.out_proj(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


@pytest.mark.parametrize("causal", [False, True])
def test_bias_hook_is_added_to_the_scaled_logits(causal: bool) -> None:
    x, _, allowed = _attention_case(causal)
    table = torch.randn(1, 3, 5, 5)
    mha = MultiHeadAttention(12, 3, hook=TableBias(table)).eval()
    with torch.no_grad():
        got = mha(x, x, allowed)  # the module's own hook, given at construction: fused SDPA path
        torch.testing.assert_close(got, _textbook(mha, x, allowed, table), rtol=1e-5, atol=1e-6)
        with hooked(mha, TableBias(0 * table)):
            assert not torch.allclose(got, mha(x, x, allowed))
    assert "hook" not in str(list(mha.state_dict()))  # a reference, not a submodule


def test_logits_hook_sees_q_k_and_the_masked_scaled_logits() -> None:
    x, _, allowed = _attention_case(causal=True)
    w = torch.randn(4)
    hook = RecordingLogits(w)
    mha = MultiHeadAttention(12, 3, hook=hook).eval()
    with torch.no_grad():
        got = mha(x, x, allowed)
        q, (k, _) = mha._split(mha.q_proj(x)), mha.project_kv(x)
        assert torch.equal(hook.seen["q"], q) and torch.equal(hook.seen["k"], k)
        want_logits = (q @ k.transpose(-1, -2) * (1.0 / mha.dh ** 0.5)).masked_fill(~allowed, float("-inf"))
        torch.testing.assert_close(hook.seen["logits"], want_logits, rtol=1e-6, atol=1e-6)
        assert torch.isinf(hook.seen["logits"][~allowed.expand_as(want_logits)]).all()
        torch.testing.assert_close(got, _textbook(mha, x, allowed, q @ (k * w).transpose(-1, -2)), rtol=1e-5, atol=1e-6)


#: The part each flag declares: the hook method the layer calls when the flag is set.
PARTS = {"has_score": "score", "has_value": "value", "has_bias": "bias", "has_logits": "logits",
         "has_transform": "transform_q"}


@pytest.mark.parametrize("name", sorted(registry.ATTENTION) + ["shaw-keys", "shaw-values"])
def test_hooks_declare_exactly_the_parts_they_have(name: str) -> None:
    """Every flag is False unless a hook sets it (the defaults are the common case, no part), and each
    hook of every registered attention method declares at least one part, each one it defines."""
    assert not any(getattr(AttentionHook, flag) for flag in PARTS)
    options = {"shaw-keys": {"shaw": {"values": False}}, "shaw-values": {"shaw": {"keys": False}}}.get(name, {})
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 24, "heads": 4, "d_ff": 48, "vocab_size": V,
                               "position": {"name": _name(name), **options}})
    hooks = [m for m in DecoderLM(cfg, pad_id=PAD).modules() if isinstance(m, AttentionHook)]
    assert hooks
    for hook in hooks:
        declared = {flag for flag in PARTS if getattr(hook, flag)}
        assert declared, f"{name}: a hook without any part"
        for flag in declared:
            assert getattr(type(hook), PARTS[flag]) is not getattr(AttentionHook, PARTS[flag]), (name, flag)
