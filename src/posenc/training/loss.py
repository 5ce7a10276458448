"""Label-smoothed cross entropy (Szegedy et al. 2016; SHAPE App. Table 4, ε_ls = 0.1), what a
task's loss hook returns and the loss over a validation set (:func:`validation_loss`).

Shape legend: B batch, T target length, V classes (output tokens), N flattened tokens.

A loss hook is any callable ``loss_fn(model, batch) -> LossOutput`` returning *summed* (not
averaged) losses and the number of tokens they cover; the trainer divides the accumulated
gradient by the global token count, so hooks for other tasks (ViT, CTC) only need to return sums.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.errors import DataError
from posenc.training.device import move_to
from posenc.training.precision import autocast


class LossOutput(NamedTuple):
    """What a loss hook returns for one batch: sums over its tokens, which the trainer divides by
    the global token count.

    Args:
        loss: the summed loss (label-smoothed where the task smooths), a scalar: what is
            back-propagated.
        nll: the summed negative log-likelihood without smoothing, a scalar: for perplexity.
        ntokens: the number of tokens (items) the sums cover, a scalar.
    """

    loss: Tensor  # scalar, summed over tokens; what is back-propagated
    nll: Tensor  # scalar, summed negative log-likelihood (no smoothing), for perplexity
    ntokens: Tensor  # scalar, number of tokens in the sums


#: A task's loss hook: ``loss_fn(model, batch) -> LossOutput``.
LossFn = Callable[[nn.Module, Any], LossOutput]
#: Validation batches: a sequence, or a function that yields them afresh each time.
ValidSource = Sequence[Any] | Callable[[], Iterable[Any]]


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int = -100) -> LossOutput:
    """Summed label-smoothed cross entropy over non-ignored targets.

    ``logits (..., V)``, ``target (...)`` → per token ``(1 − ε)·(−log p_y) + ε·mean_v(−log p_v)``,
    i.e. the smoothed target puts ε/V on every class (as ``F.cross_entropy(label_smoothing=ε)``;
    fairseq instead spreads ε over the V − 1 non-target classes). Computed in float32.

    Args:
        logits: ``(..., V)`` scores over the V classes, any float dtype.
        target: ``(...)`` the class of each position, ``ignore_index`` where no target counts.
        epsilon: the label smoothing ε, in [0, 1); 0 is plain cross entropy.
        ignore_index: the target value of positions left out (padding).

    Returns:
        The summed smoothed loss, the summed unsmoothed NLL and the number of targets counted,
        each a float32 (count: integer) scalar.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1])  # (N, V)
    flat = target.reshape(-1)  # (N,)
    keep = flat != ignore_index
    safe = flat.masked_fill(~keep, 0)
    nll = -lprobs.gather(1, safe[:, None]).squeeze(1)  # (N,)
    smooth = -lprobs.mean(dim=-1)  # (N,)
    zero = lprobs.new_zeros(())
    nll = torch.where(keep, nll, zero)
    smooth = torch.where(keep, smooth, zero)
    nll_sum = nll.sum()
    loss = (1.0 - epsilon) * nll_sum + epsilon * smooth.sum()
    return LossOutput(loss, nll_sum, keep.sum())


def validation_loss(
    model: nn.Module, loss_fn: LossFn, batches: ValidSource, device: torch.device, precision: str
) -> dict[str, float]:
    """Loss, NLL and perplexity per target token (item) on ``batches`` (eval mode, no grad; the
    model is put back in train mode after).

    Args:
        model: the model to validate (unwrapped or DDP-wrapped, as ``loss_fn`` takes it).
        loss_fn: the task's loss hook.
        batches: the validation batches, or a function that yields them afresh.
        device: the device the model is on; batches are moved there.
        precision: the resolved precision to autocast to.

    Returns:
        ``loss`` and ``nll`` per token, ``ppl`` (``exp(nll)``, capped at ``exp(700)``) and
        ``ntokens``, as floats.

    Raises:
        DataError: the batches hold no target tokens.
    """
    source = batches() if callable(batches) else batches
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    model.eval()
    try:
        with torch.no_grad(), autocast(precision, device.type):
            for batch in source:
                out = loss_fn(model, move_to(batch, device))
                ntok = torch.as_tensor(out.ntokens, device=device).double()
                sums += torch.stack([out.loss.double(), out.nll.double(), ntok])
    finally:
        model.train()
    loss, nll, ntokens = sums.tolist()
    if ntokens <= 0:
        raise DataError("validation batches contain no target tokens")
    return {"loss": loss / ntokens, "nll": nll / ntokens, "ppl": math.exp(min(nll / ntokens, 700.0)),
            "ntokens": ntokens}
