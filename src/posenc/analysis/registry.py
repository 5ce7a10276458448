"""THE registry of analyses: name → library function, one-line description, typed options and
whether it runs once on all seeds pooled.

The experiment schema (``experiment.analyses``, ``experiment.analysis_options``), the report
(tasks/translation/report.py) and ``posenc analyze`` all take their analyses from :data:`REGISTRY`.

An experiment's ``analysis_options`` is one flat mapping shared by its analyses (``bucket_width``
serves both length analyses); each analysis reads its own fields through its options dataclass
(:meth:`Analysis.parse_options`), and :func:`check_options` refuses, with a one-line
:class:`~posenc.errors.ConfigError`, a key that is no analysis's option or a bad value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from posenc.analysis import length_bleu as _length_bleu
from posenc.analysis import length_diff as _length_diff
from posenc.analysis import long_sources as _long_sources
from posenc.analysis import position_nll as _position_nll
from posenc.analysis import shift_invariance as _shift_invariance
from posenc.analysis import significance as _significance
from posenc.analysis import speed as _speed
from posenc.analysis import swapped as _swapped
from posenc.analysis import tokenwise as _tokenwise
from posenc.config import check_value, from_dict, require, shorten
from posenc.errors import ConfigError

#: Where an option lives in an experiment config (named by every error message).
WHERE = "experiment.analysis_options"


@dataclass(frozen=True)
class AnalysisOptions:
    """Base of the options dataclasses: every ``int`` field is a count (an integer >= 1), checked
    on construction, so a bad value is a one-line ConfigError however the options were made; a
    subclass checks its other fields in ``__post_init__`` after calling this one."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type in (int, "int"):
                value = check_value(getattr(self, f.name), int, f"{WHERE}.{f.name}")
                require(value >= 1, f"{WHERE}.{f.name} must be >= 1, got {value}")


@dataclass(frozen=True)
class NoOptions(AnalysisOptions):
    """An analysis without options."""


def count_option(name: str, option: str, default: int, doc: str) -> type[AnalysisOptions]:
    """The options dataclass ``name`` of an analysis with one count option (an ``int`` >= 1)."""
    return make_dataclass(name, [(option, int, default)], bases=(AnalysisOptions,), frozen=True,
                          namespace={"__doc__": doc, "__module__": __name__})


LengthOptions = count_option("LengthOptions", "bucket_width", 10,
                             "length_bleu, length_diff: width of the source-length buckets (subwords).")
BootstrapOptions = count_option("BootstrapOptions", "bootstrap_samples", 1000, "bootstrap: paired-bootstrap resamples.")
PositionNllOptions = count_option("PositionNllOptions", "stack_tokens", 300, "position_nll: test pairs are stacked "
                                  "until the target has at least this many tokens.")
SwappedOptions = count_option("SwappedOptions", "swapped_pairs", 10_000,
                              "swapped: size of the training subsample the groups are drawn from.")


@dataclass(frozen=True)
class LongSourceOptions(AnalysisOptions):
    """long_sources: paired-bootstrap resamples, and which test outputs it reads: ``beam`` (the
    runs' scored translations) or ``greedy`` (those of ``experiment.greedy_splits``, the decoding
    Neishi & Yoshinaga report)."""

    bootstrap_samples: int = 1000
    outputs: str = "beam"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.outputs in ("beam", "greedy"), f"{WHERE}.outputs must be beam or greedy, got {self.outputs!r}")


@dataclass(frozen=True)
class ShiftOptions(AnalysisOptions):
    """shift_invariance: test sentences encoded under each position offset, and the offsets
    (default SHAPE Fig. 2's 0/100/250/500; add offsets inside a SHAPE model's trained shifts, e.g.
    0/10/20/40 for K = 40, to separate shift invariance from unseen positions)."""

    shift_sentences: int = 100
    shift_offsets: list[int] = field(default_factory=lambda: list(_shift_invariance.OFFSETS))

    def __post_init__(self) -> None:
        super().__post_init__()
        where = f"{WHERE}.shift_offsets"
        offsets = check_value(self.shift_offsets, list, where)
        require(len(offsets) >= 2, f"{where} needs at least two offsets, got {offsets}")
        for k in offsets:
            require(check_value(k, int, where) >= 0, f"{where} must be integers >= 0, got {k}")
        require(len(set(offsets)) == len(offsets), f"{where} has a repeated offset: {offsets}")


