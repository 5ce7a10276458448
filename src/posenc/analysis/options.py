"""The typed options of the analyses, read from an experiment's ``analysis_options``.

An experiment's ``analysis_options`` is one flat mapping shared by its analyses (``bucket_width``
serves both length analyses); each analysis reads its own fields through its options dataclass
(:meth:`posenc.analysis.registry.Analysis.parse_options`). Every dataclass checks its values on
construction, so a bad value is a one-line :class:`~posenc.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass

from posenc.analysis import shift_invariance as _shift_invariance
from posenc.config import check_value, require

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
    """The options dataclass of an analysis with one count option (an ``int`` >= 1).

    Args:
        name: the dataclass's name.
        option: the option's key in ``analysis_options``.
        default: its value when the experiment gives none.
        doc: the dataclass's docstring (which analyses read it, what it counts).

    Returns:
        The frozen dataclass, a subclass of :class:`AnalysisOptions`.
    """
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
    """long_sources: paired-bootstrap resamples, and which test outputs it reads.

    Args:
        bootstrap_samples: paired-bootstrap resamples, >= 1.
        outputs: ``beam`` (the runs' scored translations) or ``greedy`` (those of
            ``experiment.greedy_splits``, the decoding Neishi & Yoshinaga report).

    Raises:
        ConfigError: a count below 1 or ``outputs`` neither ``beam`` nor ``greedy``.
    """

    bootstrap_samples: int = 1000
    outputs: str = "beam"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.outputs in ("beam", "greedy"), f"{WHERE}.outputs must be beam or greedy, got {self.outputs!r}")


@dataclass(frozen=True)
class ShiftOptions(AnalysisOptions):
    """shift_invariance: how many test sentences it encodes, and under which position offsets.

    Args:
        shift_sentences: the first test sentences encoded under each offset, >= 1.
        shift_offsets: the position offsets, at least two distinct integers >= 0 (default SHAPE
            Fig. 2's 0/100/250/500; add offsets inside a SHAPE model's trained shifts, e.g.
            0/10/20/40 for K = 40, to separate shift invariance from unseen positions).

    Raises:
        ConfigError: a count below 1, or fewer than two offsets, a negative or repeated one.
    """

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
