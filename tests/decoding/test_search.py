"""Greedy and beam search against hand-designed next-token tables, a reference search and a
real tiny Seq2SeqTransformer."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.decoding import Hypothesis, beam_search, gnmt_length_penalty, greedy_search, max_lengths
from posenc.errors import ConfigError
from tests.helpers.dummies import BOS, EOS, TableModel, table

A, B_, C = 3, 4, 5  # word tokens of the hand-made tables
V = 6


def lp(n_tokens_with_eos: int, alpha: float = 0.6) -> float:
    return ((5 + n_tokens_with_eos) / 6) ** alpha


def batch(srcs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in srcs)
    src = torch.zeros(len(srcs), width, dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, : len(s)] = torch.tensor(s)
    mask = torch.arange(width)[None] < torch.tensor([len(s) for s in srcs])[:, None]
    return src, mask


# Greedy takes "a" (0.6) and ends there (p = 0.6 * 0.4); beam 2 also keeps "b" whose EOS is
# far more likely (p = 0.4 * 0.9 = 0.36 > 0.24).
GREEDY_TRAP = table({BOS: {A: 0.6, B_: 0.4}, A: {EOS: 0.4, A: 0.35, B_: 0.25}, B_: {EOS: 0.9, A: 0.05, B_: 0.05}}, V)
# Beam 2 finishes "" (p = 0.3, |Y| = 1) at step 0 and "a c" (p = 0.27, |Y| = 3) at step 2: the
# GNMT length penalty (alpha = 0.6) prefers "a c", the raw probability prefers "".
LENGTH_FLIP = table(
    {BOS: {A: 0.6, EOS: 0.3, B_: 0.1}, A: {C: 0.9, EOS: 0.06, B_: 0.04}, B_: {C: 0.9, EOS: 0.1}, C: {EOS: 0.5, C: 0.3, B_: 0.2}},
    V,
)


def test_beam_beats_greedy_with_hand_computed_scores() -> None:
    model = TableModel(GREEDY_TRAP[None])
    src, mask = batch([[0, 7, 7]])
    assert greedy_search(model, src, mask, BOS, EOS) == [[A]]
    hyps = beam_search(model, src, mask, BOS, EOS, beam=2, n_best=2)[0]
    assert [h.tokens for h in hyps] == [[B_], [A]]
    assert hyps[0].score == pytest.approx(math.log(0.4 * 0.9) / lp(2), abs=1e-6)
    assert hyps[1].score == pytest.approx(math.log(0.6 * 0.4) / lp(2), abs=1e-6)
    assert beam_search(model, src, mask, BOS, EOS, beam=1)[0][0].tokens == [A]


def test_length_penalty_decides_between_hypotheses_of_different_length() -> None:
    model = TableModel(LENGTH_FLIP[None])
    src, mask = batch([[0, 7]])
    with_lp = beam_search(model, src, mask, BOS, EOS, beam=2, length_penalty=0.6, n_best=2)[0]
    assert [h.tokens for h in with_lp] == [[A, C], []]
    assert [h.score for h in with_lp] == pytest.approx([math.log(0.27) / lp(3), math.log(0.3)], abs=1e-6)
    raw = beam_search(model, src, mask, BOS, EOS, beam=2, length_penalty=0.0, n_best=2)[0]
    assert [h.tokens for h in raw] == [[], [A, C]]
    assert [h.score for h in raw] == pytest.approx([math.log(0.3), math.log(0.27)], abs=1e-6)
    assert greedy_search(model, src, mask, BOS, EOS) == [[A, C]]
    expected = Hypothesis([A, C], pytest.approx(math.log(0.27) / lp(3), abs=1e-6))
    assert beam_search(model, src, mask, BOS, EOS, beam=1)[0] == [expected]


def test_maximum_length_is_per_sentence_and_forces_eos() -> None:
    # EOS (0.01) never ranks among the 2 best continuations, so only the limit ends a hypothesis.
    probs = table({t: {A: 0.7, B_: 0.29, EOS: 0.01} for t in range(V)}, V)
    model = TableModel(probs[None])
    src, mask = batch([[0], [0, 7, 7], [0, 7, 7, 7, 7]])  # limits 1, 3, 5 with a = 1, b = 0
    assert max_lengths(mask, 1.0, 0).tolist() == [1, 3, 5]
    assert greedy_search(model, src, mask, BOS, EOS, max_len_a=1.0, max_len_b=0) == [[A], [A] * 3, [A] * 5]
    hyps = beam_search(model, src, mask, BOS, EOS, beam=2, max_len_a=1.0, max_len_b=0, n_best=2)
    for limit, sent in zip([1, 3, 5], hyps):
        assert sent[0].tokens == [A] * limit
        assert sent[0].score == pytest.approx((limit * math.log(0.7) + math.log(0.01)) / lp(limit + 1), abs=1e-5)
        assert [len(h.tokens) for h in sent] == [limit, limit]


def reference_beam(model: TableModel, key: int, limit: int, k: int, alpha: float) -> list[tuple[list[int], float]]:
    """Per-hypothesis Python beam search with the documented (fairseq) stopping rule."""
    beams: list[tuple[list[int], torch.Tensor]] = [([], torch.tensor(0.0))]
    finished: list[tuple[list[int], float]] = []
    for t in range(limit + 1):
        cands = []
        for toks, score in beams:
            logp = model.prefix_logp(key, toks)
            if t == limit:
                logp = torch.where(torch.arange(V) == EOS, logp, torch.tensor(float("-inf")))
            cands += [(score + logp[v], toks + [v]) for v in range(V)]
        cands = sorted(cands, key=lambda c: -float(c[0]))[: 2 * k]
        for score, seq in cands[:k]:
            if seq[-1] == EOS and math.isfinite(score) and len(finished) < k:
                finished.append((seq[:-1], float(score) / gnmt_length_penalty(t + 1, alpha)))
        if len(finished) >= k or t == limit:
            break
        beams = [(seq, score) for score, seq in cands if seq[-1] != EOS][:k]
    return sorted(finished, key=lambda f: -f[1])


@pytest.mark.parametrize("k,alpha", [(1, 0.6), (2, 0.0), (3, 0.6), (4, 1.0)])
def test_batched_beam_equals_reference_search(k: int, alpha: float) -> None:
    gen = torch.Generator().manual_seed(k)
    probs = torch.softmax(torch.randn(3, V, V, generator=gen) * 2, -1)
    probs[:, :, EOS] *= 3  # let hypotheses end at different steps
    model = TableModel(probs / probs.sum(-1, keepdim=True), noise=torch.randn(97, V, generator=gen))
    srcs = [[0, 7, 7, 7], [1, 7], [2, 7, 7, 7, 7, 7, 7], [1, 7, 7, 7, 7, 7]]
    src, mask = batch(srcs)
    got = beam_search(model, src, mask, BOS, EOS, beam=k, length_penalty=alpha, max_len_a=0.5, max_len_b=2, n_best=k)
    for sent, s, hyps in zip(range(len(srcs)), srcs, got):
        ref = reference_beam(model, s[0], int(0.5 * len(s) + 2), k, alpha)
        assert [h.tokens for h in hyps] == [toks for toks, _ in ref], f"sentence {sent}"
        assert [h.score for h in hyps] == pytest.approx([sc for _, sc in ref], abs=1e-5)


def test_batched_equals_single_sentence_and_beam1_equals_greedy() -> None:
    gen = torch.Generator().manual_seed(7)
    model = TableModel(torch.softmax(torch.randn(4, V, V, generator=gen) * 2, -1), noise=torch.randn(31, V, generator=gen))
    srcs = [[3, 7, 7], [0], [1, 7, 7, 7, 7, 7, 7, 7], [2, 7, 7, 7, 7]]
    src, mask = batch(srcs)
    both = beam_search(model, src, mask, BOS, EOS, beam=3, max_len_a=1.0, max_len_b=1, n_best=3)
    for s, hyps in zip(srcs, both):
        alone = beam_search(model, *batch([s]), BOS, EOS, beam=3, max_len_a=1.0, max_len_b=1, n_best=3)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-6)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    greedy = greedy_search(model, src, mask, BOS, EOS, max_len_a=1.0, max_len_b=1)
    beam1 = beam_search(model, src, mask, BOS, EOS, beam=1, max_len_a=1.0, max_len_b=1)
    assert greedy == [h[0].tokens for h in beam1]


def test_bad_arguments_raise_config_error() -> None:
    model = TableModel(GREEDY_TRAP[None])
    src, mask = batch([[0, 7]])
    with pytest.raises(ConfigError, match="n_best"):
        beam_search(model, src, mask, BOS, EOS, beam=2, n_best=3)
    with pytest.raises(ConfigError, match="beam"):
        beam_search(model, src, mask, BOS, EOS, beam=0)
    with pytest.raises(ConfigError, match="max_len_a"):
        greedy_search(model, src, mask, BOS, EOS, max_len_a=-1)


POSITIONS = ["ape", "learned", "shape", "cape", "rpe", "ape+shaw", "rnn", "rr", "nopos"]


@pytest.mark.parametrize("position", POSITIONS)
def test_transformer_batched_equals_unbatched(position: str) -> None:
    from posenc.models.seq2seq import Seq2SeqTransformer
    from tests.conftest import tiny_config

    model = Seq2SeqTransformer(tiny_config(position, vocab=20)).eval()
    with torch.no_grad():  # make EOS (3) likely enough that some beams finish early
        model.tgt_embed.weight[3] *= 4
    gen = torch.Generator().manual_seed(1)
    srcs = [torch.randint(4, 20, (n,), generator=gen).tolist() + [3] for n in (5, 2, 7)]
    src, mask = batch(srcs)
    kw = dict(bos_id=2, eos_id=3, max_len_a=1.0, max_len_b=0)
    both = beam_search(model, src, mask, beam=3, n_best=2, **kw)
    for s, hyps in zip(srcs, both):
        alone = beam_search(model, *batch([s]), beam=3, n_best=2, **kw)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)
        assert all(len(h.tokens) <= len(s) for h in hyps) and hyps
    greedy = greedy_search(model, src, mask, **kw)
    assert greedy == [h[0].tokens for h in beam_search(model, src, mask, beam=1, **kw)]
