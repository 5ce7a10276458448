"""bf16 autocast training on the CPU: detection of native bf16, the width rule of
``precision: auto`` (resolved where the run trains and recorded in its summary, never in its
fingerprint), autocast actually active in the trainer's step, fp32 master weights and optimizer
state, and a bf16 step close to the fp32 one."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch

from posenc.models.config import ModelConfig
from posenc.runs.fingerprint import fingerprint
from posenc.tasks.translation.config import RunConfig
from posenc.training import precision as training_precision
from posenc.training.compiled import forward_loss
from posenc.training.precision import CPU_BF16_MIN_WIDTH, cpu_bf16_flags, resolve_precision
from tests.helpers.training import PAD, batch_of, make_trainer, random_pairs, tiny_model, train_config

CPU = torch.device("cpu")
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni\n\nprocessor\t: 1\n"
SPR = "flags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n"
OLDER = "flags\t\t: fpu sse avx2 avx512f avx512_vnni\nbugs\t\t: avx512_bf16\n"  # only on the flags line


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU with native bf16 (the detector monkeypatched)."""
    monkeypatch.setattr(training_precision, "cpu_has_native_bf16", lambda: True)


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU without native bf16."""
    monkeypatch.setattr(training_precision, "cpu_has_native_bf16", lambda: False)


def test_native_bf16_is_read_from_the_flags_line() -> None:
    assert cpu_bf16_flags(ZEN4) and cpu_bf16_flags(SPR)
    assert not cpu_bf16_flags(OLDER) and not cpu_bf16_flags("")


def test_auto_picks_bf16_on_a_cpu_only_with_native_bf16_from_the_measured_width(native: None) -> None:
    assert CPU_BF16_MIN_WIDTH == 256
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto is silent
        assert [resolve_precision("auto", CPU, w) for w in (None, 64, 128, 255, 256, 512)] == \
            ["fp32", "fp32", "fp32", "fp32", "bf16", "bf16"]
        assert resolve_precision("bf16", CPU, 64) == "bf16"  # an explicit bf16 is kept, without a warning
    with pytest.warns(UserWarning, match="needs CUDA"):
        assert resolve_precision("fp16", CPU, 512) == "fp32"


def test_auto_keeps_fp32_without_native_bf16_and_explicit_bf16_warns(emulated: None) -> None:
    assert resolve_precision("auto", CPU, 1024) == "fp32"
    with pytest.warns(UserWarning, match="without native bf16"):
        assert resolve_precision("bf16", CPU, 64) == "bf16"


@pytest.mark.parametrize("cuda", [False, True])
def test_an_auto_run_has_one_fingerprint_on_every_machine(monkeypatch: pytest.MonkeyPatch, cuda: bool) -> None:
    """``precision: auto`` is placement, not identity: a run's fingerprint is the same on a CPU with
    and without native bf16 (``POSENC_NATIVE_BF16`` forces the probe) and with or without CUDA,
    while the trainer's resolution differs between those machines (bf16 from d_model 256 on a
    native-bf16 CPU). The RNN-NMT's width is its hidden size."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    configs = [RunConfig(model=ModelConfig.from_preset("transformer-tiny", d_model=w, heads=4)) for w in (64, 128, 256)]
    configs.append(RunConfig(arch="rnn-nmt"))
    seen: dict[str, list] = {}
    for forced in ("0", "1"):
        monkeypatch.setenv(training_precision.NATIVE_BF16_ENV, forced)
        seen[forced] = [fingerprint(cfg) for cfg in configs]
        trainer_view = [resolve_precision("auto", CPU, w) for w in (64, 128, 256)]
        assert trainer_view == (["fp32", "fp32", "bf16"] if forced == "1" else ["fp32"] * 3)
    assert seen["0"] == seen["1"]
    assert {fp["train"]["precision"] for fp in seen["0"]} == {"auto"}


