"""Every position method's translation model and decoder-only LM against a reference computed in
the test: the same weights with every attention module through textbook attention
(:func:`tests.helpers.reference_attention.textbook_attend`: softmax((q·k + q·a^K)/√Dh + bias,
masked)·v + Σ α a^V in the textbook order), so the fused and in-place paths, the caches and the
searches are checked without numbers stored on one processor.

Small seeded models of every method of the registry (tests/helpers/methods.py: a new method is
covered with no reference to regenerate) run on fixed inputs:

* teacher-forced logits (seq2seq; LM full pass and incremental steps) equal the textbook model's
  full-pass logits to :data:`TOLERANCE`;
* every token of greedy search (eager and fixed-shape) is an argmax of the textbook model's
  next-token log-probabilities up to :data:`TOLERANCE` (a near tie may go either way);
* every beam-4 hypothesis scores what the textbook model gives its tokens + EOS (GNMT, α = 0.6),
  to :data:`TOLERANCE` per token, and the n-best come best first.

The GRU encoder-decoder has no attention hook: its reference is its own teacher-forced pass.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from posenc.config import from_dict
from posenc.decoding.search import Hypothesis, beam_search, gnmt_length_penalty, greedy_search
from posenc.models.lm import DecoderLM, LMConfig
from posenc.models.rnn_nmt import RNNNMT, RNNConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config
from tests.helpers.methods import params_for, sequence_methods, uses
from tests.helpers.reference_attention import use_textbook_path

V, PAD, BOS, EOS = 20, 0, 2, 3
ALPHA, MAX_LEN_A, MAX_LEN_B = 0.6, 1.0, 3
#: |fast − textbook| on the logits of every method: measured ≤ 1.9e-6 (Intel Xeon, ATen's avx2 and
#: avx512 kernels), ≤ 2.4e-6 (its default kernels); 1e-4 is a 40x margin.
TOLERANCE = 1e-4


def _params(name: str) -> dict:
    """Shaw with small k (clipping exercised), randomized positions sequential; others at defaults."""
    params = {"shaw": {"k": 2}} if uses(name, "shaw") else {}
    return {**params, **({"randomized": params_for(name)["randomized"]} if uses(name, "randomized") else {})}


def _inputs() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fixed right-padded source ``(2, 6)`` and target ``(2, 4)`` with masks."""
    g = torch.Generator().manual_seed(19)
    src_mask = torch.arange(6)[None] < torch.tensor([6, 4])[:, None]
    tgt_mask = torch.arange(4)[None] < torch.tensor([4, 3])[:, None]
    src = torch.randint(4, V, (2, 6), generator=g).masked_fill(~src_mask, PAD)
    tgt = torch.randint(4, V, (2, 4), generator=g).masked_fill(~tgt_mask, PAD)
    tgt[:, 0] = BOS
    return src, src_mask, tgt, tgt_mask


