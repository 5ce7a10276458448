"""Eval-mode equivalences (SHAPE = APE, CAPE = sinusoidal of mean-normalised positions), training
randomness, shift invariance of relative methods, and the learned table's range check."""

from __future__ import annotations

import pytest
import torch

from posenc.errors import DataError
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions.base import default_positions
from posenc.positions.cape import mean_normalize
from tests.conftest import tiny_config

V, PAD, BOS = 40, 0, 2


def model(name: str, **params) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(tiny_config(name, vocab=V, position_params=params), pad_id=PAD).eval()


def twin(reference: Seq2SeqTransformer, name: str, **params) -> Seq2SeqTransformer:
    """A model of another method loaded with ``reference``'s weights (strict: same parameters)."""
    other = model(name, **params)
    other.load_state_dict(reference.state_dict(), strict=True)
    return other


def batch() -> tuple[torch.Tensor, ...]:
    src_mask = torch.arange(7)[None] < torch.tensor([7, 4, 5])[:, None]
    tgt_mask = torch.arange(5)[None] < torch.tensor([5, 3, 4])[:, None]
    src = torch.randint(3, V, (3, 7)).masked_fill(~src_mask, PAD)
    tgt = torch.randint(3, V, (3, 5)).masked_fill(~tgt_mask, PAD)
    tgt[:, 0] = BOS
    return src, src_mask, tgt, tgt_mask


def manual(m: Seq2SeqTransformer, src, src_mask, tgt, tgt_mask, src_pos, tgt_pos) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder memory and logits of ``m`` with explicitly given positions (no augmentation)."""
    memory = m.encoder(m.src_embed(src), src_pos, src_mask)
    h = m.decoder(m.tgt_embed(tgt), tgt_pos, tgt_mask, memory, src_mask)
    return memory, m.logits(h)


@pytest.mark.parametrize("absolute", ["ape", "learned"])
def test_shape_in_eval_is_ape(absolute: str) -> None:
    """SHAPE §2.3: K = 0 at inference, so the trained model is an APE model."""
    ape = model(absolute)
    shape = twin(ape, f"{absolute}+shape", shape={"max_shift": 40})
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        assert torch.equal(shape(src, src_mask, tgt, tgt_mask), ape(src, src_mask, tgt, tgt_mask))
        assert torch.equal(shape.encode(src, src_mask), ape.encode(src, src_mask))
        s1 = shape.init_state(shape.encode(src, src_mask), src_mask)
        s2 = ape.init_state(ape.encode(src, src_mask), src_mask)
        for t in range(3):
            assert torch.equal(shape.step(tgt[:, t], s1), ape.step(tgt[:, t], s2))


def test_shape_inference_offset_shifts_both_sides() -> None:
    """The public SHAPE code's convention: eval positions are i + K on both sides."""
    ape = model("ape")
    shape = twin(ape, "shape", shape={"max_shift": 40, "inference_offset": 40})
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        memory, logits = manual(ape, src, src_mask, tgt, tgt_mask,
                                default_positions(src_mask) + 40, default_positions(tgt_mask) + 40)
        assert torch.equal(shape.encode(src, src_mask), memory)
        assert torch.equal(shape(src, src_mask, tgt, tgt_mask), logits)
        assert not torch.allclose(ape(src, src_mask, tgt, tgt_mask), logits, atol=1e-3)


@pytest.mark.parametrize("alpha", [1.0, 1.3])
def test_cape_in_eval_is_sinusoidal_of_mean_normalised_positions(alpha: float) -> None:
    """CAPE §4: eval = mean normalisation only; §5.3: source positions × α; target left as is."""
    ape = model("ape")
    cape = twin(ape, "cape", cape={"max_global_shift": 5.0, "max_global_scaling": 1.5, "source_scale": alpha})
    src, src_mask, tgt, tgt_mask = batch()
    src_pos = mean_normalize(default_positions(src_mask) * alpha, src_mask)
    with torch.no_grad():
        memory, logits = manual(ape, src, src_mask, tgt, tgt_mask, src_pos, default_positions(tgt_mask))
        assert torch.equal(cape.encode(src, src_mask), memory)
        assert torch.equal(cape(src, src_mask, tgt, tgt_mask), logits)
        # and the mean-normalised source positions really differ from 0..S-1
        assert not torch.allclose(ape.encode(src, src_mask), memory, atol=1e-3)


