"""posenc.hf on tiny, randomly initialised Hugging Face models (no download)."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="posenc.hf needs transformers (pip install posenc[hf])")

from posenc.errors import ConfigError, DataError  # noqa: E402
from posenc.hf import PositionAugmentedModel, PositionIdsCollator, augment_model, base_positions, inspect_model  # noqa: E402

V = 40


def llama() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   pad_token_id=0, bos_token_id=None, eos_token_id=None)
    return transformers.LlamaForCausalLM(cfg)


def gpt2(n_positions: int = 32) -> torch.nn.Module:
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=n_positions,
                                  pad_token_id=0, bos_token_id=None, eos_token_id=None)
    return transformers.GPT2LMHeadModel(cfg)


def batch(left_pad: bool) -> dict[str, torch.Tensor]:
    """Three rows of 6, 4 and 2 real tokens in width 6: ids and mask ``(3, 6)``."""
    ids = torch.randint(1, V, (3, 6))
    mask = torch.zeros(3, 6, dtype=torch.long)
    for row, n in enumerate((6, 4, 2)):
        mask[row, 6 - n:] = 1 if left_pad else mask[row, 6 - n:]
        mask[row, :n] = mask[row, :n] if left_pad else 1
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def capture_position_ids(model: torch.nn.Module) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []

    def hook(_: Any, args: tuple, kwargs: dict) -> None:
        seen.append(kwargs.get("position_ids"))  # None: the model picks its own

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def test_base_positions_count_real_tokens_for_left_and_right_padding() -> None:
    right = base_positions(batch(left_pad=False)["attention_mask"])
    left = base_positions(batch(left_pad=True)["attention_mask"])
    assert right[1].tolist() == [0, 1, 2, 3, 0, 0]
    assert left[1].tolist() == [0, 0, 0, 1, 2, 3]
    assert left[0].tolist() == right[0].tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(("build", "augment", "params"), [
    (llama, "shape", {"max_shift": 50}), (llama, "cape", {}), (gpt2, "shape", {"max_shift": 20}),
])
@pytest.mark.parametrize("left_pad", [False, True])
def test_eval_mode_reads_the_real_token_positions(build: Any, augment: str, params: dict, left_pad: bool) -> None:
    """Eval passes the positions training uses at zero augmentation (real tokens counted); with right
    padding the real tokens' logits equal the unwrapped model's exactly."""
    model = build().eval()
    wrapped = PositionAugmentedModel(model, augment, **params).eval()
    b = batch(left_pad)
    mask = b["attention_mask"].bool()
    counted = base_positions(mask).long()
    assert torch.equal(wrapped(**b).logits, model(**b, position_ids=counted).logits)
    if not left_pad:
        assert torch.equal(wrapped(**b).logits[mask], model(**b).logits[mask])


def test_gpt2_left_padding_reads_the_same_positions_in_training_and_eval() -> None:
    """Training counted real tokens while eval read raw indices (0.41 logit difference at
    K = 0 with left padding). Now SHAPE at K = 0 in training equals eval on the real tokens."""
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=32, embd_pdrop=0.0,
                                  resid_pdrop=0.0, attn_pdrop=0.0, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    wrapped = PositionAugmentedModel(transformers.GPT2LMHeadModel(cfg), "shape", max_shift=0)
    b = batch(left_pad=True)
    mask = b["attention_mask"].bool()
    with torch.no_grad():
        trained, evaluated = wrapped.train()(**b).logits, wrapped.eval()(**b).logits
    torch.testing.assert_close(evaluated[mask], trained[mask], rtol=1e-5, atol=1e-5)


def test_randomized_positions_are_sampled_at_eval_seeded_or_sequential_on_request() -> None:
    """As Ruoss et al. (2023) evaluate: random ordered positions at eval too, the same on every
    .eval(); ``eval="sequential"`` gives the real-token positions."""
    model = gpt2(n_positions=64)
    seen = capture_position_ids(model)
    b = batch(left_pad=True)
    mask = b["attention_mask"].bool()
    wrapped = PositionAugmentedModel(model, "randomized", max_len=64).eval()
    with torch.no_grad():
        wrapped(**b)
        wrapped.train().eval()(**b)
        PositionAugmentedModel(model, "randomized", max_len=64, eval="sequential").eval()(**b)
    first, again, sequential = seen[-3:]
    assert torch.equal(first, again) and not torch.equal(first[mask], sequential[mask])
    assert torch.equal(sequential, base_positions(mask).long())
    for row in range(3):
        assert (first[row][mask[row]].diff() > 0).all() and first[row].max() < 64


def test_the_trainer_keeps_labels_and_switches_positions_with_the_model_mode() -> None:
    """The Trainer keeps only the columns ``forward`` names (``labels`` included) and calls
    model.train()/model.eval(): training batches get augmented positions, evaluation batches not."""
    from transformers.utils import find_labels

    assert find_labels(PositionAugmentedModel) == ["labels"]
    model = gpt2()
    seen = capture_position_ids(model)
    wrapped = PositionAugmentedModel(model, "shape", max_shift=20)
    b = batch(left_pad=False)
    torch.manual_seed(0)
    for _ in range(5):
        wrapped.train()(**b, labels=b["input_ids"]).loss.backward()
    with torch.no_grad():
        wrapped.eval()(**b, labels=b["input_ids"])
    mask = b["attention_mask"].bool()
    assert any(not torch.equal(p[mask], base_positions(mask).long()[mask]) for p in seen[:5])
    assert torch.equal(seen[-1], base_positions(mask).long())


@pytest.mark.parametrize("bad", [None, object(), transformers.GPT2LMHeadModel, "gpt2"])
def test_augment_model_rejects_non_models_in_one_line(bad: Any) -> None:
    with pytest.raises(TypeError, match="posenc.hf: .*model instance") as err:
        augment_model(bad, "shape", max_shift=2)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("params", "match"), [
    ({"max_shift": 1.5}, "shape.max_shift"), ({"max_shift": 10**30}, "shape.max_shift"),
    ({"max_shift": True}, "shape.max_shift"), ({"max_shift": "3"}, "shape.max_shift"), ({"max_shit": 3}, "unexpected keyword"),
])
def test_bad_shape_parameters_fail_up_front_in_one_line(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:  # ConfigError is a ValueError
        augment_model(llama(), "shape", **params)
    assert "\n" not in str(err.value)


def test_randomized_beyond_a_learned_table_is_rejected_at_construction() -> None:
    with pytest.raises(ConfigError, match="draws positions up to 2047 but gpt2 has 32 learned positions"):
        augment_model(gpt2(n_positions=32), "randomized")
    augment_model(gpt2(n_positions=32), "randomized", max_len=32)


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_rotary_types_that_rescale_with_the_largest_position_are_refused(rope_type: str) -> None:
    extra = {"original_max_position_embeddings": 64, "short_factor": [1.0] * 4, "long_factor": [2.0] * 4} if rope_type == "longrope" else {}
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   rope_parameters={"rope_type": rope_type, "factor": 2.0, "rope_theta": 10000.0, **extra})
    with pytest.raises(ConfigError, match=f"rope_type '{rope_type}'"):
        augment_model(transformers.LlamaForCausalLM(cfg), "randomized")


def test_falcon_with_alibi_is_not_taken_for_a_rotary_model() -> None:
    common = dict(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(ConfigError, match="uses ALiBi"):
        augment_model(transformers.FalconForCausalLM(transformers.FalconConfig(alibi=True, **common)), "shape", max_shift=4)
    assert inspect_model(transformers.FalconForCausalLM(transformers.FalconConfig(alibi=False, **common))).family.name == "rotary"


@pytest.mark.parametrize("left_pad", [False, True])
def test_shape_training_shifts_each_row_by_one_offset_within_range(left_pad: bool) -> None:
    model = gpt2(n_positions=32)
    seen = capture_position_ids(model)
    wrapped = PositionAugmentedModel(model, "shape", max_shift=26).train()
    b = batch(left_pad)
    offsets = set()
    for _ in range(20):
        wrapped(**b)
        pos, mask = seen[-1], b["attention_mask"].bool()
        assert pos.dtype == torch.long and pos.min() >= 0 and pos.max() < 32
        shift = pos - base_positions(mask).long()
        for row in range(3):
            k = shift[row][mask[row]]
            assert (k == k[0]).all() and 0 <= int(k[0]) <= 26  # one k per sequence (Kiyono et al. §2.3)
            offsets.add(int(k[0]))
    assert len(offsets) > 5  # the offset is random per sequence and step


def test_rotary_shape_shift_leaves_logits_unchanged() -> None:
    """RoPE scores depend on p_q − p_k only, so SHAPE's shift is invisible to a rotary model."""
    model = llama()
    seen = capture_position_ids(model)
    wrapped = PositionAugmentedModel(model, "shape", max_shift=1000)
    b = batch(left_pad=False)
    plain = wrapped.eval()(**b).logits
    shifted = wrapped.train()(**b).logits
    assert seen[-1][:, 0].abs().sum() > 0  # the positions did move
    mask = b["attention_mask"].bool()
    torch.testing.assert_close(shifted[mask], plain[mask], rtol=1e-4, atol=1e-4)