def test_the_summary_records_the_precision_auto_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``auto`` resolved to where the run trained is recorded in its summary.json (a record says
    what was done), the fingerprint keeping ``auto``."""
    for forced, want in (("1", "bf16"), ("0", "fp32")):
        monkeypatch.setenv(training_precision.NATIVE_BF16_ENV, forced)
        trainer = make_trainer(tiny_model(), train_config(max_steps=1, precision="auto"), tmp_path / forced,
                               d_model=CPU_BF16_MIN_WIDTH)  # the width the rule reads
        result = trainer.fit(lambda e, r, w: [batch_of(random_pairs(4, seed=4))])
        assert result.run_record["precision"] == want
        assert json.loads((tmp_path / forced / "summary.json").read_text())["precision"] == want


def test_bf16_step_on_cpu_autocasts_and_keeps_fp32_master_weights(tmp_path: Path, emulated: None) -> None:
    """The trainer's step runs the Linear layers in bf16 (autocast on the CPU), while the
    parameters, their gradients and Adam's moments stay float32."""
    model = tiny_model()
    seen: list[torch.dtype] = []
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [lin.register_forward_hook(lambda m, i, out: seen.append(out.dtype)) for lin in linears]
    with pytest.warns(UserWarning, match="without native bf16"):
        trainer = make_trainer(model, train_config(max_steps=2, precision="bf16"), tmp_path)
    assert trainer.precision == "bf16"
    result = trainer.fit(lambda e, r, w: [batch_of(random_pairs(6, seed=4))])
    for h in hooks:
        h.remove()
    assert result.state.step == 2 and seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    moments = [v for s in trainer.optimizer.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    assert moments and all(m.dtype == torch.float32 for m in moments)
    assert all(torch.isfinite(torch.tensor(row["loss"])) for row in result.train)


def test_a_bf16_step_is_close_to_the_fp32_step_on_a_fixed_batch() -> None:
    """Same weights, same batch: the bf16 loss is within 1 % of fp32's (computed in float32 from
    bf16 logits) and the gradient points the same way (cosine > 0.99, relative norm within 5 %)."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset("transformer-tiny", vocab_size=40, d_model=64, heads=4, d_ff=128, dropout=0.0)
    from posenc.models.seq2seq import Seq2SeqTransformer
    from posenc.models.seq2seq_loss import Seq2SeqLoss

    fp32_model = Seq2SeqTransformer(cfg, pad_id=PAD)
    bf16_model = copy.deepcopy(fp32_model)
    pairs = [([4 + (3 * i + j) % 36 for j in range(9)], [4 + (5 * i + 2 * j) % 36 for j in range(8)]) for i in range(8)]
    batch = batch_of(pairs)
    loss_fn = Seq2SeqLoss(0.1, PAD)
    losses, grads = [], []
    for model, precision in ((fp32_model, "fp32"), (bf16_model, "bf16")):
        out = forward_loss(loss_fn, model, precision, compiled=False, device_type="cpu")(batch)
        assert out.loss.dtype == torch.float32  # the loss is accumulated in float32 either way
        (out.loss / out.ntokens).backward()
        losses.append(out.loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert losses[1] == pytest.approx(losses[0], rel=1e-2)
    cosine = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
    assert cosine > 0.99 and grads[1].norm() == pytest.approx(grads[0].norm().item(), rel=5e-2)


def test_without_proc_cpuinfo_torch_s_probe_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(self: Path, *a: object, **k: object) -> str:
        raise FileNotFoundError(str(self))

    monkeypatch.delenv(training_precision.NATIVE_BF16_ENV, raising=False)  # the probe, not the switch
    monkeypatch.setattr(Path, "read_text", unreadable)
    monkeypatch.setattr(torch._C._cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    training_precision.probe_native_bf16.cache_clear()
    try:
        assert training_precision.cpu_has_native_bf16()
        monkeypatch.setattr(torch._C._cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
        monkeypatch.setattr(torch._C._cpu, "_is_amx_tile_supported", lambda: False, raising=False)
        training_precision.probe_native_bf16.cache_clear()
        assert not training_precision.cpu_has_native_bf16()
    finally:
        training_precision.probe_native_bf16.cache_clear()


def test_the_environment_switch_forces_native_bf16_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """``POSENC_NATIVE_BF16=1``/``0`` decides over the probe (so the suite runs both ways on one CPU);
    empty is the probe; any other value is a one-line ConfigError."""
    from posenc.errors import ConfigError

    env = training_precision.NATIVE_BF16_ENV
    for value, want in (("1", True), ("0", False), (" 1 ", True)):
        monkeypatch.setenv(env, value)
        assert training_precision.cpu_has_native_bf16() is want
        assert resolve_precision("auto", CPU, 512) == ("bf16" if want else "fp32")
    monkeypatch.setenv(env, "")
    assert training_precision.cpu_has_native_bf16() == training_precision.probe_native_bf16()
    monkeypatch.setenv(env, "yes")
    with pytest.raises(ConfigError, match="POSENC_NATIVE_BF16='yes': give 1") as err:
        training_precision.cpu_has_native_bf16()
    assert "\n" not in str(err.value)
