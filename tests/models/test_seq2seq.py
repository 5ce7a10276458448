"""Seq2SeqTransformer for every position method: shapes, incremental decoding, beam reordering, padding."""

from __future__ import annotations

import pytest
import torch

from posenc.decoding.search import reorder_state
from posenc.models.seq2seq import Seq2SeqState, Seq2SeqTransformer
from tests.conftest import tiny_config
from tests.helpers.methods import params_for, sequence_methods

V, PAD, BOS = 40, 0, 2
#: Every 1-D method and augmentation pair of the registry that a bidirectional encoder takes.
METHODS = sequence_methods(causal=False)

# id -> (position name, position params, model overrides): every method plus options that change code paths.
CASES: dict[str, tuple[str, dict, dict]] = {name: (name, params_for(name), {}) for name in METHODS}
CASES.update({
    "shape-offset": ("shape", {"shape": {"inference_offset": 5}}, {}),
    "learned+shape-offset": ("learned+shape", {"shape": {"inference_offset": 3, "exclusive_max": True}}, {}),
    "cape-alpha": ("cape", {"cape": {"source_scale": 1.3}}, {}),
    "cape-raw": ("cape", {"cape": {"mean_normalize": False}}, {}),
    "rpe-keys": ("rpe", {"shaw": {"k": 2, "values": False}}, {}),  # fused attention with a bias
    "rpe-values": ("rpe", {"shaw": {"k": 2, "keys": False}}, {}),
    "rpe-shared": ("rpe", {"shaw": {"k": 2, "share_tables": True}}, {}),
    "rr-2gru": ("rr", {"gru": {"num_layers": 2}, "shaw": {"k": 3}}, {}),
    "ape+shaw-pre": ("ape+shaw", {}, {"norm": "pre"}),
    "ape-untied": ("ape", {}, {"share_embeddings": "none"}),
    "ape+alibi": ("ape+alibi", {}, {}),
    "rpe-k16": ("rpe", {}, {}),
})


def build(case: str, train: bool = False) -> Seq2SeqTransformer:
    name, params, overrides = CASES[case]
    model = Seq2SeqTransformer(tiny_config(name, vocab=V, position_params=params, **overrides), pad_id=PAD)
    return model.train(train)


def batch(src_lens: list[int], tgt_lens: list[int]) -> tuple[torch.Tensor, ...]:
    """Right-padded random tokens (ids ≥ 3), target starting with BOS, and masks."""
    s, t = max(src_lens), max(tgt_lens)
    src_mask = torch.arange(s)[None] < torch.tensor(src_lens)[:, None]
    tgt_mask = torch.arange(t)[None] < torch.tensor(tgt_lens)[:, None]
    src = torch.randint(3, V, (len(src_lens), s)).masked_fill(~src_mask, PAD)
    tgt = torch.randint(3, V, (len(tgt_lens), t)).masked_fill(~tgt_mask, PAD)
    tgt[:, 0] = BOS
    return src, src_mask, tgt, tgt_mask


def decode_steps(model: Seq2SeqTransformer, src, src_mask, tgt) -> tuple[torch.Tensor, Seq2SeqState]:
    state = model.init_state(model.encode(src, src_mask), src_mask)
    logits = [model.step(tgt[:, t], state) for t in range(tgt.shape[1])]
    return torch.stack(logits, 1), state


@pytest.mark.parametrize("case", list(CASES))
def test_shapes_and_dtypes(case: str) -> None:
    model = build(case)
    d = model.cfg.d_model
    src, src_mask, tgt, tgt_mask = batch([6, 3], [5, 2])
    with torch.no_grad():
        logits = model(src, src_mask, tgt, tgt_mask)
        memory = model.encode(src, src_mask)
        state = model.init_state(memory, src_mask)
        step = model.step(tgt[:, 0], state)
    assert logits.shape == (2, 5, V) and logits.dtype == torch.float32
    assert memory.shape == (2, 6, d) and memory.dtype == torch.float32
    assert step.shape == (2, V) and step.dtype == torch.float32
    assert state.steps.step == 1 and state.steps.positions.shape == (2, 1)
    assert torch.isfinite(logits).all() and torch.isfinite(step).all()


