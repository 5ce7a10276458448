"""posenc.bench: the --out schema on a tiny run, the paired-ratio arithmetic, FLOP accounting."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from posenc.bench import (
    REQUIRED_KEYS,
    BenchConfig,
    build_model,
    interleaved,
    paired_ratio,
    peak_bf16_flops,
    train_flops,
)
from posenc.bench.__main__ import main
from posenc.bench.flops import matmul_params, mfu
from posenc.errors import ConfigError
from tests.helpers.inductor import compiled_or_skip

TINY = ["--preset", "transformer-tiny", "--vocab", "50", "--lengths", "12", "--reps", "1", "--warmup", "0",
        "--batch-tokens", "24", "--decode-batch", "2", "--decode-len", "3", "--decode-reps", "1"]


def test_tiny_run_writes_the_schema_and_ape_ratio_is_exactly_one(tmp_path: Path) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    assert main([*TINY, "--methods", "ape,shaw", "--out", str(out), "--plot", str(png)]) == 0
    records = json.loads(out.read_text())
    train = [r for r in records if r["kind"] == "train"]
    assert [(r["method"], r["length"], r["batch"]) for r in train] == [("ape", 12, 2), ("shaw", 12, 2)]
    assert {r["kind"] for r in records} == {"train", "greedy", "beam4"}
    for r in records:
        assert set(REQUIRED_KEYS) <= set(r)
        assert r["tokens_per_s"] > 0 and r["ratio_to_ape"] > 0
        if r["method"] == "ape":
            assert r["ratio_to_ape"] == 1.0
    for r in train:  # measured in a subprocess each
        assert isinstance(r["peak_mem_mb"], float) and r["peak_mem_mb"] >= 0
        assert math.isclose(r["tokens_per_s"], 2 * 2 * 12 / r["seconds_per_step"])
    assert all(r["peak_mem_mb"] is None for r in records if r["kind"] != "train")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.cuda  # runs on CPU too; on a GPU it also runs the bench on CUDA
def test_ape_is_always_measured_and_bad_input_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert BenchConfig(methods=["shaw"]).methods == ["ape", "shaw"]
    # any name the position registry resolves (no table of the bench's own), each measured once
    assert BenchConfig(methods=["ape", "rope", "ape+shaw", "rope"]).methods == ["ape", "rope", "ape+shaw"]
    with pytest.raises(ConfigError, match="bench: unknown position method 'sinusoid'"):
        BenchConfig(methods=["sinusoid"])
    assert main([*TINY, "--methods", "bogus", "--no-memory"]) == 2
    assert "unknown position method 'bogus'" in capsys.readouterr().err
    assert main([*TINY, "--device", "cuda", "--no-memory"]) == (0 if torch.cuda.is_available() else 2)


def test_interleaved_rotates_order_and_paired_ratio_is_median_of_pairs() -> None:
    calls: list[str] = []
    runs = {n: (lambda n=n: calls.append(n) or 1.0) for n in ("ape", "b", "c")}
    times = interleaved(runs, reps=3, warmup=1)
    assert calls == ["ape", "b", "c", "ape", "b", "c", "b", "c", "ape", "c", "ape", "b"]
    assert {n: len(t) for n, t in times.items()} == {"ape": 3, "b": 3, "c": 3}
    hand = {"ape": [1.0, 2.0, 4.0], "x": [2.0, 1.0, 8.0]}  # pairs 0.5, 2.0, 0.5 → median 0.5
    assert paired_ratio(hand, "x") == 0.5 and paired_ratio(hand, "ape") == 1.0


def test_train_flops_by_hand() -> None:
    cfg = BenchConfig(preset="transformer-tiny", vocab=50)
    model = build_model("ape", cfg)
    d, ff, layers = 64, 128, 2
    enc = layers * (4 * d * d + 2 * d * ff)
    dec = layers * (8 * d * d + 2 * d * ff)
    assert matmul_params(model.encoder) == enc and matmul_params(model.decoder) == dec
    b, s, t = 3, 10, 7
    dense = 6 * (enc * b * s + (dec + 50 * d) * b * t)
    attn = 12 * d * (layers * s * b * s + layers * (t + s) * b * t)
    assert train_flops(model, b, s, t) == dense + attn


def test_peak_table_and_mfu() -> None:
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_bf16_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_bf16_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_bf16_flops("Some CPU") is None
    assert mfu(1e12, 2.0, 1e12) == 0.5 and mfu(1e12, 2.0, None) is None


def test_memory_probe_sees_the_step_even_under_a_large_parent() -> None:
    """The subprocess probe must not inherit the parent's high-water mark (Linux fork semantics)."""
    from posenc.bench.memory import measure_in_subprocess

    ballast = torch.ones(50_000_000)  # 200 MB in this (parent) process
    cfg = BenchConfig(preset="transformer-tiny", vocab=50, batch_tokens=2048, threads=1)
    peak = measure_in_subprocess("shaw", 256, cfg)
    assert peak is not None and peak > 1.0  # 4 self-attention layers keep α (8, 4, 256, 256) = 8 MB each
    del ballast