@dataclass(frozen=True)
class Analysis:
    """One analysis: its library function, a one-line description (paper figure/table), its
    options dataclass and whether it reads outputs only (``pooled``: run once on all seeds
    pooled; the others read model internals or run directories and run once per seed);
    ``reads_models``: it needs the trained checkpoints (not kept with committed results);
    ``across_seeds``: for a per-seed analysis, what combines its per-seed outputs (seed → folder)
    into one table over the seeds, written beside them (``None``: nothing to combine)."""

    function: Callable[..., list[dict]]
    description: str
    options: type[AnalysisOptions] = NoOptions
    pooled: bool = False
    reads_models: bool = False
    across_seeds: Callable[[Mapping[int, Path], Path], list[dict]] | None = None

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.options))

    def parse_options(self, values: Mapping[str, Any]) -> AnalysisOptions:
        """This analysis's options from an experiment's ``analysis_options`` (its own keys; the
        others belong to other analyses), defaults for the keys not given."""
        own = {k: v for k, v in values.items() if k in self.option_names()}
        return from_dict(self.options, own, WHERE)


REGISTRY: dict[str, Analysis] = {
    "length_bleu": Analysis(
        _length_bleu.length_bleu,
        "BLEU and gain over a baseline by source-length bucket, unseen lengths shaded (SHAPE Fig. 3, Neishi Fig. 3)",
        LengthOptions, pooled=True),
    "bootstrap": Analysis(
        _significance.bootstrap_table,
        "pairwise paired-bootstrap significance table between models (Neishi Table 4)",
        BootstrapOptions, pooled=True),
    "length_diff": Analysis(
        _length_diff.length_diff,
        "mean output − reference length by source length, output-length histograms (Neishi Fig. 4, 5, 7)",
        LengthOptions, pooled=True),
    "long_sources": Analysis(
        _long_sources.long_sources,
        "BLEU and output − reference length on sources longer than any training source, each method vs the "
        "baseline by one-sided Welch over seeds and paired bootstrap (Neishi Table 3, Fig. 3-4)",
        LongSourceOptions, pooled=True),
    "shift_invariance": Analysis(
        _shift_invariance.shift_invariance,
        "cosine similarity of encoder states under position offsets (default 0/100/250/500, SHAPE Fig. 2)",
        ShiftOptions, reads_models=True),
    "speed": Analysis(
        _speed.speed,
        "relative training speed, training time, parameters and learning curves (SHAPE Tables 2/6, Fig. 8-9)"),
    "tokenwise": Analysis(
        _tokenwise.tokenwise,
        "gold-token log-prob difference by decoder position × token frequency (SHAPE Fig. 4)",
        reads_models=True),
    "position_nll": Analysis(
        _position_nll.position_nll,
        "mean NLL per target position on stacked test sets, seen vs unseen positions compared over the seeds "
        "(CAPE Fig. 8)",
        PositionNllOptions, reads_models=True, across_seeds=_position_nll.across_seeds),
    "swapped": Analysis(
        _swapped.swapped,
        "BLEU of the first sentence of 10-sentence groups in original vs swapped order, on a training subsample "
        "(SHAPE Table 1)",
        SwappedOptions, reads_models=True),
}


def option_owners() -> dict[str, list[str]]:
    """Every analysis option → the analyses that read it (sorted by option)."""
    owners: dict[str, list[str]] = {}
    for name, analysis in REGISTRY.items():
        for option in analysis.option_names():
            owners.setdefault(option, []).append(name)
    return dict(sorted(owners.items()))


def check_options(values: Any) -> None:
    """Refuse an ``analysis_options`` that is not a mapping, names a key that is no registered
    analysis's option, or holds a bad value: a one-line ConfigError naming the key."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{WHERE}: expected a mapping, got {shorten(values)}")
    owners = option_owners()
    unknown = sorted((str(k) for k in values if k not in owners), key=str)
    if unknown:
        known = ", ".join(f"{k} ({'/'.join(names)})" for k, names in owners.items())
        raise ConfigError(f"{WHERE}.{unknown[0]}: unknown analysis option (known: {known})")
    for analysis in REGISTRY.values():
        analysis.parse_options(values)