@pytest.mark.parametrize("case", list(CASES))
def test_training_forward_reaches_every_parameter(case: str) -> None:
    model = build(case, train=True)
    src, src_mask, tgt, tgt_mask = batch([6, 3], [5, 2])
    logits = model(src, src_mask, tgt, tgt_mask)
    assert logits.shape == (2, 5, V)
    logits[tgt_mask].logsumexp(-1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


@pytest.mark.parametrize("case", list(CASES))
def test_incremental_decoding_equals_full_pass(case: str) -> None:
    model = build(case)
    src, src_mask, tgt, tgt_mask = batch([7, 4, 2], [6, 6, 6])  # padded source batch
    with torch.no_grad():
        full = model(src, src_mask, tgt, tgt_mask)
        steps, state = decode_steps(model, src, src_mask, tgt)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)
    assert state.steps.step == 6


@pytest.mark.parametrize("case", list(CASES))
def test_reorder_state_then_step_equals_stepping_selected_rows(case: str) -> None:
    model = build(case)
    src, src_mask, tgt, tgt_mask = batch([7, 4, 2], [5, 5, 5])
    index = torch.tensor([2, 0, 0, 1])  # beam search: drop, duplicate and permute rows
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
        for t in range(2):
            model.step(tgt[:, t], state)
        picked = reorder_state(state, index)
        assert picked.memory_mask.shape == (4, src.shape[1]) and picked.steps.step == 2
        for t in range(2, 5):
            got = model.step(tgt[index, t], picked)
            want = model.step(tgt[:, t], state)[index]
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        # and the same as decoding the selected sentences from scratch
        fresh, _ = decode_steps(model, src[index], src_mask[index], tgt[index])
    torch.testing.assert_close(got, fresh[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_do_not_depend_on_batch_padding(case: str) -> None:
    model = build(case)
    src, src_mask, tgt, tgt_mask = batch([9, 4, 6], [8, 3, 5])
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        logits = model(src, src_mask, tgt, tgt_mask)
        for i in range(3):
            s, t = int(src_mask[i].sum()), int(tgt_mask[i].sum())
            one_src, one_tgt = src[i : i + 1, :s], tgt[i : i + 1, :t]
            ones_s, ones_t = src_mask[i : i + 1, :s], tgt_mask[i : i + 1, :t]
            alone_memory = model.encode(one_src, ones_s)
            alone_logits = model(one_src, ones_s, one_tgt, ones_t)
            torch.testing.assert_close(memory[i, :s], alone_memory[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(logits[i, :t], alone_logits[0], atol=1e-5, rtol=0)


def test_untied_output_layer_is_used() -> None:
    model = build("ape-untied")
    h = torch.randn(2, 3, model.cfg.d_model)
    torch.testing.assert_close(model.logits(h), h @ model.output.weight.t(), atol=0, rtol=0)
    tied = build("sinusoidal")
    torch.testing.assert_close(tied.logits(h), h @ tied.tgt_embed.weight.t(), atol=0, rtol=0)


@pytest.mark.parametrize("name", ["rpe", "t5", "ape"])
def test_layers_get_their_hook_at_construction_and_do_not_own_it(name: str) -> None:
    """Each layer holds the stack's hook for its index (Shaw: one per layer; T5: one shared; the
    null hook without an attention method); the parameters stay under ``attn_pos`` only."""
    model = Seq2SeqTransformer(tiny_config(name, vocab=V), pad_id=PAD)
    for stack in (model.encoder, model.decoder):
        assert all(layer.hook is stack.attn_pos.hook(i) for i, layer in enumerate(stack.layers))
        assert not any(".hook." in key for key in stack.state_dict())
    names = [n for n, _ in model.named_parameters()]
    assert len(names) == len(set(names)) == len(list(model.parameters()))
