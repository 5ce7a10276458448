"""The training loss of an encoder–decoder (:class:`Seq2SeqLoss`): teacher forcing, scored by
label-smoothed cross entropy (:func:`~posenc.training.loss.label_smoothed_nll`).

Shape legend: B batch, T target length, V output tokens.

It serves every model with the encoder–decoder call ``model(src, src_mask, tgt_in, tgt_mask)``
(:class:`~posenc.models.seq2seq.Seq2SeqTransformer`, :class:`~posenc.models.rnn_nmt.RNNNMT`), so
a task that trains one, a benchmark and a test share it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from posenc.training.loss import LossOutput, label_smoothed_nll


class Seq2SeqLoss:
    """The loss hook (``loss_fn(model, batch)``) of an encoder–decoder on a padded batch
    (:class:`~posenc.data.batching.Batch`).

    Args:
        epsilon: the label smoothing ε.
        pad_id: the padding id (its targets are not scored).
    """

    def __init__(self, epsilon: float, pad_id: int = 0) -> None:
        self.epsilon, self.pad_id = epsilon, pad_id

    def __call__(self, model: nn.Module, batch: Any) -> LossOutput:
        """The summed loss of one batch.

        Args:
            model: the encoder–decoder.
            batch: ``src``, ``src_mask``, ``tgt_in``, ``tgt_mask`` and ``tgt_out``.

        Returns:
            Loss and NLL summed over the non-padding target tokens, and their count.
        """
        logits = model(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
        return label_smoothed_nll(logits, batch.tgt_out, self.epsilon, self.pad_id)
