"""The machinery of a training step (training/device, precision, compiled, optimization):
precision and compile resolution, the optimizer's implementation, the compiled forward+loss (on
CPU), and the absence of host syncs in a step."""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch

from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import TrainConfig, Trainer, load_checkpoint, precision
from posenc.training.checkpoint import load_optimizer_state
from posenc.training.compiled import forward_loss, resolve_compile, unwrap_compiled
from posenc.training.optimization import _CPU_FUSED_ADAM, build_optimizer
from posenc.training.precision import resolve_precision
from tests.helpers.cuda import cuda_only
from tests.helpers.inductor import compiled_or_skip
from tests.helpers.training import (
    batch_of,
    batches_fn,
    latest,
    make_trainer,
    random_pairs,
    tiny_model,
    train,
    train_config,
)

TRAIN = batches_fn(random_pairs(40, seed=2), max_tokens=48)
CPU = torch.device("cpu")


def test_auto_precision_and_compile_resolve_per_device() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto on CPU is fp32 without a warning
        assert resolve_precision("auto", CPU) == "fp32"
    assert resolve_precision("fp32", CPU) == "fp32"
    with pytest.warns(UserWarning, match="fp32"):
        assert resolve_precision("fp16", CPU) == "fp32"  # bf16 on a CPU: tests/training/test_cpu_bf16.py
    assert (resolve_compile("auto", CPU), resolve_compile("on", CPU), resolve_compile("off", CPU)) == (False, True, False)
    if torch.cuda.is_available():
        cuda = torch.device("cuda")
        assert resolve_precision("auto", cuda) == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")
        assert resolve_compile("auto", cuda) and not resolve_compile("off", cuda)


def test_optimizer_is_fused_on_cpu_and_keeps_its_implementation_on_load() -> None:
    cfg = TrainConfig(max_steps=1, optimizer="adamw", weight_decay=0.1)
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(list(model.parameters()), cfg, CPU)
    mine = "fused" if _CPU_FUSED_ADAM else "foreach"
    other = "foreach" if _CPU_FUSED_ADAM else "fused"
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0][mine] is True
    assert not opt.param_groups[0][other]
    # a state saved by the other implementation (torch's fused Adam also runs on CPU)
    saved = torch.optim.AdamW(model.parameters(), lr=0.1, **{other: True})
    model(torch.ones(4, 3)).sum().backward()
    saved.step()
    load_optimizer_state(opt, saved.state_dict())
    assert opt.param_groups[0][mine] is True and not opt.param_groups[0][other]
    assert opt.param_groups[0]["lr"] == 0.1  # hyper-parameters do come from the state
    for p in model.parameters():
        step = opt.state[p]["step"]
        assert step.device.type == "cpu" and step.dtype == torch.float32 and float(step) == 1.0
        torch.testing.assert_close(opt.state[p]["exp_avg"], saved.state[p]["exp_avg"], rtol=0, atol=0)
    opt.step()  # the loaded state is usable by this implementation


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_cpu_optimizer_matches_the_for_loop_adam(optimizer: str) -> None:
    """The builder's CPU implementation computes the textbook update: 20 steps agree with torch's
    single-tensor for-loop to float32 rounding (the fused kernel rounds in its own order)."""
    cfg = TrainConfig(max_steps=1, optimizer=optimizer, lr=1e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(64, 32, generator=gen), torch.randn(32, generator=gen)]
    grads = [[torch.randn(t.shape, generator=gen) for t in start] for _ in range(20)]
    a = [t.clone().requires_grad_() for t in start]
    b = [t.clone().requires_grad_() for t in start]
    kind = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    ref = kind(b, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, foreach=False)
    opt = build_optimizer(a, cfg, CPU)
    for g in grads:
        for p, q, gi in zip(a, b, g):
            p.grad, q.grad = gi.clone(), gi.clone()
        opt.step()
        ref.step()
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_forward_loss_eager_equals_the_hook() -> None:
    model, batch = tiny_model(), batch_of(random_pairs(4, seed=1))
    hook = Seq2SeqLoss(0.1)
    out = forward_loss(hook, model, "fp32", compiled=False)(batch)
    ref = hook(model, batch)
    assert torch.equal(out.loss, ref.loss) and torch.equal(out.nll, ref.nll) and int(out.ntokens) == batch.ntokens


