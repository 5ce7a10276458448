"""Every registered position method's training forward + loss + backward traces as one graph
(``torch.compile(fullgraph=True)``, the eager backend: tracing only, fast on CPU), so a CUDA-graph or
``mode="reduce-overhead"`` step can capture it; a method that cannot declares ``capturable = False``
with its reason (posenc.positions.base.capture_blockers), and indeed does not trace."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from posenc.models.seq2seq import Seq2SeqLoss, Seq2SeqTransformer
from posenc.positions.base import capture_blockers
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
