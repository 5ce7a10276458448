"""The attention interface's bias and logits hooks (issue 27 §3).

* Bias hook: ALiBi and T5 hand the layer their bias for the *scaled* logits (no more "× √Dh so the
  layer can divide it back"). Their outputs must equal, with ``torch.equal``, reference tensors
  written by the code before the change (``tests/positions/data/bias_hook_reference.safetensors``):
  seq2seq teacher-forced logits (bidirectional encoder, causal decoder) and LM full-pass and
  incremental logits, for alibi (symmetric and asymmetric) and t5.
* Logits hook: a hook that sees q, k and the scaled, masked logits, checked against the explicit
  softmax it must equal.

Regenerate the reference (only when a change is *meant* to alter the numbers)::

    python -m tests.positions.test_attention_hooks
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from posenc.config import from_dict
from posenc.models.attention import MultiHeadAttention, attention_bias
from posenc.models.lm import DecoderLM, LMConfig
from posenc.positions.base import AttentionHook, PositionContext
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config

DATA = Path(__file__).parent / "data" / "bias_hook_reference.safetensors"
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


def outputs(case: str) -> dict[str, Tensor]:
    """Seq2seq logits and LM full-pass / incremental logits of one seeded model per case."""
    src, src_mask, tgt, tgt_mask = _inputs()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(tiny_config(_name(case), vocab=V, position_params=CASES[case]), pad_id=PAD).eval()
    torch.manual_seed(0)
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 24, "heads": 4, "d_ff": 48, "vocab_size": V,
                               "position": {"name": _name(case), **CASES[case]}})
    lm = DecoderLM(cfg, pad_id=PAD).eval()
    with torch.no_grad():
        out = {"seq2seq": model(src, src_mask, tgt, tgt_mask), "lm": lm(tgt, tgt_mask)}
        state = lm.init_state(2)
        out["lm_steps"] = torch.stack([lm.step(tgt[:, t], state) for t in range(tgt.shape[1])], 1)
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, Tensor]:
    return load_file(str(DATA))


@pytest.mark.parametrize("case", list(CASES))
def test_bias_methods_bit_identical_to_before_the_bias_hook(reference: dict[str, Tensor], case: str) -> None:
    for key, value in outputs(case).items():
        assert torch.equal(value, reference[f"{case}/{key}"]), f"{case}/{key} is not bit-identical"


class TableBias(AttentionHook[PositionContext]):
    """A bias hook with a fixed ``(1, H, Lq, Lk)`` table (any values: the layer must add them as given)."""

    has_score, has_value, has_bias = False, False, True

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = table

    def bias(self, ctx: PositionContext) -> Tensor:
        return self.table


class RecordingLogits(AttentionHook[PositionContext]):
    """A logits hook that records what it is given and adds q_i·(k_j ⊙ w) (reads both q and k)."""

    has_score, has_value, has_logits = False, False, True

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
    return x, mask, attention_bias(mask, 5, causal)


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
        assert not torch.allclose(got, MultiHeadAttention.forward(mha, x, x, allowed, hook=TableBias(0 * table)))
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


if __name__ == "__main__":  # regenerate the reference (one intra-op thread, as under pytest)
    torch.set_num_threads(1)
    save_file({f"{c}/{k}": v.contiguous() for c in CASES for k, v in outputs(c).items()}, str(DATA))
    print(f"wrote {DATA}")
