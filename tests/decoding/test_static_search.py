"""The device-batched search with a static KV cache reproduces the previous search exactly.

The reference (``reference_search``) is the earlier implementation: it drops finished sentences from
the batch, synchronises with the host every step and uses the models' growing ``torch.cat`` caches.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from posenc.decoding import beam_search, greedy_search
from posenc.decoding.search import reorder_state
from posenc.errors import ConfigError
from posenc.models.attention import KVCache, MultiHeadAttention, may_attend_mask
from posenc.models.layers import BeamInvariant
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config
from tests.decoding import reference_search as ref
from tests.helpers.cuda import cuda_only
from tests.helpers.methods import params_for, sequence_methods, uses

#: Every position method of the registry that a seq2seq model takes (all decode incrementally).
INCREMENTAL = sequence_methods(causal=False)
BOS, EOS = 2, 3


def _model(position: str, seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(tiny_config(position, vocab=24, position_params=params_for(position))).eval()
    with torch.no_grad():  # make EOS likely enough that sentences finish at different steps
        model.tgt_embed.weight[EOS] *= 2
    return model


def _batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, 24, (n,), generator=gen)
    return src, torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]


def _same(got: list, want: list) -> None:
    assert [[h.tokens for h in s] for s in got] == [[h.tokens for h in s] for s in want]
    for g, w in zip(got, want):
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-5)


@pytest.mark.parametrize("position", INCREMENTAL)
@pytest.mark.parametrize("beam,alpha", [(1, 0.6), (4, 0.6), (4, 0.0)])
def test_beam_search_equals_previous_search(position: str, beam: int, alpha: float) -> None:
    model = _model(position)
    src, mask = _batch([6, 2, 9, 4, 1])
    kw = dict(bos_id=BOS, eos_id=EOS, beam=beam, length_penalty=alpha, max_len_a=1.2, max_len_b=2, n_best=beam)
    got = beam_search(model, src, mask, **kw)
    want = ref.beam_search(model, src, mask, **kw)
    _same(got, want)
    lengths = {len(h.tokens) for s in got for h in s}
    assert len(lengths) > 1  # hypotheses of several lengths: early finishing was exercised


@pytest.mark.parametrize("position", INCREMENTAL)
def test_greedy_search_equals_previous_search(position: str) -> None:
    model = _model(position, seed=3)
    src, mask = _batch([3, 8, 5, 1], seed=4)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=3)
    assert greedy_search(model, src, mask, **kw) == ref.greedy_search(model, src, mask, **kw)
    assert greedy_search(model, src, mask, check_every=1, **kw) == greedy_search(model, src, mask, check_every=7, **kw)


def test_result_does_not_depend_on_the_check_interval_or_batch_order() -> None:
    model = _model("rr", seed=5)
    src, mask = _batch([7, 3, 5], seed=6)
    kw = dict(bos_id=BOS, eos_id=EOS, beam=3, n_best=3)
    base = beam_search(model, src, mask, check_every=1, **kw)
    _same(beam_search(model, src, mask, check_every=50, **kw), base)
    flip = torch.tensor([2, 1, 0])
    _same(beam_search(model, src[flip], mask[flip], **kw), [base[i] for i in flip.tolist()])
    with pytest.raises(ConfigError, match="check_every"):
        beam_search(model, src, mask, check_every=0, **kw)


def test_empty_batch_gives_empty_result() -> None:
    model = _model("ape")
    src, mask = torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 3, dtype=torch.bool)
    assert beam_search(model, src, mask, BOS, EOS) == [] and greedy_search(model, src, mask, BOS, EOS) == []


def test_static_cache_equals_concatenated_cache_through_appends_and_reorders() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    static, grown = KVCache(5), {}
    gen = torch.Generator().manual_seed(0)
    for t in range(5):
        x = torch.randn(6, 1, 16, generator=gen)
        allowed = may_attend_mask(torch.ones(6, t + 1, dtype=torch.bool), 1, causal=True, offset=t)
        a, b = attn(x, x, allowed, cache=static), attn(x, x, allowed, cache=grown)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        rows = torch.randperm(6, generator=gen)
        static, grown = reorder_state(static, rows), reorder_state(grown, rows)
        assert static.length == t + 1 and torch.equal(static.k[:, :, : t + 1], grown["k"])
    with pytest.raises(ValueError, match="full"):
        static.append(grown["k"][:, :, :1], grown["v"][:, :, :1])
    smaller = reorder_state(static, torch.tensor([4, 4, 0]))  # a row selection copies, leaves the original
    assert smaller is not static and torch.equal(smaller.k, static.k[[4, 4, 0]]) and smaller.length == 5


def test_beam_invariant_entries_are_kept_only_for_within_group_reorders() -> None:
    k = torch.arange(6.0)[:, None]
    state = {"cross": BeamInvariant(k=k), "h": k.clone()}
    rows = torch.tensor([1, 0, 2, 2, 5, 4])
    same = reorder_state(state, rows, within_groups=True)
    assert same["cross"] is state["cross"] and torch.equal(same["h"], k[rows])
    moved = reorder_state(state, rows)
    assert isinstance(moved["cross"], BeamInvariant) and torch.equal(moved["cross"]["k"], k[rows])


def test_static_state_preallocates_every_self_attention_cache() -> None:
    model = _model("ape")
    src, mask = _batch([3, 2])
    state = model.init_static_state(model.encode(src, mask), mask, 7)
    assert all(isinstance(layer.self_attn, KVCache) and layer.self_attn.max_len == 7 for layer in state.layers)
    model.step(torch.full((2,), BOS), state)
    cache = state.layers[0].self_attn
    assert cache.k.shape == (2, 4, 7, 16) and cache.length == 1


@cuda_only("CUDA-only: counts host synchronisations on the GPU")
@pytest.mark.parametrize("position", ["ape", "rpe", "rr"])
def test_cuda_search_syncs_only_at_the_periodic_checks(position: str) -> None:
    model = _model(position).cuda()
    with torch.no_grad():
        model.tgt_embed.weight[EOS] = 0  # long outputs: many steps, few early ends
    src, mask = (t.cuda() for t in _batch([12, 9, 12, 5]))
    kw = dict(bos_id=BOS, eos_id=EOS, beam=4, max_len_a=1.0, max_len_b=8, check_every=4)
    beam_search(model, src, mask, **kw)  # warm-up (lazy CUDA initialisation syncs)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = beam_search(model, src, mask, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    steps = 20  # max length 12 + 8 → at most 21 steps, a check every 4
    assert len(syncs) <= steps // 4 + 1 + 4, [str(w.message) for w in syncs][:8]  # + limit.max() + the final copies
    _same(got, ref.beam_search(model, src, mask, **{k: v for k, v in kw.items() if k != "check_every"}))


@pytest.mark.parametrize("position", INCREMENTAL)
@pytest.mark.parametrize("beam", [1, 4])
def test_fixed_shape_steps_equal_previous_search(position: str, beam: int) -> None:
    """``cuda_graph=True`` on CPU runs the graph's body eagerly: fixed shapes, device step counter,
    write-back of replaced state entries; the results must not change."""
    model = _model(position)
    src, mask = _batch([6, 2, 9, 4, 1])
    kw = dict(bos_id=BOS, eos_id=EOS, beam=beam, length_penalty=0.6, max_len_a=1.2, max_len_b=2, n_best=beam)
    _same(beam_search(model, src, mask, cuda_graph=True, **kw), ref.beam_search(model, src, mask, **kw))
    gkw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=3)
    assert greedy_search(model, src, mask, cuda_graph=True, **gkw) == ref.greedy_search(model, src, mask, **gkw)


def test_fixed_shape_state_counts_steps_on_the_device() -> None:
    model = _model("rope")
    src, mask = _batch([3, 2])
    state = model.init_static_state(model.encode(src, mask), mask, 6, fixed_shapes=True)
    for _ in range(3):
        model.step(torch.full((2,), BOS), state)
    assert state.steps.counter.value.tolist() == [3] and state.layers[0].self_attn.k.shape == (2, 4, 6, 16)
    assert reorder_state(state, torch.tensor([1, 0])).steps.counter is state.steps.counter  # no batch dimension: not reordered


#: Methods whose step has no host synchronisation, so it must be captured (learned positions check
#: their range on the host; the GRU's capture depends on cuDNN: both may fall back to eager steps).
CAPTURABLE = [n for n in INCREMENTAL if not any(uses(n, m) for m in ("learned", "gru", "randomized"))]


#: The GPU capture test runs one method per code path (each case captures several graphs; all of
#: INCREMENTAL took minutes): an input method, the learned table (host-side range check), every
#: attention family, each augmentation, and the GRU; the CPU tests above cover every method.
GPU_GRAPHED = [n for n in ("sinusoidal", "learned", "alibi", "rope", "shaw", "t5", "sinusoidal+shape",
                           "rope+cape", "sinusoidal+randomized", "gru") if n in INCREMENTAL]


@cuda_only("CUDA-only: captures and replays a CUDA graph")
@pytest.mark.parametrize("position", GPU_GRAPHED)
def test_cuda_graph_search_equals_eager_search_on_gpu(position: str) -> None:
    model = _model(position).cuda()
    src, mask = (t.cuda() for t in _batch([6, 2, 9, 4, 1]))
    kw = dict(bos_id=BOS, eos_id=EOS, beam=4, length_penalty=0.6, max_len_a=1.2, max_len_b=2, n_best=4)
    gkw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = beam_search(model, src, mask, cuda_graph=True, **kw)
        greedy = greedy_search(model, src, mask, cuda_graph=True, **gkw)
    fallbacks = [str(w.message) for w in caught if "CUDA graph capture failed" in str(w.message)]
    if position in CAPTURABLE:
        assert fallbacks == []
    _same(graphed, ref.beam_search(model, src, mask, **kw))
    assert greedy == ref.greedy_search(model, src, mask, **gkw)
    with torch.autocast("cuda", dtype=torch.bfloat16):  # bf16 caches (as in the bench): a graph replays twice alike
        twice = [beam_search(model, src, mask, cuda_graph=True, **kw) for _ in range(2)]
    _same(twice[0], twice[1])
    assert all(len(s) == 4 for s in twice[0])
