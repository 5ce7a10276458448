"""SHAPE Fig. 2: encoder-state similarity under position offsets."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from posenc.analysis.shift_invariance import encoder_states, shift_invariance, shift_similarity
from posenc.errors import ConfigError
from posenc.models.rnn_nmt import RNNNMT, RNNConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config

SOURCES = [[4, 5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17, 18]]


def test_relative_model_is_exactly_shift_invariant_and_ape_is_not(tmp_path):
    models = {"rpe": Seq2SeqTransformer(tiny_config("rpe")), "ape": Seq2SeqTransformer(tiny_config("ape"))}
    rows = shift_invariance(models, SOURCES, tmp_path, batch_size=2)
    rpe = np.array([r["similarity"] for r in rows if r["model"] == "rpe"]).reshape(4, 4)
    ape = np.array([r["similarity"] for r in rows if r["model"] == "ape"]).reshape(4, 4)
    np.testing.assert_allclose(rpe, 1.0, atol=1e-6)
    np.testing.assert_allclose(np.diag(ape), 1.0, atol=1e-6)
    assert ape.min() < 0.99
    np.testing.assert_allclose(ape, ape.T, atol=1e-9)
    with open(tmp_path / "shift_invariance.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 32 and table[1] == {"model": "rpe", "k1": "0", "k2": "100", "similarity": table[1]["similarity"]}
    assert (tmp_path / "shift_rpe.png").is_file() and (tmp_path / "shift_ape.png").is_file()


def test_similarity_by_hand():
    """Eq. 3 for one pair of offsets: mean over positions, then over sentences."""
    model = Seq2SeqTransformer(tiny_config("ape")).eval()
    got = shift_similarity(model, SOURCES, offsets=(0, 250))
    expected = []
    with torch.no_grad():
        for s in SOURCES:
            src = torch.tensor([s])
            a, b = (encoder_states(model, src, src != 0, k)[0] for k in (0, 250))
            expected.append(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean().item())
    assert got[0, 1] == pytest.approx(np.mean(expected), abs=1e-6)


def test_needs_a_transformer(tmp_path):
    rnn = RNNNMT(RNNConfig(hidden=8, encoder_layers=1, decoder_layers=1, vocab_size=20))
    with pytest.raises(ConfigError, match="needs a Seq2SeqTransformer, got RNNNMT"):
        shift_invariance({"rnn": rnn}, SOURCES, tmp_path)