def test_rotary_cape_passes_real_valued_positions_that_change_the_logits() -> None:
    model = llama()
    seen = capture_position_ids(model)
    wrapped = PositionAugmentedModel(model, "cape", max_local_shift=0.5, max_global_scaling=2.0)
    b = batch(left_pad=True)
    plain = wrapped.eval()(**b).logits
    jittered = wrapped.train()(**b).logits
    pos = seen[-1]
    assert pos.dtype.is_floating_point and not torch.equal(pos, pos.round())
    assert not torch.allclose(jittered, plain, atol=1e-4)


def test_without_attention_mask_cape_is_not_read_as_packed_sequences() -> None:
    """With no mask transformers splits non-consecutive position_ids into packed sequences; the
    wrapper always passes a mask, so no mask and an all-ones mask give the same logits."""
    wrapped = PositionAugmentedModel(llama(), "cape").train()
    ids = torch.randint(1, V, (2, 7))
    torch.manual_seed(3)
    a = wrapped(input_ids=ids).logits
    torch.manual_seed(3)
    b = wrapped(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert torch.equal(a, b)


def test_seeded_training_forward_is_deterministic() -> None:
    wrapped = PositionAugmentedModel(llama(), "cape").train()
    seen = capture_position_ids(wrapped.model)
    b = batch(left_pad=False)
    torch.manual_seed(7)
    first = wrapped(**b, labels=b["input_ids"]).loss
    torch.manual_seed(7)
    second = wrapped(**b, labels=b["input_ids"]).loss
    assert torch.equal(first, second) and torch.equal(seen[0], seen[1])
    wrapped(**b)
    assert not torch.equal(seen[1], seen[2])


def test_learned_positions_reject_cape_in_one_line() -> None:
    with pytest.raises(ConfigError, match="learned position embeddings") as err:
        PositionAugmentedModel(gpt2(), "cape")
    assert "\n" not in str(err.value)


def test_abacus_needs_digit_ids_and_is_refused_in_one_line() -> None:
    """Abacus shifts digit places a task gives (McLeish et al. 2024); over token counts it would
    shift every position but the first, so a Hugging Face model refuses it."""
    with pytest.raises(ConfigError, match="abacus shifts task-given digit ids") as err:
        PositionAugmentedModel(gpt2(), "abacus", max_shift=4)
    assert "\n" not in str(err.value)


def test_learned_positions_need_the_shift_to_fit() -> None:
    with pytest.raises(ConfigError, match="max_shift 32 must be < the 32"):
        PositionAugmentedModel(gpt2(n_positions=32), "shape", max_shift=32)
    wrapped = PositionAugmentedModel(gpt2(n_positions=32), "shape", max_shift=30).train()
    for seed in range(5):  # a 6-token row overflows at k >= 27: refused on the first batch, whatever k is drawn
        torch.manual_seed(seed)
        with pytest.raises(DataError, match="row of 6 tokens can reach position 35, .*32 learned positions: use rows "
                                            "of at most 2 tokens"):
            wrapped(**batch(left_pad=False))
    short = {"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)}
    assert wrapped(**short).logits.shape == (1, 2, V)  # 2 tokens + a shift of up to 30 fit 32 positions


@pytest.mark.parametrize("family", ["bloom", "mpt"])
def test_alibi_models_without_position_ids_are_refused_for_what_they_are(family: str) -> None:
    if family == "bloom":
        m = transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=V, hidden_size=16, n_layer=1, n_head=2))
    else:
        m = transformers.MptForCausalLM(transformers.MptConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2,
                                                               max_seq_len=32))
    with pytest.raises(ConfigError, match="takes no position_ids: .*ALiBi") as err:
        augment_model(m, "shape", max_shift=4)
    assert "BART" not in str(err.value) and "\n" not in str(err.value)


