"""posenc.bench --profile: per (method, length) profiler tables, traces and a summary with posenc:: ranges."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from posenc.bench import BenchConfig, build_model
from posenc.bench.__main__ import main
from posenc.bench.profile import PREFIX, module_ranges, profile_run
from tests.helpers.cuda import cuda_only

TINY = ["--preset", "transformer-tiny", "--vocab", "50", "--lengths", "8", "--reps", "1", "--warmup", "0",
        "--batch-tokens", "16", "--no-memory", "--no-decode"]


def test_profile_flag_writes_tables_traces_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    assert main([*TINY, "--methods", "gru,cape", "--profile", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    stems = [f"train_{m}_L8" for m in ("ape", "gru", "cape")]
    assert names == {".posenc-run", "summary.txt", *(s + ext for s in stems for ext in (".txt", ".json.gz"))}
    gru_table = (out / "train_gru_L8.txt").read_text()
    assert "top ops by self CPU time" in gru_table and "aten::" in gru_table
    assert PREFIX + "decoder.input_pos" in gru_table  # the GRU's forward is a named range
    assert PREFIX + "decoder.input_pos.prefetch" in gru_table  # and so is its early start
    trace = json.loads(gzip.decompress((out / "train_cape_L8.json.gz").read_bytes()))
    assert any(e.get("name") == PREFIX + "positions" for e in trace["traceEvents"])
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary] == ["ape", "gru", "cape"]
    assert all("wall_ms=" in line and f"{PREFIX}encoder.input_pos=cpu:" in line for line in summary)


def test_ranges_wrap_the_position_code_and_are_removed_afterwards() -> None:
    model = build_model("cape", BenchConfig(preset="transformer-tiny", vocab=50)).train()
    src = torch.randint(4, 50, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    torch.manual_seed(0)
    expected = model(src, mask, src, mask)
    with torch.profiler.profile() as prof, module_ranges(model):
        torch.manual_seed(0)
        got = model(src, mask, src, mask)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)  # same computation inside the ranges
    keys = {e.key for e in prof.key_averages()}
    assert {PREFIX + n for n in ("positions", "encoder.input_pos", "decoder.input_pos", "encoder.self_attn", "decoder.self_attn")} <= keys
    assert "forward" not in vars(model.encoder.input_pos) and "positions" not in vars(model)
    assert not any("forward" in vars(m) for m in model.modules())  # the per-layer self-attention ranges too


def test_profile_run_without_trace_returns_the_paths(tmp_path: Path) -> None:
    cfg = BenchConfig(preset="transformer-tiny", vocab=50, lengths=[6], batch_tokens=12, methods=["ape"])
    paths = profile_run(cfg, str(tmp_path / "p"), steps=1, trace=False)
    assert [p.name for p in paths] == ["train_ape_L6.txt", "summary.txt"]
    assert all(p.exists() for p in paths)


@cuda_only("CUDA tables need a GPU")
def test_profile_on_cuda_has_device_table(tmp_path: Path) -> None:
    cfg = BenchConfig(preset="transformer-tiny", vocab=50, lengths=[8], batch_tokens=16, methods=["gru"], device="cuda")
    profile_run(cfg, str(tmp_path), steps=1, trace=False)
    assert "top ops by self CUDA time" in (tmp_path / "train_gru_L8.txt").read_text()
    assert "self_device_ms=" in (tmp_path / "summary.txt").read_text()


def test_gru_variants_table(capsys: pytest.CaptureFixture[str]) -> None:
    from posenc.bench.gru_variants import VARIANTS, build
    from posenc.bench.gru_variants import main as variants_main

    args = ["--preset", "transformer-tiny", "--vocab", "50", "--lengths", "6", "--batch-tokens", "12", "--reps", "1", "--warmup", "0"]
    assert variants_main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[2].startswith("| 6 | ") and lines[2].count("(") == len(VARIANTS)
    assert "(1.000)" in lines[2].split("|")[2]  # APE's paired ratio to itself
    cfg = BenchConfig(preset="transformer-tiny", vocab=50)
    assert build("gru-autocast", cfg).decoder.input_pos.params.autocast
    assert not build("gru", cfg).decoder.input_pos.params.autocast
    assert "prefetch" in vars(build("gru-noprefetch", cfg).decoder.input_pos)


def test_profile_never_writes_into_a_users_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "summary.txt").write_text("mine")
    assert main([*TINY, "--profile", str(theirs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --profile") and err.count("\n") == 1
    assert [p.name for p in theirs.iterdir()] == ["summary.txt"] and (theirs / "summary.txt").read_text() == "mine"
