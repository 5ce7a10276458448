"""CAPE Fig. 8: mean NLL per target position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.analysis.position_nll import position_nll, position_nll_table, seen_and_unseen
from posenc.models.rnn_nmt import RNNNMT, RNNConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config

PAIRS = [([4, 5, 6], [7, 8]), ([9, 10], [11, 12, 13, 14]), ([15], [16])]


def test_table_by_hand():
    logprobs = [np.array([-1.0, -2.0, -3.0]), np.array([-3.0])]
    assert position_nll_table(logprobs) == [
        {"position": 1, "tokens": 2, "nll": 2.0},
        {"position": 2, "tokens": 1, "nll": 2.0},
        {"position": 3, "tokens": 1, "nll": 3.0},
    ]
    assert position_nll_table(logprobs, window=2) == [{"position": 1, "tokens": 3, "nll": 2.0}, {"position": 3, "tokens": 1, "nll": 3.0}]


def hand_nll(model: torch.nn.Module) -> dict[int, list[float]]:
    """Per-position cross-entropy of each pair on its own (no padding, no batching)."""
    model.eval()
    per_position: dict[int, list[float]] = {}
    with torch.no_grad():
        for src, tgt in PAIRS:
            s, t_in = torch.tensor([src]), torch.tensor([[2, *tgt]])
            logits = model(s, s != 0, t_in, t_in != 0)[0]
            ce = torch.nn.functional.cross_entropy(logits, torch.tensor([*tgt, 3]), reduction="none")
            for j, v in enumerate(ce.tolist(), start=1):
                per_position.setdefault(j, []).append(v)
    return per_position


def test_position_nll_equals_hand_cross_entropy(tmp_path):
    models = {"ape": Seq2SeqTransformer(tiny_config("ape")), "rnn-nmt": RNNNMT(RNNConfig(hidden=16, encoder_layers=1, decoder_layers=1, dropout=0.0, vocab_size=40))}
    rows = position_nll(models, PAIRS, tmp_path, bos_id=2, eos_id=3, batch_size=2, train_max=3)
    assert len(rows) == 2 * 5  # positions 1..5 (longest target 4 + EOS) per model
    for name, model in models.items():
        expected = hand_nll(model)
        got = [r for r in rows if r["model"] == name]
        assert [r["position"] for r in got] == [1, 2, 3, 4, 5]
        assert [r["tokens"] for r in got] == [3, 3, 2, 1, 1]
        for r in got:
            assert r["nll"] == pytest.approx(np.mean(expected[r["position"]]), rel=1e-5)
    assert (tmp_path / "position_nll.csv").read_text().splitlines()[0] == "model,position,tokens,nll"
    assert (tmp_path / "position_nll.png").is_file()


def test_seen_and_unseen_are_token_weighted_means_either_side_of_the_training_eos():
    rows = [{"model": "a", "position": p, "tokens": t, "nll": n}
            for p, t, n in ((1, 4, 1.0), (2, 2, 2.0), (3, 2, 5.0), (4, 1, 8.0))]
    # train_max 1: positions 1-2 (the longest training target and its EOS) are seen
    assert seen_and_unseen(rows, 1) == [
        {"model": "a", "span": "seen", "positions": 2, "tokens": 6, "nll": (4 * 1.0 + 2 * 2.0) / 6},
        {"model": "a", "span": "unseen", "positions": 2, "tokens": 3, "nll": (2 * 5.0 + 8.0) / 3},
    ]
    assert [r["span"] for r in seen_and_unseen(rows, 3)] == ["seen"]  # nothing past position 4