def test_wrapping_twice_is_refused_and_save_pretrained_saves_the_model(tmp_path: Any) -> None:
    model = gpt2()
    wrapped = augment_model(model, "shape", max_shift=4)
    for again in (lambda: augment_model(wrapped, "shape", max_shift=4), lambda: PositionAugmentedModel(wrapped, "shape")):
        with pytest.raises(ConfigError, match="already wraps .*wrap the original model once") as err:
            again()
        assert "BART" not in str(err.value)
    wrapped.save_pretrained(tmp_path)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


@pytest.mark.parametrize("model", ["t5", "bart"])
def test_models_without_position_ids_are_rejected(model: str) -> None:
    if model == "t5":
        cfg = transformers.T5Config(vocab_size=V, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2)
        m = transformers.T5ForConditionalGeneration(cfg)
    else:
        cfg = transformers.BartConfig(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2,
                                      encoder_ffn_dim=32, decoder_ffn_dim=32)
        m = transformers.BartForConditionalGeneration(cfg)
    with pytest.raises(ConfigError, match="takes no position_ids"):
        inspect_model(m)


def test_unknown_augmentation_lists_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match="registered: .*cape.*shape"):
        PositionAugmentedModel(llama(), "shpe")


def test_rotary_families_are_detected() -> None:
    cfg = transformers.GPTNeoXConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4)
    assert inspect_model(transformers.GPTNeoXForCausalLM(cfg)).family.name == "rotary"
    assert inspect_model(llama()).family.name == "rotary"
    learned = inspect_model(gpt2(n_positions=48))
    assert learned.family.name == "learned" and learned.max_positions == 48


