"""posenc.bench.train_loop: token-bounded synthetic batches and the Trainer steps/s records."""

from __future__ import annotations

import json
import math

import pytest

from posenc.bench import REQUIRED_KEYS, BenchConfig
from posenc.bench.__main__ import main
from posenc.bench.train_loop import LENGTHS, loop_batches, loop_records, loop_table
from tests.helpers.cuda import cuda_only


def test_batches_respect_the_token_budget_and_lengths() -> None:
    batches = loop_batches(5, 200, 50, seed=3)
    assert len(batches) >= 5
    for b in batches:
        width = max(b.src.shape[1], b.tgt_in.shape[1])
        assert len(b) * width <= 200
        src_lens, tgt_lens = b.src_mask.sum(1), b.tgt_mask.sum(1)
        assert LENGTHS[0] <= int(src_lens.min()) and int(src_lens.max()) <= LENGTHS[1]
        assert LENGTHS[0] + 1 <= int(tgt_lens.min()) and int(tgt_lens.max()) <= LENGTHS[1] + 1  # EOS added
        assert int(b.src.max()) < 50 and b.ntokens == int(tgt_lens.sum())
    again = loop_batches(5, 200, 50, seed=3)
    assert all((a.src == b.src).all() and (a.tgt_out == b.tgt_out).all() for a, b in zip(batches, again))


def test_loop_records_on_cpu_time_the_real_trainer() -> None:
    cfg = BenchConfig(preset="transformer-tiny", vocab=40, loop_steps=3, loop_tokens=96, loop_preset="transformer-tiny")
    records = loop_records(cfg, warm=2)
    assert [r["config"] for r in records] == ["eager-fp32"]  # CPU default: nothing else to compare
    (rec,) = records
    assert set(REQUIRED_KEYS) <= set(rec) and rec["kind"] == "train_loop" and rec["speedup"] == 1.0
    assert rec["reps"] == 4  # 2 untimed + 2 rounds of 2 steps: timed from the row at step 2 to step 6
    assert math.isclose(rec["steps_per_s"] * rec["seconds_per_step"], 1.0) and rec["tokens_per_s"] > rec["steps_per_s"]
    assert "mfu" not in rec
    assert loop_table(records).splitlines()[2].startswith("| eager-fp32 | transformer-tiny | 96 |")


