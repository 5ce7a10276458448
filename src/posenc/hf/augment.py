"""posenc augmentations over Hugging Face ``position_ids``.

Shape legend: B batch, L sequence length.

An augmentation is chosen by its registry name (``posenc.positions.registry.AUGMENT``: ``shape``,
``cape``, ``randomized``) and acts, as everywhere in posenc, on a float
positions tensor ``(B, L)`` with a mask. :class:`PositionSampler` turns an attention mask into the
``position_ids`` a given model family accepts.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError, DataError
from posenc.hf.families import PositionInterface
from posenc.positions import registry
from posenc.positions.base import Augmentation


def build_augmentation(name: str, **params: Any) -> Augmentation:
    """A registered augmentation, built from keyword parameters.

    Args:
        name: the augmentation's registered name (``shape``, ``cape``, ``randomized``, ...).
        **params: fields of its params dataclass (``max_shift=...``).

    Returns:
        The augmentation module.

    Raises:
        ConfigError: an unknown name, an unknown keyword or a bad value.
    """
    if name not in registry.AUGMENT:
        known = ", ".join(sorted(registry.AUGMENT))
        raise ConfigError(f"posenc.hf: unknown augmentation {name!r} (registered: {known})")
    entry = registry.AUGMENT[name]
    try:
        p = entry.params(**params)
    except TypeError as exc:  # an unknown keyword, or a value of a type the params cannot compare
        raise ConfigError(f"posenc.hf: bad parameters for augmentation {name!r}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"posenc.hf: {exc}") from None
    return entry.builder(params=p)


def cache_of(kwargs: dict[str, Any]) -> Any:
    """The key/value cache of a forward call's keywords: ``cache`` (transformers >= 5.24) or
    ``past_key_values`` (earlier, and its deprecated alias).

    Args:
        kwargs: the keywords of a model's forward call.

    Returns:
        The cache, or None when there is none.
    """
    cache = kwargs.get("cache")
    return cache if cache is not None else kwargs.get("past_key_values")


def base_positions(attention_mask: Tensor) -> Tensor:
    """Positions 0..n−1 of the real tokens of each row; pads get 0.

    Counting real tokens (not indices) makes left- and right-padded rows alike.

    Args:
        attention_mask: ``(B, L)``, nonzero at real tokens.

    Returns:
        Float positions ``(B, L)``.
    """
    mask = attention_mask.bool()
    return ((mask.long().cumsum(-1) - 1).clamp_min(0) * mask).float()


class PositionSampler(nn.Module):
    """``attention_mask (B, L)`` → augmented ``position_ids (B, L)`` for one model family.

    Args:
        name: the augmentation's registered name.
        interface: the model's position interface (:func:`~posenc.hf.families.inspect_model`).
        **params: fields of the augmentation's params dataclass.

    Raises:
        ConfigError: an augmentation the interface cannot take (task-given ids, real values for a
            learned table, a shift or reach beyond its rows).
    """

    def __init__(self, name: str, interface: PositionInterface, **params: Any) -> None:
        super().__init__()
        self.name = name
        self.interface = interface
        self.augmentation = build_augmentation(name, **params)
        family = interface.family
        if self.augmentation.needs_task_ids:
            raise ConfigError(f"posenc.hf: {name} shifts task-given digit ids (posenc's length suite, "
                              "data.position_ids=coupled), not a Hugging Face model's token positions")
        if not family.continuous and not self.augmentation.integer_valued:
            raise ConfigError(
                f"posenc.hf: {name} gives real-valued positions but {interface.model_type} has learned "
                f"position embeddings, which need integer position_ids (use shape or a rotary model)"
            )
        shift = getattr(self.augmentation.params, "max_shift", 0)
        if family.bounded and interface.max_positions is not None and shift >= interface.max_positions:
            raise ConfigError(
                f"posenc.hf: {name} max_shift {shift} must be < the {interface.max_positions} learned "
                f"positions of {interface.model_type}"
            )
        reach = getattr(self.augmentation.params, "position_reach", None)  # randomized: N − 1, always reached
        if (family.bounded and interface.max_positions is not None and reach is not None
                and reach >= interface.max_positions):
            raise ConfigError(
                f"posenc.hf: {name} draws positions up to {reach} but {interface.model_type} has "
                f"{interface.max_positions} learned positions: pass max_len <= {interface.max_positions}"
            )

    def forward(self, attention_mask: Tensor) -> Tensor:
        """The ``position_ids`` of a batch. Training: augmented. Eval: the real-token count (the
        training positions at zero augmentation, left padding included), or, for randomized positions,
        sampled from the seeded eval generator (Ruoss et al. 2023).

        Args:
            attention_mask: ``(B, L)``, nonzero at real tokens.

        Returns:
            Positions ``(B, L)``: float for rotary models, long for learned tables; pads 0.

        Raises:
            DataError: positions outside a learned table.
        """
        mask = attention_mask.bool()
        positions = base_positions(mask)
        if self.training or self.augmentation.samples_in_eval:
            self.check_reach(positions, mask)
            positions = self.augmentation(positions, mask)
        return self.finish(positions, mask)

    def continue_positions(self, attention_mask: Tensor, length: int) -> Tensor:
        """Eval positions of the new tokens of a cached step: the real-token count a forward over the
        whole mask gives them, so each row's left padding is counted out in cached steps as in a full
        forward.

        Args:
            attention_mask: ``(B, P + length)`` over the P cached tokens and the new ones.
            length: how many new tokens (the last columns).

        Returns:
            Positions ``(B, length)``, in the family's dtype.
        """
        mask = attention_mask.bool()
        return self.finish(base_positions(mask)[:, -length:], mask[:, -length:])

    def check_reach(self, positions: Tensor, mask: Tensor) -> None:
        """Before sampling: the largest shift (SHAPE's ``max_shift``, §2.3: k ~ U{0..K}) added to the
        longest row of ``positions (B, L)`` must stay inside a learned table, for every draw of k,
        so a batch too long fails on its first use, not only on the draws that overflow.

        Args:
            positions: base positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens.

        Raises:
            DataError: the longest row plus the largest shift leaves the table.
        """
        shift = int(getattr(self.augmentation.params, "max_shift", 0) or 0)
        n = self.interface.max_positions
        if not (self.interface.family.bounded and n is not None and shift):
            return
        real = positions[mask]
        longest = int(real.max()) + 1 if real.numel() else 0
        if longest - 1 + shift >= n:
            raise DataError(
                f"posenc.hf: {self.name} shifts positions by up to {shift}, so a row of {longest} tokens can reach "
                f"position {longest - 1 + shift}, but {self.interface.model_type} has {n} learned positions: "
                f"use rows of at most {n - shift} tokens or a smaller max_shift"
            )

    def finish(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Pads to 0, then the family's dtype and range check.

        Args:
            positions: positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens.

        Returns:
            Positions ``(B, L)``: float for rotary models, long for learned tables.

        Raises:
            DataError: non-integer positions or positions outside a learned table.
        """
        positions = torch.where(mask, positions, torch.zeros_like(positions))  # pads: any in-range value
        if not self.interface.family.bounded:
            return positions
        return self._check_table(positions, mask)

    def _check_table(self, positions: Tensor, mask: Tensor) -> Tensor:
        n = self.interface.max_positions
        if not torch.equal(positions, positions.round()):
            raise DataError(f"posenc.hf: {self.name} produced non-integer positions for a learned table")
        real = positions[mask]
        if real.numel() and (real.min() < 0 or real.max() >= n):
            raise DataError(
                f"posenc.hf: {self.name} positions reach {int(real.max())} (min {int(real.min())}) but "
                f"{self.interface.model_type} has {n} learned positions: "
                "shorten the sequences or the augmentation's range"
            )
        return positions.long()