def test_collator_adds_the_same_positions_as_the_wrapper() -> None:
    model = gpt2()
    b = batch(left_pad=True)
    collate = PositionIdsCollator(lambda feats: feats[0], model, "shape", max_shift=20)
    torch.manual_seed(5)
    out = collate([b])
    wrapped = PositionAugmentedModel(model, "shape", max_shift=20).train()
    seen = capture_position_ids(model)
    torch.manual_seed(5)
    wrapped(**b)
    assert torch.equal(out["position_ids"], seen[-1])
    assert torch.equal(out["input_ids"], b["input_ids"]) and torch.equal(out["attention_mask"], b["attention_mask"])


def test_randomized_positions_are_sorted_distinct_integers() -> None:
    model = llama()  # rotary: no table bound, so the augmentation's default L_max is fine
    seen = capture_position_ids(model)
    wrapped = PositionAugmentedModel(model, "randomized").train()
    b = batch(left_pad=True)
    wrapped(**b)
    pos, mask = seen[-1], b["attention_mask"].bool()
    assert torch.equal(pos, pos.round()) and pos[mask].min() >= 0
    for row in range(3):
        real = pos[row][mask[row]]
        assert (real[1:] > real[:-1]).all()  # a sorted subset of {0..L_max-1}: strictly increasing