@pytest.mark.parametrize("fallback", [True, False])
def test_a_failing_compile_falls_back_to_eager_only_under_auto(monkeypatch: pytest.MonkeyPatch, fallback: bool) -> None:
    calls: list[int] = []

    def broken_compile(fn, **kwargs):
        def compiled(*args):
            calls.append(1)
            raise torch._dynamo.exc.TorchDynamoException("inductor: no kernel for this op")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    model, batch, hook = tiny_model(), batch_of(random_pairs(4, seed=1)), Seq2SeqLoss(0.1)
    run = forward_loss(hook, model, "fp32", compiled=True, fallback=fallback)
    if not fallback:
        with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="no kernel"):
            run(batch)
        return
    with pytest.warns(UserWarning, match="torch.compile failed .*no kernel.*training eagerly"):
        out = run(batch)
    assert torch.equal(out.loss, hook(model, batch).loss)
    assert torch.equal(run(batch).nll, hook(model, batch).nll) and len(calls) == 1  # not retried


@contextmanager
def no_host_reads(package: str = "posenc/training/") -> Iterator[list[str]]:
    """Fail on any tensor → Python number read (``item``, ``float``, ``int``, ``bool``,
    ``tolist``) made directly by code under ``package``: each would be a host sync on CUDA."""
    seen: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")}

    def guarded(name: str):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            if package in caller:
                seen.append(f"{name} at {caller}:{sys._getframe(1).f_lineno}")
            return originals[name](self, *args, **kwargs)
        return read

    for name in originals:
        setattr(torch.Tensor, name, guarded(name))
    try:
        yield seen
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)


class WatchedTrainer(Trainer):
    """Records host reads made by the training package inside each optimizer step."""

    reads: list[str] = []

    def train_step(self, group):
        with no_host_reads() as seen:
            row = super().train_step(group)
        self.reads += seen if row is None else []  # a log row may read (once per log_every)
        return row


@pytest.mark.parametrize("clip_norm", [0.0, 1.0])
def test_no_host_reads_in_a_step_and_logs_stay_exact(tmp_path: Path, clip_norm: float) -> None:
    """The guard sees reads at all (control: a log row reads), none in plain steps, and the
    deferred accumulation gives the same log rows and token count as the per-step one did."""
    WatchedTrainer.reads = []
    cfg = dict(max_steps=6, update_freq=2, clip_norm=clip_norm)
    result = make_trainer(tiny_model(), train_config(**cfg, log_every=4), tmp_path / "w", WatchedTrainer).fit(TRAIN)
    assert WatchedTrainer.reads == []
    with no_host_reads() as seen:
        make_trainer(tiny_model(), train_config(max_steps=1), tmp_path / "c").fit(TRAIN)
    assert any("trainer.py" in s for s in seen)  # control: the guard does catch the loop's reads
    every = train(tiny_model(), TRAIN, train_config(**cfg, log_every=1), tmp_path / "e")
    assert result.state.step == 6 and [r["step"] for r in result.train] == [4, 6]
    assert result.state.tokens == every.state.tokens == every.train[-1]["tokens"] == result.train[-1]["tokens"]
    rows = {r["step"]: r for r in every.train}
    cum = {0: 0, **{s: r["tokens"] for s, r in rows.items()}}
    for row, lo, hi in ((result.train[0], 1, 4), (result.train[1], 5, 6)):
        n = {s: cum[s] - cum[s - 1] for s in range(lo, hi + 1)}
        expect = sum(rows[s]["loss"] * n[s] for s in n) / sum(n.values())
        assert row["loss"] == pytest.approx(expect, rel=1e-9) and row["gnorm"] == pytest.approx(rows[hi]["gnorm"], rel=1e-9)
        assert row["tokens"] == cum[hi]


class NanLoss(Seq2SeqLoss):
    """Returns an infinite loss on the ``bad``-th call (a diverging update)."""

    def __init__(self, bad: int) -> None:
        super().__init__(0.1, 0)
        self.calls, self.bad = 0, bad

    def __call__(self, model, batch):
        self.calls += 1
        out = super().__call__(model, batch)
        return out._replace(loss=out.loss * float("inf")) if self.calls == self.bad else out


