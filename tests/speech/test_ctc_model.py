"""CTC acoustic model: shapes, frame-centre times, position methods, masks, decoding."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.config import from_dict
from posenc.data import speech as sd
from posenc.errors import ConfigError
from posenc.models.ctc import CTCModel, CTCModelConfig, CTCOutput, ctc_loss, greedy_decode

SR, HOP, WIN = 8000, 80, 200
POS = {"sinusoidal": {"scale": 30.0}, "learned": {"max_positions": 8, "wrap": True}, "shaw": {"k": 4},
       "cape": {"max_global_shift": 60.0, "max_local_shift": 0.02, "max_global_scaling": 1.1}}


def model_for(name: str, **pos_over: dict) -> CTCModel:
    pos = {**POS, **pos_over, "name": name}
    cfg = from_dict(CTCModelConfig, {"d_model": 32, "heads": 4, "layers": 2, "d_ff": 48, "dropout": 0.0,
                                     "conv_channels": 24, "conv_kernel": 5, "conv_strides": [2, 2], "position": pos})
    return CTCModel(cfg, n_features=WIN // 2 + 1, vocab_size=28, hop_seconds=HOP / SR)


def batch(lengths=(8000, 5000, 12345), hop: float = HOP, padding_free: bool = False) -> sd.SpeechBatch:
    utts = [sd.Utterance(torch.randn(n), "one") for n in lengths]
    return sd.collate(utts, sd.CharVocab(), SR, hop, WIN, padding_free)


def run(model: CTCModel, b: sd.SpeechBatch, times: torch.Tensor | None = None) -> CTCOutput:
    return model(b.features, b.times if times is None else times, b.mask)


@pytest.mark.parametrize("name", ["sinusoidal", "cape", "learned", "rpe", "nopos"])
def test_shapes_and_lengths(name: str) -> None:
    b = batch()
    out = run(model_for(name).eval(), b)
    assert b.mask.sum(1).tolist() == [98, 61, 152]  # 1 + (N − 200) // 80 spectrogram frames
    assert out.log_probs.shape == (3, 38, 28)
    assert out.lengths.tolist() == [25, 16, 38]  # ⌈⌈T/2⌉/2⌉ after two stride-2 convs
    assert torch.allclose(out.log_probs.exp().sum(-1), torch.ones(3, 38), atol=1e-5)


def test_output_positions_are_frame_centre_seconds() -> None:
    out = run(model_for("cape").eval(), batch((4000,)))  # 48 frames → 12 output frames
    # input frame j is centred at (80 j + 100) / 8000 s; output frame i on input frame 4 i
    assert out.times.shape == (1, 12)
    expected = torch.tensor([0.0125 + 0.04 * i for i in range(12)])
    assert torch.allclose(out.times[0], expected, atol=1e-6)


def test_sinusoidal_uses_seconds_with_cape_frequencies() -> None:
    model = model_for("sinusoidal").eval()
    t = torch.tensor([[0.0125, 0.0525, 1.0]])
    pos = model.positions(t, torch.ones(1, 3, dtype=torch.bool))
    assert torch.equal(pos, t)  # raw seconds, no normalisation for plain sinpos
    pe = model.encoder.input_pos(torch.zeros(1, 3, 32), pos, torch.ones(1, 3, dtype=torch.bool))
    # CAPE §3: ω_k = 30 · 10000^(−2k/K); K = 32 → ω_0 = 30, ω_1 = 30 · 10000^(−1/16)
    assert torch.allclose(pe[0, :, 0], torch.sin(30 * t[0]), atol=1e-6)
    assert torch.allclose(pe[0, :, 1], torch.cos(30 * t[0]), atol=1e-6)
    assert torch.allclose(pe[0, :, 2], torch.sin(30 * 10000 ** (-1 / 16) * t[0]), atol=1e-6)


@pytest.mark.parametrize("normalize", [True, False])
def test_cape_eval_equals_sinusoidal_of_mean_normalised_times(normalize: bool) -> None:
    cape = model_for("cape", cape={**POS["cape"], "mean_normalize": normalize}).eval()
    sin = model_for("sinusoidal").eval()
    sin.load_state_dict(cape.state_dict())
    b = batch()
    out = run(cape, b)
    shift = torch.zeros(3, 1)
    if normalize:  # mean over the valid output frames of each row
        m = out.mask.float()
        shift = (out.times * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    ref = run(sin, b, b.times - shift)
    valid = out.mask[..., None]
    assert torch.allclose(out.log_probs * valid, ref.log_probs * valid, atol=1e-5)
    if normalize:  # and it differs from plain sinpos on raw times
        assert not torch.allclose(out.log_probs * valid, run(sin, b).log_probs * valid, atol=1e-3)


def test_cape_training_augmentation_keeps_frame_order() -> None:
    model = model_for("cape").train()
    out_t = torch.arange(200, dtype=torch.float32)[None] * 0.04 + 0.0125  # 8 s of output frames
    mask = torch.ones(1, 200, dtype=torch.bool)
    eval_pos = out_t - out_t.mean()
    spans = []
    for _ in range(200):
        pos = model.positions(out_t, mask)
        assert bool((pos[0, 1:] > pos[0, :-1]).all())  # ε_max = spacing / 2 → order kept
        # local shift ≤ 0.02 s and |Δ| ≤ 60 s before scaling by λ ∈ [1/1.1, 1.1]
        spans.append(float((pos[0, -1] - pos[0, 0]) / (eval_pos[0, -1] - eval_pos[0, 0])))
    lo, hi = (7.96 - 0.04) / 7.96 / 1.1, (7.96 + 0.04) / 7.96 * 1.1
    assert lo <= min(spans) and max(spans) <= hi and max(spans) - min(spans) > 0.05
    model.eval()
    assert torch.allclose(model.positions(out_t, mask), eval_pos)


def test_learned_uses_frame_index_mod_table_and_rpe_uses_indices() -> None:
    long = batch((16 * SR,))  # 1598 frames → 400 output frames ≫ table of 8
    learned = model_for("learned").eval()
    out = run(learned, long)
    index = learned.positions(out.times, out.mask)
    assert learned.cfg.frame_positions and torch.equal(index[0], torch.arange(400, dtype=torch.float32))
    table = learned.encoder.input_pos.table.weight
    pe = learned.encoder.input_pos(torch.zeros(1, 400, 32), index, out.mask)
    assert torch.equal(pe[0], table[torch.arange(400) % 8])  # E(t mod N), CAPE §5.2
    rpe = model_for("rpe").eval()
    idx = rpe.positions(out.times[:, :6], out.mask[:, :6])
    ctx = rpe.encoder.attn_pos.context(idx, idx)
    assert ctx.index[0, 0, 0].tolist() == [4, 5, 6, 7, 8, 8]  # clip(j − i, 4) + 4 from frame indices


def test_frame_index_follows_time_with_padding_free_hops() -> None:
    b = batch((8000, 6000), padding_free=True)  # both rows 73 frames; row 0 hop = 7800/72 samples
    model = model_for("learned", learned={"max_positions": 1000}).eval()
    out = run(model, b)
    index = model.positions(out.times, out.mask)
    expected = torch.round((out.times - out.times[:, :1]) / 0.04)
    assert torch.equal(index, expected)
    assert index[0, -1] > index[1, -1]  # the longer utterance spans more nominal frames


@pytest.mark.parametrize("name", ["cape", "rpe", "learned"])
def test_padded_batch_equals_single_utterances(name: str) -> None:
    model, b = model_for(name).eval(), batch()
    out = run(model, b)
    for row in range(3):
        t = int(b.mask[row].sum())
        one = model(b.features[row : row + 1, :t], b.times[row : row + 1, :t], b.mask[row : row + 1, :t])
        k = int(out.lengths[row])
        assert torch.allclose(out.log_probs[row, :k], one.log_probs[0], atol=1e-5)


def test_greedy_decode_merges_repeats_and_drops_blanks() -> None:
    best = torch.tensor([[0, 5, 5, 0, 5, 1, 1, 6, 0, 9], [3, 3, 0, 3, 0, 0, 0, 0, 0, 0]])
    logp = torch.nn.functional.one_hot(best, 12).float().log_softmax(-1)
    mask = torch.tensor([[True] * 9 + [False], [True] * 4 + [False] * 6])
    out = CTCOutput(logp, mask, torch.zeros(2, 10))
    assert greedy_decode(out) == [[5, 5, 1, 6], [3, 3]]


def test_ctc_loss_matches_hand_computed_single_frame() -> None:
    logp = torch.log(torch.tensor([[[0.2, 0.7, 0.1]]]))  # one frame, target "1": p = 0.7
    out = CTCOutput(logp, torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1))
    loss = ctc_loss(out, torch.tensor([[1]]), torch.tensor([1]))
    assert math.isclose(float(loss), -math.log(0.7), rel_tol=1e-5)


def test_config_rejects_even_kernel() -> None:
    with pytest.raises(ConfigError, match="conv_kernel must be odd"):
        CTCModelConfig(conv_kernel=4)
