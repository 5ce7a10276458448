"""Train a Hugging Face model with SHAPE, CAPE or randomized positions.

Shape legend: B batch, L sequence length, V vocabulary.

:class:`PositionAugmentedModel` wraps a causal LM; in training it computes augmented
``position_ids (B, L)`` from the attention mask and passes them (and always an attention mask: with
none, transformers reads non-consecutive ``position_ids`` as packed sequences) to the model. In eval
it calls the model untouched, so evaluation and ``generate`` see the plain positions 0..L−1 (SHAPE's
inference k = 0, §2.3; CAPE's eval transform is a shift, which a rotary model does not see).
:class:`PositionIdsCollator` does the same work in a data collator, for the training loader only;
:func:`augment_model` picks the wrapper for a causal LM or a BART-style seq2seq model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import inspect

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.hf.augment import PositionSampler
from posenc.hf.families import inspect_model
from posenc.hf.seq2seq import PositionAugmentedSeq2Seq


class PositionAugmentedModel(nn.Module):
    """``model`` with the registered augmentation ``augment`` applied to its ``position_ids``."""

    def __init__(self, model: nn.Module, augment: str, **params: Any) -> None:
        super().__init__()
        self.model = model
        self.sampler = PositionSampler(augment, inspect_model(model), **params)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None, **kwargs: Any) -> Any:
        """Same arguments and output as the wrapped model's ``forward``; logits ``(B, L, V)``."""
        if not self.training:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if kwargs.get("position_ids") is not None:
            raise ConfigError("posenc.hf: pass no position_ids in training: the wrapper sets them")
        if attention_mask is None:
            like = input_ids if input_ids is not None else kwargs["inputs_embeds"][..., 0]
            attention_mask = torch.ones(like.shape[:2], dtype=torch.long, device=like.device)
        kwargs["position_ids"] = self.sampler(attention_mask)
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``generate`` (plain positions)."""
        return self.model.generate(*args, **kwargs)


class PositionIdsCollator:
    """Wrap a collator so each batch gets augmented ``position_ids`` (training loader only)."""

    def __init__(self, collate: Callable[[list[Any]], dict[str, Tensor]], model: nn.Module, augment: str, **params: Any) -> None:
        self.collate = collate
        self.sampler = PositionSampler(augment, inspect_model(model), **params).train()

    def __call__(self, features: list[Any]) -> dict[str, Tensor]:
        batch = dict(self.collate(features))
        if "attention_mask" not in batch:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        with torch.no_grad():
            batch["position_ids"] = self.sampler(batch["attention_mask"])
        return batch


def augment_model(model: nn.Module, augment: str, **params: Any) -> nn.Module:
    """Wrap ``model`` by how it takes positions: a ``position_ids`` argument (causal LMs) or, when it
    has none, BART-style learned tables inside its encoder and decoder."""
    if "position_ids" in inspect.signature(model.forward).parameters:
        return PositionAugmentedModel(model, augment, **params)
    return PositionAugmentedSeq2Seq(model, augment, **params)
