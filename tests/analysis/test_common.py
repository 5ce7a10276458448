"""Buckets, BLEU helper, padding/gold log-probs and the CSV/Markdown writers."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
import torch

from posenc.analysis import plots
from posenc.analysis.common import Buckets, corpus_bleu, gold_logprobs, pad
from posenc.errors import DataError
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config


def test_bucket_labels_and_assignment():
    b = Buckets((0, 10, 20))
    assert b.labels() == ["0-9", "10-19", "20-"]
    assert b.assign([0, 9, 10, 19, 20, 500]) == [0, 0, 1, 1, 2, 2]
    assert b.counts([3, 5, 12, 25, 61, 9]) == [3, 1, 2]
    assert Buckets.uniform(10, 71, first=1).labels()[:2] == ["1-10", "11-20"]
    assert Buckets.uniform(10, 71, first=1).labels()[-1] == "71-"
    assert Buckets.parse("1, 5001,15001").labels() == ["1-5000", "5001-15000", "15001-"]
    assert Buckets((0, 1, 2)).labels() == ["0", "1", "2-"]


def test_bucket_errors():
    with pytest.raises(DataError, match="below the first bucket edge 1"):
        Buckets((1, 5)).index(0)
    with pytest.raises(DataError, match="increasing"):
        Buckets((5, 5))
    with pytest.raises(DataError, match="comma-separated"):
        Buckets.parse("a,b")


def test_corpus_bleu_is_sacrebleu():
    hyps, refs = ["the cat sat on the mat", "a dog"], ["the cat sat on a mat", "a dog barked"]
    assert corpus_bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert corpus_bleu([], []) is None


def test_pad():
    tokens, mask = pad([[4, 5, 6], [7]], pad_id=0)
    assert tokens.tolist() == [[4, 5, 6], [7, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_gold_logprobs_by_hand():
    model = Seq2SeqTransformer(tiny_config("ape", vocab=20))
    pairs = [([4, 5, 6], [7, 8]), ([9], [10, 11, 12, 13])]
    got = gold_logprobs(model, pairs, bos_id=2, eos_id=3, batch_size=2)
    for (src, tgt), lp in zip(pairs, got):
        s = torch.tensor([src])
        t_in = torch.tensor([[2, *tgt]])
        logits = model(s, s != 0, t_in, t_in != 0)[0]
        expected = torch.log_softmax(logits.double(), -1)[torch.arange(len(tgt) + 1), torch.tensor([*tgt, 3])]
        np.testing.assert_allclose(lp, expected.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_csv_and_markdown_writers(tmp_path):
    rows = [{"a": 1, "b": 0.1 + 0.2, "c": None}, {"a": "x", "b": float("nan"), "c": True}]
    plots.write_csv(tmp_path / "t.csv", rows)
    assert (tmp_path / "t.csv").read_text() == "a,b,c\n1,0.3,\nx,,True\n"
    assert plots.markdown_table(rows, ["a", "b"]) == "| a | b |\n|---|---|\n| 1 | 0.3 |\n| x |  |\n"
    assert plots.safe_name("a/b c") == "a_b_c"