def test_cli_loop_option_adds_the_records(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    args = ["--preset", "transformer-tiny", "--vocab", "40", "--lengths", "8", "--reps", "1", "--warmup", "0",
            "--batch-tokens", "16", "--no-memory", "--no-decode", "--loop-steps", "2", "--loop-tokens", "64",
            "--loop-preset", "transformer-tiny", "--out", str(out)]
    assert main(args) == 0
    kinds = [r["kind"] for r in json.loads(out.read_text())]
    assert kinds.count("train") == 5 and kinds.count("train_loop") == 1
    assert "train_loop:" in capsys.readouterr().out
    assert main([*args[:-2], "--loop-tokens", "0"]) == 2


@cuda_only("needs CUDA")
def test_cuda_loop_compares_compiled_bf16_with_eager_fp32() -> None:
    import torch

    cfg = BenchConfig(preset="transformer-tiny", vocab=64, device="cuda", loop_steps=4, loop_tokens=512,
                      loop_preset="transformer-tiny")
    records = loop_records(cfg, warm=2)
    bf16 = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    assert [r["config"] for r in records] == ["eager-fp32", f"compiled-{bf16}"]
    assert records[0]["speedup"] == 1.0 and records[1]["speedup"] > 0
    assert all("mfu" in r for r in records)


def test_captured_loop_is_timed_after_every_shape_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--compile reduce-overhead``: the loop trains with train.compile: reduce-overhead (here through
    the tests' tracing backend) and times only after one untimed pass over the batches."""
    from posenc.training import compiled

    monkeypatch.setattr(compiled, "COMPILE_BACKEND", "eager")
    cfg = BenchConfig(preset="transformer-tiny", vocab=40, loop_steps=3, loop_tokens=96, loop_preset="transformer-tiny",
                      precision="fp32", compile="reduce-overhead", loop_model={"d_model": 32, "d_ff": 64})
    assert cfg.loop_label() == "captured-fp32"
    records = loop_records(cfg, warm=2)
    assert [r["config"] for r in records] == ["eager-fp32", "captured-fp32"]
    eager, captured = records
    assert eager["reps"] == 4 and captured["reps"] >= len(loop_batches(5, 96, 40))  # one whole pass untimed
    assert captured["speedup"] == pytest.approx(captured["steps_per_s"] / eager["steps_per_s"])


@pytest.mark.filterwarnings("ignore:train.precision=bf16 on a CPU without native bf16")
@pytest.mark.parametrize("native", [True, False])
def test_the_loop_resolves_auto_by_its_own_models_width(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """``auto`` on a CPU is bf16 only with native bf16 and a wide model: the loop's label follows the
    loop's model (``loop_preset`` + ``loop_model``), not the per-method steps' preset, on any CPU."""
    from posenc.training import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    wide_steps = BenchConfig(loop_steps=2, loop_preset="transformer-tiny", loop_model={"d_model": 32, "d_ff": 64})
    assert wide_steps.width() == 256 and wide_steps.loop_width() == 32
    assert wide_steps.loop_label() == "eager-fp32"
    wide_loop = BenchConfig(preset="transformer-tiny", loop_steps=2, loop_preset="transformer-small")
    assert wide_loop.loop_label() == ("eager-bf16" if native else "eager-fp32")
    assert BenchConfig(precision="bf16", loop_steps=2, loop_preset="transformer-tiny").loop_label() == "eager-bf16"


@pytest.mark.parametrize("native", [True, False])
def test_cli_loop_only_times_an_experiments_model(tmp_path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    """``--loop-only --loop-experiment NAME``: only the loop, with the experiment's model, vocabulary
    and max_tokens (explicit flags win), one eager-fp32 record with or without native bf16 (the
    experiment's model is narrow); --loop-only without --loop-steps is a one-line error."""
    from posenc.bench.__main__ import loop_model_of
    from posenc.training import precision
    from tests.experiments.tiny_grid import write_experiment

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)

    exp = write_experiment(tmp_path)
    loop = loop_model_of(str(exp))
    assert {k: loop[k] for k in ("loop_preset", "vocab", "loop_tokens")} == {
        "loop_preset": "transformer-tiny", "vocab": 40, "loop_tokens": 400}
    assert {k: loop["loop_model"][k] for k in ("d_model", "d_ff", "encoder_layers", "heads")} == {
        "d_model": 32, "d_ff": 64, "encoder_layers": 2, "heads": 4}  # the preset's layers and heads, the base's widths
    out = tmp_path / "loop.json"
    assert main(["--loop-only", "--loop-experiment", str(exp), "--loop-steps", "2", "--loop-tokens", "96",
                 "--out", str(out)]) == 0
    (rec,) = json.loads(out.read_text())
    assert rec["config"] == "eager-fp32"
    assert rec["kind"] == "train_loop" and rec["max_tokens"] == 96 and rec["preset"] == "transformer-tiny"
    assert main(["--loop-only"]) == 2
    assert capsys.readouterr().err.strip().endswith("--loop-only times the training loop: give --loop-steps N (N >= 1)")


def test_the_loop_times_the_model_a_transformer_cell_trains(tmp_path) -> None:
    """The loop's model is the grid's first Transformer cell's, as it trains: a base of another
    architecture is passed over for a method that trains a Transformer, whose overrides (and the
    base's explicit keys) win over the preset; a grid without one is a one-line ConfigError."""
    import yaml

    from posenc.bench.__main__ import loop_model_of
    from posenc.errors import ConfigError
    from posenc.experiments.runner import load_grid
    from tests.experiments.tiny_grid import write_experiment

    exp = write_experiment(tmp_path, model={"norm": "pre"})
    spec = yaml.safe_load(exp.read_text())
    spec["base"]["arch"] = "rnn-nmt"
    spec["base"]["rnn"] = {"hidden": 16, "encoder_layers": 1, "decoder_layers": 1}
    spec["methods"] = {"rnn-nmt": {}, "ape": {"arch": "transformer", "model.position.name": "ape", "model.heads": 2}}
    exp.write_text(yaml.safe_dump(spec))
    model = loop_model_of(str(exp))["loop_model"]
    cell = load_grid(str(exp)).run_config(("vanilla", "ape", 1)).model
    assert (model["heads"], model["norm"], model["d_model"]) == (2, "pre", 32)
    assert model == {k: v for k, v in vars(cell).items() if k not in ("preset", "position", "vocab_size")}
    spec["methods"] = {"rnn-nmt": {}}
    exp.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="none of its cells trains a translation Transformer"):
        loop_model_of(str(exp))
