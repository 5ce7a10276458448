"""Train a Hugging Face model with SHAPE, CAPE or randomized positions.

Shape legend: B batch, L sequence length, V vocabulary.

:class:`PositionAugmentedModel` wraps a causal LM and always passes ``position_ids (B, L)`` computed
from the attention mask (and always an attention mask: with none, transformers reads
non-consecutive ``position_ids`` as packed sequences). In training they are augmented; in eval they
count real tokens, as in training at zero augmentation (so left padding reads the same positions in
both; SHAPE's inference k = 0, §2.3; CAPE's eval transform is a shift, invisible to a rotary model),
except randomized positions, which are sampled at evaluation too, from a seeded generator, as Ruoss
et al. (2023) evaluate them. ``generate`` calls the wrapped model (its own positions).

It follows ``model.train()``/``model.eval()``, so it is the way to use posenc with the Hugging Face
``Trainer`` (which switches modes but collates training and evaluation batches with one collator).
:class:`PositionIdsCollator` adds training positions in a data collator, for custom loops that give
it the training loader only. :func:`augment_model` picks the wrapper for a causal LM or a BART-style
seq2seq model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.hf.augment import PositionSampler, cache_of
from posenc.hf.families import inspect_model, require_module
from posenc.hf.seq2seq import PositionAugmentedSeq2Seq


class PositionAugmentedModel(nn.Module):
    """``model`` with the registered augmentation ``augment`` applied to its ``position_ids``.

    Args:
        model: a causal LM instance that takes ``position_ids`` (rotary or learned positions).
        augment: the augmentation's registered name.
        **params: fields of its params dataclass.

    Raises:
        ConfigError: a model without usable ``position_ids`` or an augmentation it cannot take.
        TypeError: not a model instance.
    """

    posenc_wrapper = True  # require_module refuses to wrap it again

    def __init__(self, model: nn.Module, augment: str, **params: Any) -> None:
        super().__init__()
        self.model = require_module(model, "PositionAugmentedModel")
        self.sampler = PositionSampler(augment, inspect_model(model), **params)

    def forward(
        self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None, labels: Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        """The wrapped model's ``forward`` with ``position_ids`` from the attention mask. In eval,
        given ``position_ids`` the model runs untouched (its own positions); given a cache
        (``cache``/``past_key_values``), the new tokens get the positions a full forward gives them
        (:meth:`_cached_forward`).

        Args:
            input_ids: token ids ``(B, L)`` (None with ``inputs_embeds`` in ``kwargs``).
            attention_mask: ``(B, L)`` (``(B, P + L)`` in a cached step), nonzero at real tokens;
                None: all real.
            labels: ``(B, L)``, named so that the ``Trainer`` keeps that column.
            **kwargs: the wrapped model's other keywords.

        Returns:
            The wrapped model's output (logits ``(B, L, V)``).

        Raises:
            ConfigError: ``position_ids`` given in training, or a cached step that cannot continue.
            DataError: positions outside a learned table.
        """
        if labels is not None:
            kwargs["labels"] = labels
        given = kwargs.get("position_ids") is not None
        if not self.training and given:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if not self.training and cache_of(kwargs) is not None:
            return self._cached_forward(input_ids, attention_mask, kwargs)
        if given:
            raise ConfigError("posenc.hf: pass no position_ids in training: the wrapper sets them")
        if attention_mask is None:
            like = input_ids if input_ids is not None else kwargs["inputs_embeds"][..., 0]
            attention_mask = torch.ones(like.shape[:2], dtype=torch.long, device=like.device)
        kwargs["position_ids"] = self.sampler(attention_mask)
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def _cached_forward(self, input_ids: Tensor | None, attention_mask: Tensor | None, kwargs: dict[str, Any]) -> Any:
        """An eval step after a prefill: ``input_ids (B, L)`` new tokens, ``attention_mask (B, P + L)``
        over the P cached tokens and the new ones (as transformers' ``generate`` passes it). Their
        positions count each row's real tokens over the whole mask, as a full forward does, so left
        padding gives the same logits either way. Without a mask, positions continue from P (right
        when the prefill had no padding). Randomized positions sampled at eval cannot continue a
        cache: a one-line ConfigError."""
        if self.sampler.augmentation.samples_in_eval:
            raise ConfigError(f"posenc.hf: {self.sampler.name} positions are sampled anew in every eval forward, "
                              "so cached steps cannot continue a prefill's; use eval='sequential' or no cache")
        new = input_ids if input_ids is not None else kwargs["inputs_embeds"][..., 0]
        rows, length = new.shape[:2]
        past = _cached_length(cache_of(kwargs))
        if attention_mask is None:
            attention_mask = torch.ones(rows, past + length, dtype=torch.long, device=new.device)
        elif attention_mask.shape[1] != past + length:
            raise ConfigError(f"posenc.hf: a cached step needs the attention mask of the {past} cached and the "
                              f"{length} new tokens ({past + length} columns), got {attention_mask.shape[1]}")
        kwargs["position_ids"] = self.sampler.continue_positions(attention_mask, length)
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``generate`` (its own positions).

        Args:
            *args: its positional arguments.
            **kwargs: its keywords.

        Returns:
            What it returns (the generated ids).
        """
        return self.model.generate(*args, **kwargs)

    def save_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``save_pretrained``: the weights (no wrapper state is saved).

        Args:
            *args: its positional arguments (the directory).
            **kwargs: its keywords.

        Returns:
            What it returns.
        """
        return self.model.save_pretrained(*args, **kwargs)


def _cached_length(cache: Any) -> int:
    """Tokens held in a ``past_key_values`` cache: a transformers ``Cache``, or the legacy tuple of
    per-layer (key, value) tensors ``(B, H, P, D)``."""
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return int(cache[0][0].shape[-2])


class PositionIdsCollator:
    """Wrap a collator so each batch gets augmented ``position_ids`` — for a custom loop's training
    loader only. The Hugging Face ``Trainer`` collates evaluation batches with the training collator,
    so there use :func:`augment_model` instead (it follows the Trainer's train/eval switch).

    Args:
        collate: the collator to wrap: features → a batch dict with ``input_ids`` (and
            ``attention_mask``).
        model: the model the batches are for (its position interface).
        augment: the augmentation's registered name.
        **params: fields of its params dataclass.

    Raises:
        TypeError: ``collate`` not callable or ``model`` not a model instance.
        ConfigError: a model without usable ``position_ids`` or an augmentation it cannot take.
    """

    def __init__(
        self, collate: Callable[[list[Any]], dict[str, Tensor]], model: nn.Module, augment: str, **params: Any
    ) -> None:
        if not callable(collate):
            raise TypeError(f"posenc.hf: PositionIdsCollator needs a callable collator, got {type(collate).__name__}")
        self.collate = collate
        self.sampler = PositionSampler(
            augment, inspect_model(require_module(model, "PositionIdsCollator")), **params).train()

    def __call__(self, features: list[Any]) -> dict[str, Tensor]:
        """Collate, then add an all-ones ``attention_mask`` if missing and training ``position_ids``.

        Args:
            features: the examples of one batch.

        Returns:
            The batch with ``position_ids`` ``(B, L)``.
        """
        batch = dict(self.collate(features))
        if "attention_mask" not in batch:
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        with torch.no_grad():
            batch["position_ids"] = self.sampler(batch["attention_mask"])
        return batch


def augment_model(model: nn.Module, augment: str, **params: Any) -> nn.Module:
    """Wrap ``model`` by how it takes positions: a ``position_ids`` argument (causal LMs) or, when it
    has none, BART-style learned tables inside its encoder and decoder. One-line errors up front: a
    TypeError for anything but a model instance, a ConfigError (a ValueError) for bad parameters.

    Args:
        model: a causal LM or BART-style seq2seq model instance.
        augment: the augmentation's registered name (``shape``, ``cape``, ``randomized``).
        **params: fields of its params dataclass.

    Returns:
        A :class:`PositionAugmentedModel` or :class:`~posenc.hf.seq2seq.PositionAugmentedSeq2Seq`.

    Raises:
        TypeError: not a model instance, or ``augment`` not a str.
        ConfigError: a model posenc cannot augment or bad parameters.
    """
    model = require_module(model)
    if not isinstance(augment, str):
        raise TypeError(f"posenc.hf: the augmentation is a name (str), got {type(augment).__name__}")
    if "position_ids" in inspect.signature(model.forward).parameters:
        return PositionAugmentedModel(model, augment, **params)
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", True):
        inspect_model(model)  # a decoder-only model without position_ids: its one-line refusal
    return PositionAugmentedSeq2Seq(model, augment, **params)
