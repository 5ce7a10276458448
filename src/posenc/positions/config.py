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
nopos, nope    none                                 no positions
alibi          none + alibi                         Press et al. 2022 (ALiBi)
t5             none + t5                            Raffel et al. 2020 relative bias
rope           none + rope                          Su et al. 2021 (RoFormer)
=============  ===================================  ======================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc.config import require
from posenc.errors import ConfigError
from posenc.positions import registry
from posenc.positions.alibi import AlibiParams
from posenc.positions.cape import CapeParams
from posenc.positions.cape2d import Cape2dParams
from posenc.positions.learned2d import Learned2dParams
from posenc.positions.sinusoidal2d import Sinusoidal2dParams
from posenc.positions.gru import GRUParams
from posenc.positions.learned import LearnedParams
from posenc.positions.none import NoParams
from posenc.positions.randomized import RandomizedParams
from posenc.positions.rope import RopeParams
from posenc.positions.shape import ShapeParams
from posenc.positions.shaw import ShawParams
from posenc.positions.sinusoidal import SinusoidalParams
from posenc.positions.t5 import T5Params

#: Whole-name aliases for the papers' models.
MODEL_ALIASES: dict[str, str] = {
    "shape": "sinusoidal+shape",
    "cape": "sinusoidal+cape",
    "rr": "gru+shaw",
    "cape-2d": "sinusoidal2d+cape2d",
}
#: Aliases of single methods, usable inside a combination (``ape+rpe``).
METHOD_ALIASES: dict[str, str] = {
    "ape": "sinusoidal",
    "sinpos": "sinusoidal",
    "abspos": "learned",
    "rpe": "shaw",
    "rnn": "gru",
    "nopos": "none",
    "nope": "none",
    "sinusoidal-2d": "sinusoidal2d",
    "learned-2d": "learned2d",
}

#: Input methods that read the positions tensor, and so can be augmented, per augmentation.
AUGMENTABLE = {
    "shape": {"sinusoidal", "learned"},
    "cape": {"sinusoidal"},
    "randomized": {"sinusoidal", "learned"},
    "cape2d": {"sinusoidal2d"},
}
#: Attention methods that read the positions tensor, and so can be augmented. Relative methods
#: (ALiBi, T5, Shaw) see only distances: a shift cancels, but randomized positions (Ruoss et al.
#: 2023) change the distances, so only randomized composes with them.
AUGMENTABLE_ATTENTION = {"shape": {"rope"}, "cape": {"rope"}, "randomized": {"rope", "alibi", "t5", "shaw"}}


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
    aug = methods.augment
    if aug and methods.input not in AUGMENTABLE[aug] and methods.attention not in AUGMENTABLE_ATTENTION.get(aug, ()):
        needs = f"input method {' or '.join(sorted(AUGMENTABLE[aug]))}"
        if aug in AUGMENTABLE_ATTENTION:
            needs += f" or attention method {' or '.join(sorted(AUGMENTABLE_ATTENTION[aug]))}"
        raise ConfigError(
            f"position {name!r}: {aug} augments absolute positions and needs {needs}, "
            f"not {methods.input}+{methods.attention or '-'}"
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
    alibi: AlibiParams = field(default_factory=AlibiParams)
    t5: T5Params = field(default_factory=T5Params)
    rope: RopeParams = field(default_factory=RopeParams)
    randomized: RandomizedParams = field(default_factory=RandomizedParams)
    shape: ShapeParams = field(default_factory=ShapeParams)
    cape: CapeParams = field(default_factory=CapeParams)
    sinusoidal2d: Sinusoidal2dParams = field(default_factory=Sinusoidal2dParams)
    learned2d: Learned2dParams = field(default_factory=Learned2dParams)
    cape2d: Cape2dParams = field(default_factory=Cape2dParams)

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "position.name must be a non-empty string")
        self.methods  # validates the combination

    @property
    def methods(self) -> Methods:
        return resolve(self.name)

    def params(self, method: str) -> Any:
        return getattr(self, method)

    def _active_flag(self, flag: str) -> bool:
        """True when an active method's params declare ``flag`` (a property) as true."""
        m = self.methods
        return any(bool(getattr(self.params(n), flag, False)) for n in (m.input, m.attention, m.augment) if n)

    @property
    def needs_source_bos(self) -> bool:
        """The data must prepend BOS to every source sentence (CAPE §5.3). Ask this, not the model."""
        return self._active_flag("needs_source_bos")

    @property
    def needs_corpus_alpha(self) -> bool:
        """CAPE's α (``cape.source_scale``) is 0 = auto and must be set from the corpus."""
        return self._active_flag("needs_corpus_alpha")

    @staticmethod
    def _resolve_alias(path: list[str], data: dict[str, Any]) -> list[str] | None:
        """``max_shift`` → ``shape.max_shift``: a bare option of the active methods' params."""
        methods = resolve(str(data.get("name", "ape")))
        active = [m for m in (methods.input, methods.attention, methods.augment) if m]
        hits = [m for m in active if path[0] in registry.entry(m).params.__dataclass_fields__]
        return [hits[0], *path] if len(hits) == 1 else None
