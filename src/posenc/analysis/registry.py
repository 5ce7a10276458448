"""THE registry of analyses: name → what it does, how it reads a grid (its feeder), what it needs
of the runs, its typed options and how it runs over the seeds.

The experiment schema (``experiment.analyses``, ``experiment.analysis_options``), a task's report
and ``posenc analyze`` all take their analyses from :data:`REGISTRY`. An analysis fits the grids
of a task whose runs carry everything it ``needs`` (the task's RunSpec ``carries``; names in
analysis/view.py): :func:`fitting` refuses any other in one line, and :func:`fitting_names` lists
those a task's grids run.

An experiment's ``analysis_options`` is one flat mapping shared by its analyses (analysis/options.py);
:func:`check_options` refuses, with a one-line :class:`~posenc.errors.ConfigError`, a key that
is no analysis's option or a bad value.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from posenc.analysis import feeders as _feed
from posenc.analysis import position_nll as _position_nll
from posenc.analysis.options import (
    WHERE,
    AnalysisOptions,
    BootstrapOptions,
    LengthOptions,
    LongSourceOptions,
    NoOptions,
    PositionNllOptions,
    ShiftOptions,
    SwappedOptions,
)
from posenc.analysis.view import LOGS, MODELS, OUTPUTS, TEST_SET, TRAINING_DATA, GridView
from posenc.config import from_dict, shorten
from posenc.errors import ConfigError

#: What a feeder is: the view of one grid part and the analysis's options → files in the folder.
Feeder = Callable[[GridView, Any, Path], None]


@dataclass(frozen=True)
class Analysis:
    """One analysis.

    Args:
        description: one line: what it shows and which paper figure/table it reproduces.
        feeder: reads a :class:`~posenc.analysis.view.GridView` and the parsed options, and
            runs the analysis's library function into the output folder.
        needs: what the runs must carry for the feeder to read them (names of analysis/view.py).
        options: its options dataclass (analysis/options.py).
        pooled: it reads outputs only and runs once on all seeds pooled; otherwise once per seed.
        min_methods: the fewest methods it compares (fewer: the report skips it with a note).
        across_seeds: for a per-seed analysis, what combines its per-seed outputs (seed → folder)
            into one table over the seeds, written beside them (``None``: nothing to combine).
    """

    description: str
    feeder: Feeder
    needs: frozenset[str]
    options: type[AnalysisOptions] = NoOptions
    pooled: bool = False
    min_methods: int = 1
    across_seeds: Callable[[Mapping[int, Path], Path], list[dict]] | None = None

    @property
    def reads_models(self) -> bool:
        """Whether it needs the trained models (checkpoints are not kept with committed results)."""
        return MODELS in self.needs

    def fits(self, carries: Collection[str]) -> bool:
        """Whether runs that carry ``carries`` hold everything this analysis reads.

        Args:
            carries: what the runs carry (a RunSpec's ``carries``; names of analysis/view.py).

        Returns:
            True when :attr:`needs` is a subset of ``carries``.
        """
        return self.needs <= set(carries)

    def option_names(self) -> tuple[str, ...]:
        """The keys of ``analysis_options`` this analysis reads.

        Returns:
            The field names of its options dataclass, in field order.
        """
        return tuple(f.name for f in fields(self.options))

    def parse_options(self, values: Mapping[str, Any]) -> AnalysisOptions:
        """This analysis's options from an experiment's ``analysis_options`` (its own keys; the
        others belong to other analyses), defaults for the keys not given.

        Args:
            values: the experiment's ``analysis_options``.

        Returns:
            An instance of :attr:`options`.
        """
        own = {k: v for k, v in values.items() if k in self.option_names()}
        return from_dict(self.options, own, WHERE)


_TEXTS = frozenset({TEST_SET, OUTPUTS})

REGISTRY: dict[str, Analysis] = {
    "length_bleu": Analysis(
        "BLEU and gain over a baseline by source-length bucket, unseen lengths shaded (SHAPE Fig. 3, Neishi Fig. 3)",
        _feed.feed_length_bleu, _TEXTS | {TRAINING_DATA}, LengthOptions, pooled=True),
    "bootstrap": Analysis(
        "pairwise paired-bootstrap significance table between models (Neishi Table 4)",
        _feed.feed_bootstrap, _TEXTS, BootstrapOptions, pooled=True, min_methods=2),
    "length_diff": Analysis(
        "mean output − reference length by source length, output-length histograms (Neishi Fig. 4, 5, 7)",
        _feed.feed_length_diff, _TEXTS | {TRAINING_DATA}, LengthOptions, pooled=True),
    "long_sources": Analysis(
        "BLEU and output − reference length on sources longer than any training source, each method vs the "
        "baseline by one-sided Welch over seeds and paired bootstrap (Neishi Table 3, Fig. 3-4)",
        _feed.feed_long_sources, _TEXTS | {TRAINING_DATA}, LongSourceOptions, pooled=True),
    "shift_invariance": Analysis(
        "cosine similarity of encoder states under position offsets (default 0/100/250/500, SHAPE Fig. 2)",
        _feed.feed_shift_invariance, frozenset({TEST_SET, MODELS}), ShiftOptions),
    "speed": Analysis(
        "relative training speed, training time, parameters and learning curves (SHAPE Tables 2/6, Fig. 8-9)",
        _feed.feed_speed, frozenset({LOGS})),
    "tokenwise": Analysis(
        "gold-token log-prob difference by decoder position × token frequency (SHAPE Fig. 4)",
        _feed.feed_tokenwise, frozenset({TEST_SET, TRAINING_DATA, MODELS})),
    "position_nll": Analysis(
        "mean NLL per target position on stacked test sets, seen vs unseen positions compared over the seeds "
        "(CAPE Fig. 8)",
        _feed.feed_position_nll, frozenset({TEST_SET, TRAINING_DATA, MODELS}), PositionNllOptions,
        across_seeds=_position_nll.across_seeds),
    "swapped": Analysis(
        "BLEU of the first sentence of 10-sentence groups in original vs swapped order, on a training subsample "
        "(SHAPE Table 1)",
        _feed.feed_swapped, frozenset({TRAINING_DATA, MODELS}), SwappedOptions),
}


def fitting_names(carries: Collection[str]) -> list[str]:
    """The registered analyses that fit runs carrying ``carries``.

    Args:
        carries: what the runs carry (a RunSpec's ``carries``).

    Returns:
        Their names, in registry order.
    """
    return [name for name, analysis in REGISTRY.items() if analysis.fits(carries)]


def fitting(name: str, task: str, carries: Collection[str], where: str = "") -> Analysis:
    """The entry of analysis ``name`` for a grid of ``task``, whose runs carry ``carries``.

    Args:
        name: a registered analysis.
        task: the task of the grid (named by the error).
        carries: what its runs carry (its RunSpec's ``carries``).
        where: the config key that asked for it, prefixed to the error ("": none).

    Returns:
        The :class:`Analysis`.

    Raises:
        ConfigError: one line, for a name not registered or an analysis whose needs the runs lack.
    """
    at = f"{where}: " if where else ""
    analysis = REGISTRY.get(name)
    if analysis is None:
        raise ConfigError(f"{at}unknown analysis {name!r} (known: {', '.join(REGISTRY)})")
    if not analysis.fits(carries):
        held = ", ".join(sorted(carries)) or "nothing an analysis reads"
        raise ConfigError(f"{at}analysis {name} does not fit the runs of task {task}: it needs "
                          f"{', '.join(sorted(analysis.needs))}; they carry {held}")
    return analysis


def option_owners() -> dict[str, list[str]]:
    """Which analyses read each option of ``analysis_options``.

    Returns:
        Every analysis option → the analyses that read it, in registry order; sorted by option.
    """
    owners: dict[str, list[str]] = {}
    for name, analysis in REGISTRY.items():
        for option in analysis.option_names():
            owners.setdefault(option, []).append(name)
    return dict(sorted(owners.items()))


def check_options(values: Any) -> None:
    """Check an experiment's ``analysis_options``.

    Args:
        values: the experiment's ``analysis_options`` as read from its config.

    Raises:
        ConfigError: one line naming the key, for a value that is not a mapping, a key that is no
            registered analysis's option, or a bad value.
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{WHERE}: expected a mapping, got {shorten(values)}")
    owners = option_owners()
    unknown = sorted((str(k) for k in values if k not in owners), key=str)
    if unknown:
        known = ", ".join(f"{k} ({'/'.join(names)})" for k, names in owners.items())
        raise ConfigError(f"{WHERE}.{unknown[0]}: unknown analysis option (known: {known})")
    for analysis in REGISTRY.values():
        analysis.parse_options(values)
