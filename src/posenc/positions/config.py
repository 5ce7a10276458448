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
abacus         learned + abacus                     McLeish et al. 2024 (over coupled ids)
=============  ===================================  ======================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

from posenc.config import require, to_dict
from posenc.errors import ConfigError
from posenc.positions import registry

#: Whole-name aliases for the papers' models.
MODEL_ALIASES: dict[str, str] = {
    "shape": "sinusoidal+shape",
    "cape": "sinusoidal+cape",
    "rr": "gru+shaw",
    "cape-2d": "sinusoidal2d+cape2d",
    "abacus": "learned+abacus",
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

#: Which augmentation composes with which method is declared by each method at registration
#: (``augmentable_by``). Relative methods (ALiBi, T5, Shaw) see only distances: a shift cancels,
#: but randomized positions (Ruoss et al. 2023) change the distances, so only randomized composes
#: with them.


@dataclass(frozen=True)
class Methods:
    """The resolved combination: one input method, optional attention method and augmentation.

    Args:
        input: the input method's registered name (``none`` when the name gives none).
        attention: the attention method's name, or None.
        augment: the augmentation's name, or None.
    """

    input: str
    attention: str | None
    augment: str | None


def resolve(name: str) -> Methods:
    """Parse ``name`` into one method per family, validating the combination.

    Args:
        name: a ``+``-joined combination of registered methods and aliases (``ape+shaw``, ``rope``).

    Returns:
        The resolved methods.

    Raises:
        ConfigError: an unknown method, two methods of one family, or an augmentation that no
            method of the combination reads.
    """
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
    readers = [m for m in (methods.input, methods.attention) if m]
    if aug and not any(aug in registry.entry(m).augmentable_by for m in readers):
        inputs = sorted(e.name for e in registry.entries() if aug in e.augmentable_by and e.name in registry.INPUT)
        attention = sorted(e.name for e in registry.entries()
                           if aug in e.augmentable_by and e.name in registry.ATTENTION)
        needs = f"input method {' or '.join(inputs)}" + (
            f" or attention method {' or '.join(attention)}" if attention else "")
        raise ConfigError(
            f"position {name!r}: {aug} augments absolute positions and needs {needs}, "
            f"not {methods.input}+{methods.attention or '-'}"
        )
    return methods


class _PositionConfigBase:
    """Behaviour of :data:`PositionConfig`; its fields are generated from the registry below."""

    name: str

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "position.name must be a non-empty string")
        self._check_table(self.methods)  # resolving validates the combination

    def _check_table(self, m: Methods) -> None:
        """An augmentation that always reaches far positions (``position_reach``: randomized draws from
        {0..N−1}, Ruoss et al. 2023 §3) must fit the input method's table (``position_limit``: learned
        rows), or every step would fail; checked here, not at the first forward."""
        reach = getattr(self.params(m.augment), "position_reach", None) if m.augment else None
        limit = getattr(self.params(m.input), "position_limit", None)
        if reach is not None and limit is not None and reach >= limit:
            raise ConfigError(
                f"position {self.name!r}: {m.augment} draws positions up to {reach} but {m.input} has {limit} "
                f"(model.position.{m.input}.max_positions): lower model.position.{m.augment}.max_len to <= {limit} "
                f"or raise {m.input}.max_positions"
            )

    @property
    def methods(self) -> Methods:
        """The methods ``name`` resolves to."""
        return resolve(self.name)

    @property
    def active(self) -> list[str]:
        """The methods ``name`` uses (input, attention, augmentation), in that order."""
        m = self.methods
        return [n for n in (m.input, m.attention, m.augment) if n]

    def determining_dict(self) -> dict[str, Any]:
        """What of this section determines a model. The other methods' blocks are never read, so
        registering another method (another block) changes no run's fingerprint
        (runs/fingerprint.determining_dict).

        Returns:
            ``name`` and the active methods' blocks, as plain dicts.
        """
        return {"name": self.name, **{m: to_dict(self.params(m)) for m in self.active}}

    @classmethod
    def stored_blocks(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The part of a stored position section that determined its run: blocks of other methods,
        including methods not registered in this version, never did.

        Args:
            data: a stored position section (of a fingerprint or config written by any posenc version).

        Returns:
            ``data`` with only ``name`` and the blocks of the methods it names; ``data`` itself when
            its name does not resolve.
        """
        try:
            active = set(cls(name=str(data.get("name", "ape"))).active)
        except ConfigError:
            return data
        return {k: v for k, v in data.items() if k == "name" or k in active}

    def params(self, method: str) -> Any:
        """The options block of one method.

        Args:
            method: a registered method name.

        Returns:
            That method's params dataclass instance.
        """
        return getattr(self, method)

    @property
    def needs_task_ids(self) -> bool:
        """Its augmentation shifts position ids a task gives (Abacus: digit places), not token indices."""
        aug = self.methods.augment
        return bool(aug) and bool(getattr(registry.AUGMENT[aug].builder, "needs_task_ids", False))

    def refuse_task_ids(self, where: str) -> None:
        """Refuse an augmentation that needs task-given ids where they are not given.

        Args:
            where: what reads the positions, as the message names it (e.g. a task or posenc.hf).

        Raises:
            ConfigError: one line, when the augmentation needs task-given ids (Abacus).
        """
        require(not self.needs_task_ids,
                f"model.position {self.name!r}: {self.methods.augment} shifts task-given digit ids "
                f"(the length suite with data.position_ids=coupled); {where} reads token indices, "
                "where it would shift every position but the first")

    def _active_flag(self, flag: str) -> bool:
        """True when an active method's params declare ``flag`` (a property) as true."""
        return any(bool(getattr(self.params(n), flag, False)) for n in self.active)

    @property
    def needs_source_bos(self) -> bool:
        """The data must prepend BOS to every source sentence (CAPE §5.3). Ask this, not the model."""
        return self._active_flag("needs_source_bos")

    @staticmethod
    def _resolve_alias(path: list[str], data: dict[str, Any]) -> list[str] | None:
        """``max_shift`` → ``shape.max_shift``: a bare option of the active methods' params."""
        methods = resolve(str(data.get("name", "ape")))
        active = [m for m in (methods.input, methods.attention, methods.augment) if m]
        hits = [m for m in active if path[0] in registry.entry(m).params.__dataclass_fields__]
        return [hits[0], *path] if len(hits) == 1 else None


def _position_config() -> type:
    """``PositionConfig``: ``name`` plus one params block per registered method (field = method
    name, type = its params dataclass), so a new method file adds its own YAML block."""
    registry.discover()
    fields = [("name", str, field(default="ape"))]
    fields += [(e.name, e.params, field(default_factory=e.params)) for e in registry.entries()]
    cls = make_dataclass("PositionConfig", fields, bases=(_PositionConfigBase,))
    cls.__module__ = __name__
    cls.__doc__ = "Which position methods a model uses (``name``) and one options block per method."
    return cls


#: The position config class (a dataclass generated from the registry; see :func:`_position_config`).
PositionConfig = _position_config()
