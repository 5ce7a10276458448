"""The bench's decoding records: beam-K sentences/s of the static-cache search, equal work per method."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import BenchConfig, build_model, decode_records
from posenc.bench.core import EOS, synthetic_batch
from posenc.bench.runner import NoEos
from posenc.decoding import beam_search
from posenc.models.attention import KVCache


def test_decode_records_report_sentences_per_second_at_the_beam() -> None:
    cfg = BenchConfig(methods=["ape", "shaw"], preset="transformer-tiny", vocab=40, decode_batch=3, decode_len=4, decode_reps=1)
    records = decode_records(cfg)
    assert [(r["kind"], r["method"], r["beam"]) for r in records] == [
        ("greedy", "ape", 1), ("greedy", "shaw", 1), ("beam4", "ape", 4), ("beam4", "shaw", 4)]
    for r in records:
        assert r["sentences_per_s"] == pytest.approx(3 / r["seconds_per_batch"])
        assert r["tokens_per_s"] == pytest.approx(4 * r["sentences_per_s"]) and r["precision"] == "fp32"


def test_no_eos_view_uses_the_static_cache_and_decodes_to_the_length_limit() -> None:
    cfg = BenchConfig(preset="transformer-tiny", vocab=40)
    model = NoEos(build_model("ape", cfg).eval())
    batch = synthetic_batch(2, 5, 40, "cpu", seed=3)
    state = model.init_static_state(model.encode(batch["src"], batch["src_mask"]), batch["src_mask"], 6)
    assert all(isinstance(layer.self_attn, KVCache) for layer in state.layers)
    assert model.step(torch.full((2,), 2), state)[:, EOS].eq(-1e4).all()
    hyps = beam_search(model, batch["src"], batch["src_mask"], 2, EOS, beam=4, max_len_a=1.0, max_len_b=0, n_best=4)
    assert [[len(h.tokens) for h in s] for s in hyps] == [[5] * 4, [5] * 4]  # every beam runs S steps + EOS


def test_decode_ab_reports_both_variants(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from posenc.bench.decode_ab import main

    out = tmp_path / "ab.json"
    argv = ["--preset", "transformer-tiny", "--vocab", "40", "--methods", "ape,gru", "--decode-batch", "2",
            "--decode-len", "3", "--decode-reps", "1", "--out", str(out)]
    assert main(argv) == 0
    records = json.loads(out.read_text())
    assert [r["method"] for r in records] == ["ape", "gru"]
    for r in records:
        assert r["eager_sentences_per_s"] > 0 and r["graph_sentences_per_s"] > 0 and r["graph_over_eager"] > 0
    assert "| gru |" in capsys.readouterr().out
    assert main(["--methods", "bogus"]) == 2