def test_model_positions_in_training() -> None:
    """Model level: SHAPE offsets differ per sequence and between source and target."""
    m = model("shape", shape={"max_shift": 3}).train()
    src_mask = torch.ones(400, 6, dtype=torch.bool)
    tgt_mask = torch.ones(400, 4, dtype=torch.bool)
    src_pos, tgt_pos = m.positions(src_mask, tgt_mask)
    src_k, tgt_k = src_pos[:, 0], tgt_pos[:, 0]
    assert torch.equal(src_pos - src_k[:, None], default_positions(src_mask))
    assert set(src_k.tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert len(set(zip(src_k.tolist(), tgt_k.tolist()))) == 16
    m.eval()
    src_pos, tgt_pos = m.positions(src_mask, tgt_mask)
    assert torch.equal(src_pos, default_positions(src_mask)) and torch.equal(tgt_pos, default_positions(tgt_mask))


@pytest.mark.parametrize("name, random", [("ape", False), ("rpe", False), ("shape", True), ("cape", True)])
def test_augmentation_only_randomises_training(name: str, random: bool) -> None:
    m = model(name).train()  # dropout is 0 in tiny_config, so only the augmentation is random
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        a, b = m(src, src_mask, tgt, tgt_mask), m(src, src_mask, tgt, tgt_mask)
        assert torch.equal(a, b) is not random
        m.eval()
        assert torch.equal(m(src, src_mask, tgt, tgt_mask), m(src, src_mask, tgt, tgt_mask))


def test_shape_with_zero_max_shift_trains_like_ape() -> None:
    ape = model("ape").train()
    shape = twin(ape, "shape", shape={"max_shift": 0}).train()
    src, src_mask, tgt, tgt_mask = batch()
    with torch.no_grad():
        assert torch.equal(shape(src, src_mask, tgt, tgt_mask), ape(src, src_mask, tgt, tgt_mask))


@pytest.mark.parametrize(
    "name, invariant",
    [("rpe", True), ("rr", True), ("rnn", True), ("nopos", True), ("ape", False), ("learned", False), ("ape+shaw", False)],
)
@pytest.mark.parametrize("shift", [3.0, 57.0])
def test_shift_invariance(name: str, invariant: bool, shift: float) -> None:
    """Relative-only methods give identical outputs when every position moves by a constant."""
    m = model(name)
    src, src_mask, tgt, tgt_mask = batch()
    src_pos, tgt_pos = default_positions(src_mask), default_positions(tgt_mask)
    with torch.no_grad():
        x = m.src_embed(src)
        enc, enc_shifted = m.encoder(x, src_pos, src_mask), m.encoder(x, src_pos + shift, src_mask)
        _, logits = manual(m, src, src_mask, tgt, tgt_mask, src_pos, tgt_pos)
        _, logits_shifted = manual(m, src, src_mask, tgt, tgt_mask, src_pos + shift, tgt_pos + shift)
    if invariant:
        assert torch.equal(enc, enc_shifted) and torch.equal(logits, logits_shifted)
    else:
        assert (enc - enc_shifted).abs().max() > 1e-3 and (logits - logits_shifted).abs().max() > 1e-3


def test_learned_position_out_of_range_is_a_data_error() -> None:
    m = model("learned", learned={"max_positions": 6})
    src, src_mask, tgt, tgt_mask = batch()  # source length 7 > 6
    with pytest.raises(DataError, match="learned.max_positions"):
        m.encode(src, src_mask)
    ok_src, ok_mask = src[1:2, :4], src_mask[1:2, :4]
    state = m.init_state(m.encode(ok_src, ok_mask), ok_mask)  # a short source is fine
    with torch.no_grad():
        for _ in range(6):
            m.step(torch.full((1,), BOS), state)
        with pytest.raises(DataError, match="outside the learned table"):  # decoding past the table
            m.step(torch.full((1,), BOS), state)


def test_learned_shape_training_can_leave_the_table() -> None:
    m = model("learned+shape", learned={"max_positions": 10}, shape={"max_shift": 100}).train()
    src, src_mask, tgt, tgt_mask = batch()
    with pytest.raises(DataError, match="max_positions"):
        m(src, src_mask, tgt, tgt_mask)
