"""``PositionConfig``: which position methods a model uses, by name, with one params block each.

``name`` is a ``+``-joined combination of registered methods, at most one per family, plus
aliases for the papers' models:

=============  ===================================  ======================================
name           components                           paper
=============  ===================================  ======================================
ape            sinusoidal                           Vaswani et al.; SHAPE's APE
shape          sinusoidal + shape                   SHAPE (Kiyono et al. 2021)
cape           sinusoidal + cape                    CAPE (Likhomanenko et al. 2021)
rpe            shaw (no absolute positions)         Shaw et al. 2018; SHAPE's RPE
ape+shaw       sinusoidal + shaw                    Shaw et al. 2018, "both"
rnn            gru                                  Neishi & Yoshinaga 2019 RNN-Transformer
rr             gru + shaw                           Neishi & Yoshinaga 2019 RR-Transformer
nopos          none                                 no positions
=============  ===================================  ======================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc.config import require
from posenc.errors import ConfigError
from posenc.positions import registry
from posenc.positions.cape import CapeParams
from posenc.positions.gru import GRUParams
from posenc.positions.learned import LearnedParams
from posenc.positions.none import NoParams
from posenc.positions.shape import ShapeParams
from posenc.positions.shaw import ShawParams
from posenc.positions.sinusoidal import SinusoidalParams

#: Whole-name aliases for the papers' models.
MODEL_ALIASES: dict[str, str] = {
    "shape": "sinusoidal+shape",
    "cape": "sinusoidal+cape",
    "rr": "gru+shaw",
}
#: Aliases of single methods, usable inside a combination (``ape+rpe``).
METHOD_ALIASES: dict[str, str] = {
    "ape": "sinusoidal",
    "sinpos": "sinusoidal",
    "abspos": "learned",
    "rpe": "shaw",
    "rnn": "gru",
    "nopos": "none",
}

#: Input methods that read the positions tensor, and so can be augmented, per augmentation.
AUGMENTABLE = {"shape": {"sinusoidal", "learned"}, "cape": {"sinusoidal"}}


@dataclass(frozen=True)
class Methods:
    """The resolved combination: one input method, optional attention method and augmentation."""

    input: str
    attention: str | None
    augment: str | None


def resolve(name: str) -> Methods:
    """Parse ``name`` into one method per family, validating the combination."""
    expanded = MODEL_ALIASES.get(name.strip(), name)
    parts = [METHOD_ALIASES.get(t.strip(), t.strip()) for t in expanded.split("+")]
    chosen: dict[str, str] = {}
    for part in parts:
        family = registry.family_of(part)
        if family in chosen and chosen[family] != part:
            raise ConfigError(f"position {name!r}: two {family} methods ({chosen[family]}, {part})")
        chosen[family] = part
    methods = Methods(chosen.get("input", "none"), chosen.get("attention"), chosen.get("augment"))
    if methods.augment and methods.input not in AUGMENTABLE[methods.augment]:
        raise ConfigError(
            f"position {name!r}: {methods.augment} augments absolute positions and needs input "
            f"method {' or '.join(sorted(AUGMENTABLE[methods.augment]))}, not {methods.input}"
        )
    return methods


@dataclass
class PositionConfig:
    name: str = "ape"
    sinusoidal: SinusoidalParams = field(default_factory=SinusoidalParams)
    learned: LearnedParams = field(default_factory=LearnedParams)
    gru: GRUParams = field(default_factory=GRUParams)
    none: NoParams = field(default_factory=NoParams)
    shaw: ShawParams = field(default_factory=ShawParams)
    shape: ShapeParams = field(default_factory=ShapeParams)
    cape: CapeParams = field(default_factory=CapeParams)

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "position.name must be a non-empty string")
        self.methods  # validates the combination

    @property
    def methods(self) -> Methods:
        return resolve(self.name)

    def params(self, method: str) -> Any:
        return getattr(self, method)

    @staticmethod
    def _resolve_alias(path: list[str], data: dict[str, Any]) -> list[str] | None:
        """``max_shift`` → ``shape.max_shift``: a bare option of the active methods' params."""
        methods = resolve(str(data.get("name", "ape")))
        active = [m for m in (methods.input, methods.attention, methods.augment) if m]
        hits = [m for m in active if path[0] in registry.entry(m).params.__dataclass_fields__]
        return [hits[0], *path] if len(hits) == 1 else None
