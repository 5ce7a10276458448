"""posenc.hf on a tiny, randomly initialised BART (learned positions inside encoder and decoder)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="posenc.hf needs transformers (pip install posenc[hf])")

from posenc.errors import ConfigError, DataError  # noqa: E402
from posenc.hf import PositionAugmentedModel, PositionAugmentedSeq2Seq, augment_model  # noqa: E402

V = 40


def bart(max_positions: int = 32) -> torch.nn.Module:
    cfg = transformers.BartConfig(vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, max_position_embeddings=max_positions, dropout=0.0,
                                  attention_dropout=0.0, activation_dropout=0.0)
    return transformers.BartForConditionalGeneration(cfg)


def pair() -> dict[str, torch.Tensor]:
    ids = torch.randint(3, V, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(3, V, (3, 5))}


def test_augment_model_picks_the_wrapper_by_interface() -> None:
    assert isinstance(augment_model(bart(), "shape", max_shift=4), PositionAugmentedSeq2Seq)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
    assert isinstance(augment_model(llama, "cape"), PositionAugmentedModel)


def test_eval_mode_and_zero_shift_reproduce_the_model_exactly() -> None:
    model = bart()
    b = pair()
    reference = model.eval()(**b).logits
    wrapped = augment_model(model, "shape", max_shift=0)
    assert torch.equal(wrapped.eval()(**b).logits, reference)
    assert torch.equal(wrapped.train()(**b).logits, reference)  # dropout 0: same positions, same logits


def test_training_reads_rows_shifted_by_one_offset_per_sequence() -> None:
    model = bart(max_positions=32)
    wrapped = augment_model(model, "shape", max_shift=20).train()
    used: dict[str, torch.Tensor] = {}
    for side in ("encoder", "decoder"):
        table = getattr(model.model, side).embed_positions
        table.register_forward_hook(lambda m, a, out, side=side: used.__setitem__(side, out))  # after ours
    b = pair()
    wrapped(**b)
    shifts = []
    for side, length in (("encoder", 7), ("decoder", 5)):
        table = getattr(model.model, side).embed_positions
        for row in range(3):
            n = int(b["attention_mask"][row].sum()) if side == "encoder" else length
            k = [k for k in range(21) if torch.equal(used[side][row, :n], table.weight[2 + k: 2 + k + n])]
            assert len(k) == 1  # exactly one shift k in {0..20} explains the row (Kiyono et al. §2.3)
            shifts += k
    assert max(shifts) > 0  # the rows did move (all six k = 0 has probability 21^-6)


def test_bart_rejects_cape_and_t5_is_rejected() -> None:
    with pytest.raises(ConfigError, match="learned position embeddings"):
        augment_model(bart(), "cape")
    t5 = transformers.T5ForConditionalGeneration(
        transformers.T5Config(vocab_size=V, d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2))
    with pytest.raises(ConfigError, match="no BART-style learned position tables"):
        augment_model(t5, "shape", max_shift=4)


@pytest.mark.parametrize("family", ["MBart", "PLBart", "Mvp", "Blenderbot", "BlenderbotSmall"])
def test_bart_style_families_reproduce_the_model_at_zero_shift_and_move_with_a_shift(family: str) -> None:
    cfg = getattr(transformers, f"{family}Config")(
        vocab_size=V, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    model = getattr(transformers, f"{family}ForConditionalGeneration")(cfg)
    b = pair()
    reference = model.eval()(**b).logits
    assert torch.equal(augment_model(model, "shape", max_shift=0).train()(**b).logits, reference)
    assert not torch.allclose(augment_model(model, "shape", max_shift=20).train()(**b).logits, reference)


def test_training_without_labels_or_decoder_inputs_uses_bart_s_own_decoder_input() -> None:
    """KeyError 'labels'. BART then decodes input_ids shifted right (target length = source)."""
    model = bart()
    wrapped = augment_model(model, "shape", max_shift=0).train()
    ids = torch.randint(3, V, (2, 6))
    out = wrapped(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert torch.equal(out.logits, model.eval()(input_ids=ids, attention_mask=torch.ones_like(ids)).logits)


def test_randomized_rows_are_sampled_at_eval_reproducibly() -> None:
    """As Ruoss et al. (2023) evaluate: the eval forward reads sampled rows, the same on every .eval()."""
    model = bart(max_positions=32)
    b = pair()
    reference = model.eval()(**b).logits
    wrapped = augment_model(model, "randomized", max_len=32).eval()
    with torch.no_grad():
        first, again = wrapped(**b).logits, wrapped.train().eval()(**b).logits
        sequential = augment_model(model, "randomized", max_len=32, eval="sequential").eval()(**b).logits
    assert torch.equal(first, again) and not torch.allclose(first, reference, atol=1e-4)
    assert torch.equal(sequential, reference)


def test_non_models_are_type_errors() -> None:
    with pytest.raises(TypeError, match="needs a model instance, got the class BartForConditionalGeneration"):
        augment_model(transformers.BartForConditionalGeneration, "shape", max_shift=2)
    with pytest.raises(TypeError, match="got NoneType"):
        PositionAugmentedSeq2Seq(None, "shape")  # type: ignore[arg-type]


def test_a_shift_past_the_table_is_refused_on_the_first_batch() -> None:
    """SHAPE offset + length past the learned table failed only on the draws that reached it."""
    wrapped = PositionAugmentedSeq2Seq(bart(max_positions=32), "shape", max_shift=26).train()
    batch = pair()
    assert int(batch["attention_mask"].sum(-1).max()) - 1 + 26 == 32  # only k = 26 reaches past row 31
    for seed in range(5):  # whatever shifts are drawn
        torch.manual_seed(seed)
        with pytest.raises(DataError, match="row of 7 tokens can reach position 32, .*32 learned positions"):
            wrapped(**batch)


def test_cached_decoder_steps_continue_the_prefill_under_either_cache_keyword() -> None:
    """A cached decoder step (``cache=`` from transformers 5.24, or ``past_key_values=``) runs the
    model untouched: its target position continues from the cache, and the step's logits equal
    the full decoder forward's at that position."""
    import inspect
    import warnings

    model = bart().eval()
    wrapped = augment_model(model, "shape", max_shift=4).eval()
    b = pair()
    src = {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}
    tgt = b["labels"]
    names = ["cache", "past_key_values"] if "cache" in inspect.signature(model.forward).parameters else ["past_key_values"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", FutureWarning)
        full = wrapped(**src, decoder_input_ids=tgt).logits
        for name in names:
            out = wrapped(**src, decoder_input_ids=tgt[:, :3], use_cache=True)
            cache = out["cache"] if "cache" in out else out["past_key_values"]
            step = wrapped(**src, decoder_input_ids=tgt[:, 3:4], use_cache=True, **{name: cache}).logits
            torch.testing.assert_close(step[:, 0], full[:, 3], rtol=1e-5, atol=1e-5)
