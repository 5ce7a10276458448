"""The GNMT length penalty α chosen on the validation split for each trained run.

MT practice tunes α per system on held-out data; a fixed α = 0.6 for every method makes the
brevity penalty part of a method comparison (SHAPE's VANILLA gap on multi30k_cpu was two thirds
brevity). :func:`tune_length_penalty` decodes the **validation** split for each candidate α
(beam search, ``score(Y) = log P(Y|X) / lp(Y)``, ``lp(Y) = ((5 + |Y|) / 6) ** α``, Wu et al. 2016
eq. 14), scores each with sacreBLEU and returns the α of the highest validation BLEU.

The candidates are searched, not only listed (:func:`search_alphas`): the configured grid first
(sorted), then, while the grid's top α has the strictly highest BLEU, one more α a grid step
(the top two values' spacing) above it, up to ``experiment.tune_length_penalty_max``; likewise
downward (the bottom two values' spacing) while the bottom α is strictly best, down to 0. The
chosen α is the peak: the highest validation BLEU, ties to the smallest α (a plateau at an edge
stops the search). Deterministic: the same BLEU values give the same candidates and choice, so a
stored sweep is checked by replaying the search on it (:func:`replay`). The split is fixed here,
not a parameter: the test split is never read. The test BLEU of the run is then decoded with the
chosen α (:mod:`posenc.tasks.translation.task`), and results.json records it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from posenc.tasks.translation.config import DecodeConfig
from posenc.tasks.translation.load import LoadedRun, alpha_key, translate_split

#: The split α is chosen on (never a test split).
TUNING_SPLIT = "valid"
#: Decimal places candidate α are rounded to (so 1.4 + 0.2 is 1.6, not 1.5999999999999999).
DIGITS = 6


def peak(scores: dict[float, float]) -> float:
    """The α of the highest score; ties: the smallest α."""
    return max(sorted(scores), key=lambda a: (scores[a], -a))


def _next_edge(scores: dict[float, float], grid: Sequence[float], bound: float) -> float | None:
    """The next α the search decodes: a step beyond the top (bottom) α when that α alone holds the
    highest score and the step stays within ``[0, bound]``; None when the peak is bracketed."""
    if len(grid) < 2:
        return None
    alphas, best = sorted(scores), max(scores.values())
    top, bottom = alphas[-1], alphas[0]
    nxt: float | None = None
    if scores[top] == best and list(scores.values()).count(best) == 1:
        up = round(top + (grid[-1] - grid[-2]), DIGITS)
        nxt = up if up <= bound + 10 ** -DIGITS else None
    elif scores[bottom] == best and list(scores.values()).count(best) == 1 and bottom > 0:
        nxt = max(round(bottom - (grid[1] - grid[0]), DIGITS), 0.0) + 0.0  # a step past 0 tries 0; never -0.0
    return None if nxt is None or nxt in scores else nxt  # a value already scored (grid finer than DIGITS) ends it


def search_alphas(grid: Sequence[float], bound: float, score: Callable[[float], float]) -> dict[str, Any]:
    """The bracketing search of the module docstring with ``score(α)`` the validation BLEU:
    ``{"sweep": {"0.6": bleu, ...} (in the order decoded), "chosen": α, "at_bound": bool}``;
    ``at_bound`` says the chosen α is ``bound`` with BLEU still rising there (the search stopped at
    the hard bound, not at a peak). ``grid``: distinct α >= 0; ``bound`` >= its largest."""
    grid = sorted(float(a) for a in grid)
    scores: dict[float, float] = {}
    for alpha in grid:
        scores[alpha] = float(score(alpha))
    while (nxt := _next_edge(scores, grid, bound)) is not None:
        scores[nxt] = float(score(nxt))
    chosen = peak(scores)
    at_bound = len(grid) > 1 and chosen == max(scores) and chosen + (grid[-1] - grid[-2]) > bound + 10 ** -DIGITS
    return {"sweep": {alpha_key(a): s for a, s in scores.items()}, "chosen": chosen, "at_bound": bool(at_bound)}


def replay(grid: Sequence[float], bound: float, sweep: dict[str, float]) -> list[str] | None:
    """The α keys the search decodes when validation BLEU is ``sweep`` (a stored sweep), in order;
    None when it needs an α the sweep lacks (the stored search is not the one asked for)."""
    try:
        return list(search_alphas(grid, bound, lambda a: sweep[alpha_key(a)])["sweep"])
    except KeyError:
        return None


def tune_length_penalty(run: LoadedRun, alphas: Sequence[float], decode: DecodeConfig,
                        bound: float | None = None) -> dict[str, Any]:
    """Validation BLEU of ``run`` for each α the search decodes (:func:`search_alphas` from the
    grid ``alphas`` up to ``bound``, default the grid's largest: no extension; ``decode`` otherwise
    unchanged) and the chosen α: ``{"split": "valid", "sweep": {"0.6": bleu, ...}, "chosen": α,
    "at_bound": bool}``. The hypotheses go to ``translations/valid.lp<α>.beam<K>.hyp``."""
    def bleu(alpha: float) -> float:
        dc = replace(decode, length_penalty=alpha)
        return float(translate_split(run, TUNING_SPLIT, dc, stem=f"{TUNING_SPLIT}.lp{alpha_key(alpha)}")["bleu"])

    top = max(float(a) for a in alphas)
    return {"split": TUNING_SPLIT, **search_alphas(alphas, top if bound is None else max(bound, top), bleu)}
