"""SHAPE Fig. 4: token-wise comparison by decoder position and token frequency."""

from __future__ import annotations

import pytest

from posenc.analysis.common import Buckets
from posenc.analysis.tokenwise import frequency_ranks, token_counts, tokenwise, tokenwise_table
from posenc.errors import DataError
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config

COUNTS = {5: 10, 6: 5, 7: 1}
GOLD = [[5, 7, 6], [8, 5]]  # 8 never occurs in training
A = [[-1.0, -2.0, -3.0], [-4.0, -5.0]]
B = [[-2.0, -2.0, -1.0], [-1.0, -7.0]]
TWO = Buckets((1, 3))


def test_ranks_and_counts():
    assert frequency_ranks({5: 10, 6: 5, 7: 1, 9: 5, 4: 0}) == {5: 1, 6: 2, 9: 3, 7: 4}
    assert token_counts([[5, 6], [5]], eos_id=3) == {5: 2, 6: 1, 3: 2}


def test_bucket_assignment_by_rank():
    rows = tokenwise_table(A, B, GOLD, COUNTS, position_buckets=TWO, freq_buckets=TWO, by="rank")
    # ranks: 5→1, 6→2, 7→3, unseen 8→4; diffs: (pos1,5)+1 (pos2,7)0 (pos3,6)-2 | (pos1,8)-3 (pos2,5)+2
    assert rows == [
        {"frequency": "1-2", "position": "1-2", "tokens": 2, "mean_diff": 1.5, "win_ratio": 1.0},
        {"frequency": "1-2", "position": "3-", "tokens": 1, "mean_diff": -2.0, "win_ratio": 0.0},
        {"frequency": "3-", "position": "1-2", "tokens": 2, "mean_diff": -1.5, "win_ratio": 0.0},
        {"frequency": "3-", "position": "3-", "tokens": 0, "mean_diff": None, "win_ratio": None},
    ]


def test_bucket_assignment_by_count():
    rows = tokenwise_table(A, B, GOLD, COUNTS, position_buckets=Buckets((1,)), freq_buckets=Buckets((0, 2, 10)), by="count")
    # counts: 5→10, 7→1, 6→5, 8→0
    assert [(r["frequency"], r["tokens"], r["mean_diff"]) for r in rows] == [("0-1", 2, -1.5), ("2-9", 1, -2.0), ("10-", 2, 1.5)]


def test_table_errors():
    with pytest.raises(DataError, match="sentence 1 has 2/1 scores for 2 gold tokens"):
        tokenwise_table(A, [B[0], [-1.0]], GOLD, COUNTS)
    with pytest.raises(DataError, match="'rank' or 'count'"):
        tokenwise_table(A, B, GOLD, COUNTS, by="freq")


def test_tokenwise_on_tiny_models(tmp_path):
    pairs = [([4, 5, 6], [7, 8, 9]), ([10, 11], [12, 13, 14, 15, 16])]
    counts = token_counts([t for _, t in pairs], eos_id=3)
    ape, shape = Seq2SeqTransformer(tiny_config("ape")), Seq2SeqTransformer(tiny_config("shape"))
    rows = tokenwise(shape, ape, pairs, counts, tmp_path, bos_id=2, eos_id=3, position_buckets=TWO, freq_buckets=Buckets((1, 4)))
    assert sum(r["tokens"] for r in rows) == 4 + 6  # targets + EOS
    assert any(r["mean_diff"] not in (None, 0.0) for r in rows)
    same = tokenwise(ape, ape, pairs, counts, tmp_path, bos_id=2, eos_id=3, position_buckets=TWO, freq_buckets=Buckets((1, 4)))
    assert all(r["mean_diff"] == 0.0 and r["win_ratio"] == 0.0 for r in same if r["tokens"])
    lines = (tmp_path / "tokenwise.csv").read_text().splitlines()
    assert lines[0] == "frequency,position,tokens,mean_diff,win_ratio" and len(lines) == 5
    assert (tmp_path / "tokenwise.png").is_file()