def test_non_finite_gradient_raises_before_any_checkpoint_of_it(tmp_path: Path) -> None:
    cfg = train_config(max_steps=6, save_every=3, log_every=100)
    with pytest.raises(FloatingPointError, match="step 2: gradient norm is not finite"):
        train(tiny_model(), TRAIN, cfg, tmp_path, loss_fn=NanLoss(2))
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").glob("ckpt_*"))


def test_a_compiled_module_is_unwrapped_and_saved_without_prefixes(tmp_path: Path) -> None:
    model = tiny_model()
    wrapped = torch.compile(model)
    assert unwrap_compiled(wrapped) is model and unwrap_compiled(model) is model
    trainer = make_trainer(wrapped, train_config(max_steps=2, compile="off"), tmp_path)
    assert trainer.model is model
    result = trainer.fit(TRAIN)
    keys = set(load_checkpoint(result.last_checkpoint).model)
    assert keys == set(model.state_dict()) and not any("_orig_mod" in k for k in keys)


@pytest.mark.slow
def test_compiled_step_matches_eager_on_cpu_without_recompiles(tmp_path: Path) -> None:
    """``train.compile=on`` on CPU (inductor, C++ codegen): same losses as eager within float
    tolerance over batches of 6 different shapes, at most 2 graphs (not one per shape), and a
    checkpoint an eager model resumes from."""
    from torch._dynamo.utils import counters

    cfg = dict(max_steps=3, save_every=3, update_freq=2)
    shapes = {tuple(b.src.shape) + tuple(b.tgt_in.shape) for b in TRAIN(0, 0, 1)[:6]}
    eager = train(tiny_model(), TRAIN, train_config(**cfg, compile="off"), tmp_path / "eager")
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    model = tiny_model()
    compiled = compiled_or_skip(lambda: train(model, TRAIN, train_config(**cfg, compile="on"), tmp_path / "compiled"))
    assert len(shapes) == 6 and 1 <= counters["stats"]["unique_graphs"] - before <= 2
    assert [r["loss"] for r in compiled.train] == pytest.approx([r["loss"] for r in eager.train], abs=1e-4, rel=0)
    saved = load_checkpoint(compiled.last_checkpoint).model
    assert set(saved) == set(model.state_dict()) and not any("_orig_mod" in k for k in saved)
    resumed = tiny_model(seed=5)
    train(resumed, TRAIN, train_config(**{**cfg, "max_steps": 4}, compile="off"), tmp_path / "compiled")
    assert all(torch.isfinite(p).all() for p in resumed.parameters())


@cuda_only("needs CUDA")
def test_cuda_defaults_compile_bf16_fused_and_resume(tmp_path: Path) -> None:
    cfg = dict(max_steps=4, device="cuda", save_every=2, update_freq=2, compile="auto")  # compile's default is off
    trainer = make_trainer(tiny_model(), train_config(**cfg), tmp_path)
    assert trainer.compiled and trainer.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")
    assert trainer.optimizer.param_groups[0]["fused"] is True
    result = trainer.fit(TRAIN)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in result.train)
    eager = train(tiny_model(), TRAIN, train_config(**cfg, compile="off"), tmp_path / "eager")
    assert [r["loss"] for r in result.train] == pytest.approx([r["loss"] for r in eager.train], rel=3e-2)
    resumed = tiny_model(seed=9)
    again = make_trainer(resumed, train_config(**{**cfg, "max_steps": 6}), tmp_path)
    again.fit(TRAIN, resume=latest(tmp_path))
    assert again.optimizer.param_groups[0]["fused"] is True
    assert all(s["step"].device.type == "cuda" for s in again.optimizer.state.values())


@pytest.mark.parametrize("bf16_supported", [True, False])
def test_auto_precision_has_one_definition(monkeypatch: pytest.MonkeyPatch, bf16_supported: bool) -> None:
    """The benchmarks resolve ``auto`` by the trainer's resolve_precision: on a (simulated) GPU with
    and without bf16 support, and on CPU."""
    from posenc.bench.core import BenchConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_supported)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)  # a native-bf16 CPU: test_cpu_bf16.py
    expected = resolve_precision("auto", torch.device("cuda"))
    assert expected == ("bf16" if bf16_supported else "fp32")
    assert BenchConfig(device="cuda").train_precision() == expected
    assert BenchConfig(device="cpu").train_precision() == resolve_precision("auto", CPU) == "fp32"
