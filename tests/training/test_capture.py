"""Every registered position method's training forward + loss + backward traces as one graph
(``torch.compile(fullgraph=True)``, the eager backend: tracing only, fast on CPU), so a CUDA-graph or
``mode="reduce-overhead"`` step can capture it; a method that cannot declares ``capturable = False``
with its reason (posenc.training.compiled.capture_blockers), and indeed does not trace."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training.compiled import capture_blockers
from tests.conftest import tiny_config
from tests.helpers.lm import tiny_lm
from tests.helpers.methods import params_for, sequence_methods
from tests.helpers.training import batch_of, random_pairs

SEQ2SEQ = sequence_methods(causal=False)
CAUSAL_ONLY = sorted(set(sequence_methods(causal=True)) - set(SEQ2SEQ))


def _seq2seq_step(name: str) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    model = Seq2SeqTransformer(tiny_config(name, vocab=24, position_params=params_for(name)), pad_id=0).train()
    batch, loss = batch_of(random_pairs(4, seed=1)), Seq2SeqLoss(0.1, 0)
    return model, lambda: loss(model, batch).loss


def _lm_step(name: str) -> tuple[torch.nn.Module, Callable[[], torch.Tensor]]:
    model = tiny_lm({"name": name, **params_for(name)}).train()
    tokens = torch.randint(1, 30, (3, 9))
    mask = torch.arange(9)[None, :] < torch.tensor([[9], [6], [8]])
    return model, lambda: torch.where(mask, model(tokens, mask).float().logsumexp(-1), 0.0).sum()


def _loss_and_grads(model: torch.nn.Module, step: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(5)  # the same augmentation draws in both runs (the eager backend draws alike)
    loss = step()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _check(model: torch.nn.Module, step: Callable[[], torch.Tensor]) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    blockers = capture_blockers(model)
    if blockers:  # declared: a reason each, and tracing does fail
        assert all(reason.split(": ", 1)[1] for reason in blockers)
        with pytest.raises(Exception):  # noqa: B017 - Dynamo's error type varies with the blocker
            compiled()
        return
    ref_loss, ref_grads = _loss_and_grads(model, step)
    loss, grads = _loss_and_grads(model, compiled)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_training_step_traces_whole_or_says_why(name: str) -> None:
    _check(*_seq2seq_step(name))


@pytest.mark.parametrize("name", CAUSAL_ONLY)
def test_lm_training_step_traces_whole_or_says_why(name: str) -> None:
    _check(*_lm_step(name))


def test_the_declared_blockers_are_the_known_ones() -> None:
    """The methods that cannot be captured today, each with its reason: FIRE (a data-dependent
    count of distinct distances) and the GRU (nn.GRU); every other registered 1-D method traces."""
    blocked = {n for n in (*SEQ2SEQ, *CAUSAL_ONLY)
               if capture_blockers((_lm_step if n in CAUSAL_ONLY else _seq2seq_step)(n)[0])}
    assert blocked == {n for n in (*SEQ2SEQ, *CAUSAL_ONLY) if n.split("+")[0] in ("gru", "fire")}


# ---------------------------------------------------------------- train.compile: reduce-overhead

def test_bucket_shapes() -> None:
    from posenc.data.batching import bucket_length, bucket_rows

    assert [bucket_length(n) for n in (1, 8, 9, 16, 17, 100)] == [8, 8, 16, 16, 24, 104]
    rows = sorted({bucket_rows(n) for n in range(1, 4097)})
    assert rows[:8] == [8, 16, 24, 32, 40, 48, 64, 80] and rows[-1] >= 4096
    assert all(a % 8 == 0 and a < b <= a * 2 ** 0.25 + 8 for a, b in zip(rows, rows[1:]))
    assert all(n <= bucket_rows(n) <= n * 2 ** 0.25 + 8 for n in range(1, 4097))
    assert len(rows) < 40  # few shapes: row buckets up to 4,096 rows


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "rope", "t5", "alibi", "shaw"])
def test_bucketed_batch_has_the_same_loss_and_gradients(name: str) -> None:
    """Padding rows and lengths to the static shape changes neither the summed loss, nor the token
    count, nor any gradient (padded positions are masked; padded rows' targets are ignored)."""
    model = Seq2SeqTransformer(tiny_config(name, vocab=24, position_params=params_for(name)), pad_id=0).train()
    loss = Seq2SeqLoss(0.1, 0)
    batch = batch_of(random_pairs(5, seed=3, lo=2, hi=11))
    padded = batch.bucketed()
    assert padded.src.shape == (8, 16) and padded.tgt_in.shape[0] == 8 and padded.tgt_in.shape[1] % 8 == 0
    results = []
    for b in (batch, padded):
        model.zero_grad(set_to_none=True)
        out = loss(model, b)
        out.loss.backward()
        results.append((out, [p.grad.clone() for p in model.parameters()]))
    (ref, ref_grads), (got, grads) = results
    assert int(got.ntokens) == int(ref.ntokens) == batch.ntokens == padded.ntokens
    torch.testing.assert_close(got.loss, ref.loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.nll, ref.nll, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        # float32 sums of another shape, in another order: measured ≤ 2.3e-6 absolute (sinusoidal, CPU)
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_compile_options_pick_cuda_graphs_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.training import compiled

    assert compiled.compile_options(True, "cuda") == {"fullgraph": True, "mode": "reduce-overhead"}
    assert compiled.compile_options(True, "cpu") == {"fullgraph": True}
    assert compiled.compile_options(False, "cuda") == {"fullgraph": False}
    monkeypatch.setattr(compiled, "COMPILE_BACKEND", "eager")
    assert compiled.compile_options(True, "cuda") == {"fullgraph": True, "backend": "eager"}


class ShapeLoss(Seq2SeqLoss):
    """The translation loss, recording the batch shapes it is given."""

    def __init__(self) -> None:
        super().__init__(0.1, 0)
        self.shapes: set[tuple[int, ...]] = set()

    def __call__(self, model, batch):  # type: ignore[no-untyped-def]
        if not torch.compiler.is_compiling():
            self.shapes.add((*batch.src.shape, batch.tgt_in.shape[1]))
        return super().__call__(model, batch)


@pytest.mark.filterwarnings("error:train.compile")  # a fallback to eager fails the test
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_reduce_overhead_trainer_matches_eager_losses(tmp_path, monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """``train.compile: reduce-overhead`` on CPU (a tracing backend through the test seam): the
    captured step runs on bucketed batches and logs the same losses as the eager run."""
    from posenc.training import compiled
    from tests.helpers.training import batches_fn, make_trainer, tiny_model, train_config

    monkeypatch.setattr(compiled, "COMPILE_BACKEND", backend)
    data = batches_fn(random_pairs(40, seed=2, hi=12), max_tokens=48)
    rows = {}
    for mode in ("off", "reduce-overhead"):
        loss = ShapeLoss()
        trainer = make_trainer(tiny_model(), train_config(max_steps=5, compile=mode), tmp_path / mode, loss_fn=loss)
        assert trainer.capture == (mode != "off") and trainer.compiled == (mode != "off")
        rows[mode] = [r["loss"] for r in trainer.fit(data).train]
        if mode != "off":
            assert all(b % 8 == 0 and s % 8 == 0 and t % 8 == 0 for b, s, t in loss.shapes)
    assert len(rows["off"]) == 5 and rows["reduce-overhead"] == pytest.approx(rows["off"], rel=1e-5)


def test_an_uncapturable_model_trains_eagerly_with_one_line(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers.training import batches_fn, make_trainer, tiny_model, train_config

    with caplog.at_level("WARNING", logger="posenc.training"):
        trainer = make_trainer(tiny_model(position="gru"), train_config(max_steps=1, compile="reduce-overhead"), tmp_path)
    lines = [r.getMessage() for r in caplog.records if "reduce-overhead" in r.getMessage()]
    assert len(lines) == 1 and "GRUPosition: torch.compile does not trace nn.GRU" in lines[0]
    assert not trainer.compiled and not trainer.capture
    trainer.fit(batches_fn(random_pairs(8, seed=2), max_tokens=48))
