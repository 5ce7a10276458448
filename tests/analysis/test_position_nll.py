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


def _write_spans(folder, rows):
    from posenc.analysis import plots

    folder.mkdir(parents=True)
    plots.write_csv(folder / "position_nll_spans.csv",
                    [{"model": m, "span": s, "positions": 1, "tokens": 1, "nll": n} for m, s, n in rows])
    plots.write_csv(folder / "position_nll.csv",  # position 1 seen, 2 unseen: one token each
                    [{"model": m, "position": 1 if s == "seen" else 2, "tokens": 1, "nll": n} for m, s, n in rows])
    return folder


def test_across_seeds_compares_every_pair_of_models_per_span_by_welch_over_the_seeds(tmp_path):
    from posenc.analysis.position_nll import across_seeds
    from posenc.evaluation.seeds import seed_test

    nll = {("a", "seen"): [1.0, 1.5, 2.0], ("b", "seen"): [2.0, 2.5, 3.5], ("c", "seen"): [4.0, 4.0, 5.0],
           ("a", "unseen"): [6.0, 6.5, 7.0], ("b", "unseen"): [5.0, 5.25, 5.75]}  # c scored no unseen position
    dirs = {seed: _write_spans(tmp_path / f"seed{seed}", [(m, s, v[i]) for (m, s), v in nll.items()])
            for i, seed in enumerate((1, 2, 3))}
    dirs[3] = _write_spans(tmp_path / "seed3b", [(m, s, v[2]) for (m, s), v in nll.items()] + [("d", "seen", 9.0)])
    pairs = across_seeds(dirs, tmp_path / "out")
    assert [(p["span"], p["model"], p["other"]) for p in pairs] == [
        ("seen", "a", "b"), ("seen", "a", "c"), ("seen", "b", "c"), ("unseen", "a", "b")]  # d: one seed only
    for p in pairs:
        t = seed_test(nll[p["model"], p["span"]], nll[p["other"], p["span"]])
        assert (p["diff"], p["low"], p["high"], p["p"], p["p_below"]) == (t.diff, t.low, t.high, t.p, t.p_below)
    assert pairs[0]["p_below"] < 0.5 < pairs[3]["p_below"]  # a below b on seen positions, above on unseen
    assert pairs[0]["diff"] == pytest.approx(1.5 - 8 / 3)  # means 1.5 and 8/3
    seeds = (tmp_path / "out" / "position_nll_seeds.csv").read_text().splitlines()
    assert seeds[0] == "span,model,seeds,nll,nll_seeds" and seeds[1] == "seen,a,1 2 3,1.5,1.0000 1.5000 2.0000"
    assert len(seeds) == 1 + 5
    assert "| unseen | a | b | +1.167 |" in (tmp_path / "out" / "position_nll_seeds.md").read_text()
    assert (tmp_path / "out" / "position_nll_seeds.png").is_file()


def test_windowed_nll_is_token_weighted_within_each_window():
    from posenc.analysis.position_nll import _windowed

    rows = [{"model": "a", "position": str(p), "tokens": str(t), "nll": str(n)}
            for p, t, n in ((1, 4, 1.0), (2, 2, 4.0), (3, 1, 9.0), (4, 0, 0.0))]
    assert _windowed(rows, 2) == {"a": {1: (4 * 1.0 + 2 * 4.0) / 6, 3: 9.0}}
    assert _windowed(rows, 1) == {"a": {1: 1.0, 2: 4.0, 3: 9.0}}  # a window without tokens is left out


def test_across_seeds_refuses_a_single_seed(tmp_path):
    from posenc.analysis.position_nll import across_seeds
    from posenc.errors import DataError

    with pytest.raises(DataError, match="at least 2 seeds"):
        across_seeds({1: _write_spans(tmp_path / "seed1", [("a", "seen", 1.0)])}, tmp_path / "out")
