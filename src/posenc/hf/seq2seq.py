"""SHAPE and randomized positions for BART-style seq2seq models (learned positions, no position_ids).

Shape legend: B batch, S source length, T target length, D model width.

BART, mBART, PLBart, MVP and Blenderbot(-Small) compute their learned positions inside the encoder and
decoder (a ``*LearnedPositionalEmbedding``, an ``nn.Embedding`` read at ``position + offset``), and
their ``forward`` takes no ``position_ids``. In training, :class:`PositionAugmentedSeq2Seq` replaces
the output of those two modules with the rows of the augmented positions, drawn with the
augmentation's ``pair`` (SHAPE: independent shifts for source and target, Kiyono et al. 2021 §2.3).
In eval the rows are those of the real-token positions (for right padding, what the model reads
itself), or, for randomized positions, of positions sampled from the seeded eval generator, as Ruoss
et al. (2023) evaluate them; ``generate`` runs the model untouched. The tables are learned, so only
integer-valued augmentations (SHAPE, randomized) are accepted.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.hf.augment import PositionSampler, base_positions, cache_of
from posenc.hf.families import FAMILIES, PositionInterface, require_module


def learned_tables(model: nn.Module) -> tuple[nn.Embedding, nn.Embedding]:
    """The encoder's and decoder's learned position tables.

    Args:
        model: a BART-style seq2seq model.

    Returns:
        The encoder's and the decoder's ``*LearnedPositionalEmbedding``.

    Raises:
        ConfigError: the model has no such tables in both.
    """
    found = {
        name.split(".")[-2]: m
        for name, m in model.named_modules()
        if type(m).__name__.endswith("LearnedPositionalEmbedding") and isinstance(m, nn.Embedding)
        and name.split(".")[-2:-1] in (["encoder"], ["decoder"])
    }
    if set(found) != {"encoder", "decoder"}:
        raise ConfigError(
            f"posenc.hf: {type(model).__name__} has no BART-style learned position tables in its encoder and "
            "decoder (T5's relative buckets and Marian/Pegasus sinusoidal tables are not supported)"
        )
    return found["encoder"], found["decoder"]


def positions_held(table: nn.Embedding) -> int:
    """How many positions a learned table holds (its rows less the model's ``offset``).

    Args:
        table: a ``*LearnedPositionalEmbedding``.

    Returns:
        The number of positions, 0 … rows − 1.
    """
    return table.num_embeddings - int(getattr(table, "offset", 0))


class PositionAugmentedSeq2Seq(nn.Module):
    """A BART-style model with the registered integer augmentation ``augment`` in training.

    Args:
        model: a BART-style seq2seq model instance (BART, mBART, PLBart, MVP, Blenderbot).
        augment: an integer-valued augmentation's name (``shape``, ``randomized``).
        **params: fields of its params dataclass.

    Raises:
        ConfigError: no learned tables, or an augmentation they cannot take.
        TypeError: not a model instance.
    """

    posenc_wrapper = True  # require_module refuses to wrap it again

    def __init__(self, model: nn.Module, augment: str, **params: Any) -> None:
        super().__init__()
        self.model = require_module(model, "PositionAugmentedSeq2Seq")
        encoder, decoder = learned_tables(model)
        model_type = str(getattr(getattr(model, "config", None), "model_type", type(model).__name__))
        held = min(positions_held(encoder), positions_held(decoder))
        interface = PositionInterface(FAMILIES["learned"], held, model_type)
        self.sampler = PositionSampler(augment, interface, **params)
        self._pending: dict[int, Tensor] = {}
        self._tables = (id(encoder), id(decoder))  # ids, not attributes: no second registration
        for table in (encoder, decoder):
            table.register_forward_hook(self._replace)

    def _replace(self, table: nn.Module, args: tuple, output: Tensor) -> Tensor:
        """Forward hook: the table's rows at the positions ``forward`` set ``(B, L, D)``; else the output."""
        positions = self._pending.get(id(table))
        if positions is None:
            return output
        return F.embedding(positions + int(getattr(table, "offset", 0)), table.weight)

    def _target_mask(self, input_ids: Tensor, kwargs: dict[str, Any]) -> Tensor:
        """``(B, T)``: the decoder mask, else all ones over ``decoder_input_ids``, ``labels``, or (as BART
        then shifts ``input_ids`` right to make the decoder input) ``input_ids``."""
        if kwargs.get("decoder_attention_mask") is not None:
            return kwargs["decoder_attention_mask"]
        like = next((kwargs[k] for k in ("decoder_input_ids", "labels") if kwargs.get(k) is not None), input_ids)
        return torch.ones(like.shape[:2], dtype=torch.long, device=like.device)

    def _positions(self, src_mask: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Source/target rows to read ``(B, S)``, ``(B, T)``: augmented in training (and randomized at eval)."""
        src, tgt = base_positions(src_mask), base_positions(tgt_mask)
        augmentation = self.sampler.augmentation
        if self.training or augmentation.samples_in_eval:
            self.sampler.check_reach(src, src_mask)
            self.sampler.check_reach(tgt, tgt_mask)
            src, tgt = augmentation.pair(src, src_mask, tgt, tgt_mask)
        return self.sampler.finish(src, src_mask), self.sampler.finish(tgt, tgt_mask)

    def forward(
        self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None, labels: Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        """The wrapped model's ``forward`` with augmented position rows in its encoder and decoder.

        Args:
            input_ids: source ids ``(B, S)`` (None, or a cache or ``encoder_outputs``: the model runs
                untouched, eval only).
            attention_mask: ``(B, S)``, nonzero at real source tokens (None: all real).
            labels: target ids ``(B, T)``, named so that the ``Trainer`` keeps that column.
            **kwargs: the wrapped model's other keywords (``decoder_input_ids``, ...).

        Returns:
            The wrapped model's output.

        Raises:
            ConfigError: training without ``input_ids`` or with a cache.
            DataError: positions outside the tables.
        """
        if labels is not None:
            kwargs["labels"] = labels
        if input_ids is None or cache_of(kwargs) is not None or kwargs.get("encoder_outputs") is not None:
            if self.training:
                raise ConfigError("posenc.hf: training needs input_ids (not inputs_embeds, encoder_outputs or a cache)")
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        src_mask, tgt_mask = attention_mask.bool(), self._target_mask(input_ids, kwargs).bool()
        self._pending = dict(zip(self._tables, self._positions(src_mask, tgt_mask)))
        try:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        finally:
            self._pending = {}

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's ``generate`` (plain positions).

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