def test_precision_and_compile_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.training import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    cpu = BenchConfig()
    assert (cpu.precision, cpu.compile, cpu.train_precision(), cpu.compiled()) == ("auto", "off", "fp32", False)
    assert BenchConfig(compile="on").compiled() and not BenchConfig(device="cuda", compile="off").compiled()
    assert BenchConfig(device="cuda", compile="auto").compiled() and not BenchConfig(device="cuda").compiled()
    assert BenchConfig(device="cuda", precision="fp32").train_precision() == "fp32"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)  # auto on a CPU: by the model's width
    assert (BenchConfig().width(), BenchConfig().train_precision()) == (256, "bf16")
    assert BenchConfig(model={"d_model": 128}).train_precision() == "fp32"
    assert BenchConfig(precision="bf16", model={"d_model": 64}).fp32_reference() and not BenchConfig().fp32_reference()
    with pytest.raises(ConfigError, match="compile one of auto|on|off"):
        BenchConfig(compile="yes")
    from posenc.bench.__main__ import parse_args

    assert parse_args(["--compile"]).compile == "on" and parse_args([]).compile == "off"
    assert parse_args(["--compile", "off"]).compile == "off" and parse_args([]).precision == "auto"


def test_cpu_step_stays_eager_fp32_with_default_adam() -> None:
    """The CPU tables' step is unchanged by the default options: no compile, no autocast, and
    torch's default Adam (neither fused nor forced foreach)."""
    from posenc.bench.core import make_step, synthetic_batch

    cfg = BenchConfig(preset="transformer-tiny", vocab=50, model={"dropout": 0.0})
    model = build_model("ape", cfg)
    step = make_step(model, synthetic_batch(2, 6, 50, "cpu"), cfg)
    assert step.loss == step._loss and step.precision == "fp32"
    group = step.opt.param_groups[0]
    assert group["fused"] is None and group["foreach"] is None
    b = step.batch
    ref = torch.nn.functional.cross_entropy(model(b["src"], b["src_mask"], b["tgt_in"], b["tgt_mask"]).flatten(0, 1), b["tgt_out"].flatten())
    loss = step.loss()
    assert loss.dtype == torch.float32 and torch.equal(loss, ref) and step.tokens == 24


def test_bf16_on_cpu_reports_its_ratio_to_fp32_from_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--device cpu --precision bf16``: every method's bf16 step is timed beside an fp32 step of
    the same model (same seed) in the same rounds; the records and the table carry the ratio."""
    from posenc.training import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    out = tmp_path / "bench.json"
    assert main([*TINY, "--device", "cpu", "--precision", "bf16", "--methods", "ape,shaw", "--no-memory", "--no-decode",
                 "--out", str(out)]) == 0
    train = json.loads(out.read_text())
    assert [(r["method"], r["precision"]) for r in train] == [("ape", "bf16"), ("shaw", "bf16")]
    assert all(r["ratio_to_fp32"] > 0 and r["ratio_to_ape_fp32"] > 0 for r in train)
    assert train[0]["ratio_to_ape_fp32"] == 1.0


def test_the_bench_bf16_step_autocasts_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.bench.core import TrainStep, synthetic_batch
    from posenc.training import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    cfg = BenchConfig(preset="transformer-tiny", vocab=50, model={"dropout": 0.0})
    step = TrainStep(build_model("ape", cfg), synthetic_batch(2, 6, 50, "cpu"), "cpu", "bf16")
    dtypes: list[torch.dtype] = []
    lin = next(m for m in step.model.modules() if isinstance(m, torch.nn.Linear))
    lin.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    assert step.precision == "bf16" and step() > 0 and dtypes == [torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in step.model.parameters())


@pytest.mark.slow
def test_compiled_bench_step_matches_eager_on_cpu() -> None:
    """The same compiled step CUDA runs by default, here through inductor's CPU backend."""
    from posenc.bench.core import TrainStep, synthetic_batch

    cfg = BenchConfig(preset="transformer-tiny", vocab=50, model={"dropout": 0.0})
    batch = synthetic_batch(3, 7, 50, "cpu")
    eager, compiled = TrainStep(build_model("ape", cfg), batch, "cpu"), TrainStep(build_model("ape", cfg), batch, "cpu", compiled=True)
    torch._dynamo.reset()
    eager.forward_backward()
    compiled_or_skip(compiled.forward_backward)  # same gradients (compiled backward)
    for p, q in zip(eager.model.parameters(), compiled.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6)
    for _ in range(3):  # and the same losses step after step
        eager.opt.zero_grad(), compiled.opt.zero_grad()
        torch.testing.assert_close(compiled.loss(), eager.loss(), rtol=1e-5, atol=1e-5)
        eager(), compiled()