def textbook(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose attention modules all take the textbook path."""
    ref = copy.deepcopy(model)
    use_textbook_path(ref)
    return ref


def _log_probs(ref: torch.nn.Module, src: Tensor, src_mask: Tensor, row: int, out: list[int]) -> Tensor:
    """The reference's teacher-forced log-probabilities ``(len(out) + 1, V)`` after BOS, ``out`` for source ``row``."""
    s, m = src[row : row + 1, : int(src_mask[row].sum())], src_mask[row : row + 1, : int(src_mask[row].sum())]
    tgt = torch.tensor([[BOS, *out]])
    with torch.no_grad():
        return torch.log_softmax(ref(s, m, tgt, torch.ones_like(tgt, dtype=torch.bool)), -1)[0]


def _check_greedy(ref: torch.nn.Module, src: Tensor, src_mask: Tensor, hyps: list[list[int]]) -> None:
    """Each token (and the EOS, unless the length limit forced it) is a near-argmax of the reference."""
    for row, out in enumerate(hyps):
        limit = int(MAX_LEN_A * int(src_mask[row].sum()) + MAX_LEN_B)
        logp = _log_probs(ref, src, src_mask, row, out)
        chosen = torch.tensor(out + ([EOS] if len(out) < limit else []))
        gap = logp[: len(chosen)].max(-1).values - logp[torch.arange(len(chosen)), chosen]
        assert gap.max() <= TOLERANCE, (row, out, gap)


def _check_beam(ref: torch.nn.Module, src: Tensor, src_mask: Tensor, beams: list[list[Hypothesis]]) -> None:
    """Each hypothesis's score is the reference's GNMT score of its tokens + EOS; best first."""
    for row, sent in enumerate(beams):
        assert sent and all(a.score >= b.score for a, b in zip(sent, sent[1:]))
        for h in sent:
            logp = _log_probs(ref, src, src_mask, row, h.tokens)
            total = logp.gather(1, torch.tensor([*h.tokens, EOS])[:, None]).sum()
            want = float(total / gnmt_length_penalty(len(h.tokens) + 1, ALPHA))
            assert abs(h.score - want) <= TOLERANCE * (len(h.tokens) + 1), (row, h, want)


def _check_translation(model: torch.nn.Module) -> None:
    src, src_mask, tgt, tgt_mask = _inputs()
    ref = textbook(model)
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_mask, tgt, tgt_mask), ref(src, src_mask, tgt, tgt_mask),
                                   rtol=0, atol=TOLERANCE)
    kw = dict(max_len_a=MAX_LEN_A, max_len_b=MAX_LEN_B)
    _check_greedy(ref, src, src_mask, greedy_search(model, src, src_mask, BOS, EOS, **kw))
    _check_greedy(ref, src, src_mask, greedy_search(model, src, src_mask, BOS, EOS, cuda_graph=True, **kw))
    _check_beam(ref, src, src_mask, beam_search(model, src, src_mask, BOS, EOS, beam=4, n_best=2,
                                                length_penalty=ALPHA, **kw))


@pytest.mark.parametrize("name", sequence_methods(causal=False))
def test_seq2seq_equals_textbook_attention(name: str) -> None:
    torch.manual_seed(0)
    cfg = tiny_config(name, vocab=V, position_params=_params(name), norm="pre" if name == "rope" else "post")
    _check_translation(Seq2SeqTransformer(cfg, pad_id=PAD).eval())


def test_rnn_nmt_searches_agree_with_its_teacher_forced_pass() -> None:
    torch.manual_seed(0)
    cfg = from_dict(RNNConfig, {"hidden": 16, "encoder_layers": 1, "decoder_layers": 2, "dropout": 0.0,
                                "vocab_size": V})
    _check_translation(RNNNMT(cfg, pad_id=PAD).eval())


@pytest.mark.parametrize("name", sequence_methods(causal=True))
def test_lm_equals_textbook_attention(name: str) -> None:
    torch.manual_seed(0)
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 32, "heads": 4, "d_ff": 64, "vocab_size": V,
                               "position": {"name": name, **_params(name)}})
    model = DecoderLM(cfg, pad_id=PAD).eval()
    ref = textbook(model)
    _, _, tokens, mask = _inputs()
    with torch.no_grad():
        want = ref(tokens, mask)
        torch.testing.assert_close(model(tokens, mask), want, rtol=0, atol=TOLERANCE)
        state = model.init_state(2)
        steps = torch.stack([model.step(tokens[:, t], state) for t in range(tokens.shape[1])], 1)
        torch.testing.assert_close(steps[mask], want[mask], rtol=0, atol=TOLERANCE)  # padded steps: no reference
        greedy, state, tok = [tokens[:, 0]], model.init_state(2, horizon=5), tokens[:, 0]
        for _ in range(5):
            tok = model.step(tok, state).argmax(-1)
            greedy.append(tok)
        seq = torch.stack(greedy, 1)
        logits = ref(seq, torch.ones_like(seq, dtype=torch.bool))[:, :-1]
    gap = logits.max(-1).values - logits.gather(2, seq[:, 1:, None])[..., 0]
    assert gap.max() <= TOLERANCE, gap