@pytest.mark.parametrize("params", [{"max_global_shift": float("inf")}, {"max_local_shift": "0.5"}, {"max_global_scaling": float("nan")}])
def test_bad_cape_parameters_fail_up_front_in_one_line(params: dict) -> None:
    with pytest.raises(ValueError, match=f"cape.{next(iter(params))} must be a finite number"):
        augment_model(llama(), "cape", **params)


def _prefill_then_cached_steps(wrapped: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                               prefill: int, name: str) -> torch.Tensor:
    """Logits ``(B, L, V)`` of a manual decode: a forward over the first ``prefill`` columns with
    ``use_cache``, then one cached step per remaining column with the mask of everything so far,
    the cache passed as the keyword ``name``."""
    out = wrapped(input_ids=ids[:, :prefill], attention_mask=mask[:, :prefill], use_cache=True)
    logits = [out.logits]
    for t in range(prefill, ids.shape[1]):
        cache = out["cache"] if "cache" in out else out["past_key_values"]
        out = wrapped(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], use_cache=True, **{name: cache})
        logits.append(out.logits)
    return torch.cat(logits, dim=1)


def _cache_names(model: torch.nn.Module) -> list[str]:
    """The keywords ``model.forward`` takes a key/value cache by (``cache`` from transformers 5.24)."""
    return ["cache", "past_key_values"] if "cache" in inspect.signature(model.forward).parameters else ["past_key_values"]


@pytest.mark.parametrize(("build", "augment", "params"), [
    (gpt2, "shape", {"max_shift": 4}), (llama, "cape", {}), (llama, "randomized", {"max_len": 64, "eval": "sequential"}),
])
def test_prefill_and_cached_steps_read_the_positions_of_a_full_forward(build: Any, augment: str, params: dict) -> None:
    """With left padding the prefill counted real tokens but cached steps used
    the model's own positions (raw indices: 0.30 off on GPT-2). Now every cached step gets the
    position a full forward gives its token, so the logits agree."""
    model = build()
    wrapped = augment_model(model, augment, **params).eval()
    b = batch(left_pad=True)
    ids, mask = b["input_ids"], b["attention_mask"]
    ids, mask = torch.cat([ids, torch.randint(1, V, (3, 4))], 1), torch.cat([mask, torch.ones(3, 4, dtype=torch.long)], 1)
    real = mask.bool()
    assert real[:, 6:].all() and not real.all()  # rows 1 and 2 are left-padded in the prefill
    for name in _cache_names(model):
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", FutureWarning)  # past_key_values: deprecated from transformers 5.24
            full = wrapped(input_ids=ids, attention_mask=mask).logits
            stepped = _prefill_then_cached_steps(wrapped, ids, mask, prefill=6, name=name)
        torch.testing.assert_close(stepped[real], full[real], rtol=1e-5, atol=1e-5)


def test_cached_steps_need_the_mask_of_the_whole_sequence_and_sequential_randomized_positions() -> None:
    b = batch(left_pad=True)
    wrapped = augment_model(gpt2(), "shape", max_shift=4).eval()
    name = _cache_names(wrapped.model)[0]
    with torch.no_grad():
        cache = wrapped(**b, use_cache=True)[name]
        with pytest.raises(ConfigError, match=r"^posenc.hf: a cached step needs the attention mask of the 6 cached "
                                              r"and the 1 new tokens \(7 columns\), got 1$"):
            wrapped(input_ids=b["input_ids"][:, :1], attention_mask=torch.ones(3, 1), **{name: cache})
    sampled = augment_model(llama(), "randomized", max_len=64).eval()
    with torch.no_grad():
        cache = sampled(**b, use_cache=True)[name]
        with pytest.raises(ConfigError, match="sampled anew in every eval forward"):
            sampled(input_ids=b["input_ids"][:, :1], attention_mask=torch.ones(3, 7), **{name: cache})
