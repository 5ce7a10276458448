"""What "converged" means for a training run: the one definition, asked by the trainer
(``summary.json``), the experiment runner, the reports and the learning-curve plots
(:func:`status`, :func:`status_of`).

A run is ``converged`` when patience stopped it (``stopped == "patience"``), its best validation
came after the learning-rate warm-up, it stopped below its step cap, and its validation curve ends
flat (:func:`is_flat`: the least-squares slope of the last :data:`FLAT_WINDOW` validation losses is
not significantly negative, one-sided Student's t at :data:`FLAT_LEVEL`, or the window is below an
absolute floor). Every other run is one of:

* ``still improving``: it reached a cap (``max_steps``/``max_epochs``), whatever its curve, even when
  patience ran out on that same update;
* ``not flat``: patience stopped it while the curve still fell significantly (patience ran out on noise);
* ``best in warm-up``: its best validation came at or before the last warm-up update (the stopping
  signal rose while the learning rate was still climbing: an artefact of the signal, not a plateau);
* ``no curve``: patience stopped it after warm-up, but fewer than 3 validations (or none recorded)
  leave no curve to test;
* ``unknown``: no stop reason or no validation recorded.

docs/experiments.md ("Convergence") shows the rule on measured curves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

CONVERGED, IMPROVING, WARMUP, UNKNOWN = "converged", "still improving", "best in warm-up", "unknown"
NOT_FLAT, NO_CURVE = "not flat", "no curve"
#: Validations the flatness test fits: twice a patience of 4, so it sees "the last four against the
#: four before".
FLAT_WINDOW = 8
#: One-sided level of the flatness test: a curve is not flat when its slope is below zero at this
#: level (Student's t on the least-squares slope, n - 2 degrees of freedom).
FLAT_LEVEL = 0.05
#: Absolute floor: a window whose every validation loss is at most this many nats per token is flat
#: (the model puts >= 0.9999 probability on the reference: a solved task, whose loss keeps halving
#: by tiny amounts for ever).
LOSS_FLOOR = 1e-4
#: Absolute floor: a window whose losses spread over at most this many nats is flat (no measurable
#: change; a noise-free straight line would otherwise be "significant" at any slope).
SPREAD_FLOOR = 1e-6
PATIENCE = "patience"  # the trainer's stop reason for an early stop
CAPS = ("max_steps", "max_epochs")  # stop reasons that are budget caps


def best_validation(history: Sequence[Sequence[float]]) -> tuple[int | None, float | None]:
    """(step, loss) of the lowest validation loss in ``[[step, loss], ...]`` (ties: the earlier
    step, the one patience counted from); (None, None) without validations."""
    if not history:
        return None, None
    step, loss = min(((int(s), float(v)) for s, v in history), key=lambda p: (p[1], p[0]))
    return step, loss


def end_slope(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> tuple[float, float] | None:
    """Least-squares slope of the validation loss against the step over the last ``window``
    validations ``[[step, loss], ...]``, and its standard error, both in nats per 1,000 updates;
    None with fewer than 3 validations (no error estimate)."""
    points = [(float(s), float(v)) for s, v in history][-window:]
    n = len(points)
    if n < 3:
        return None
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = sum((y - my - slope * (x - mx)) ** 2 for x, y in points)
    return 1000.0 * slope, 1000.0 * (resid / (n - 2) / sxx) ** 0.5


@cache
def flat_t(points: int) -> float:
    """The one-sided :data:`FLAT_LEVEL` critical value of Student's t for a slope fitted to
    ``points`` validations (``points - 2`` degrees of freedom): 1.943 at 8 points. (scipy.stats
    is imported here, when a curve is judged: it costs seconds at every process's start.)"""
    from scipy.stats import t as student_t

    return float(student_t.ppf(1.0 - FLAT_LEVEL, points - 2))


def below_floor(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> bool:
    """Whether the last ``window`` validation losses are all <= :data:`LOSS_FLOOR` or spread over
    <= :data:`SPREAD_FLOOR` nats (False without validations)."""
    losses = [float(v) for _, v in history][-window:]
    return bool(losses) and (max(losses) <= LOSS_FLOOR or max(losses) - min(losses) <= SPREAD_FLOOR)


def is_flat(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> bool | None:
    """True when the last ``window`` validations are below the absolute floor (:func:`below_floor`)
    or do not fall significantly (slope >= -:func:`flat_t` standard errors); None when there are
    too few (< 3) to tell."""
    fit = end_slope(history, window)
    if fit is None:
        return None
    return below_floor(history, window) or fit[0] >= -flat_t(min(len(history), window)) * fit[1]


def capped(stopped: str | None, steps: int | None, cap: int | None) -> bool:
    """Whether a run stopped at a budget cap: by its stop reason, or because it reached ``max_steps``
    (``cap``; 0/None = none) whatever reason was recorded."""
    return stopped in CAPS or bool(cap and steps is not None and steps >= cap)


def status(stopped: str | None, best_step: int | None, warmup: int | None, steps: int | None = None,
           cap: int | None = None, flat: bool | None = None) -> str:
    """The convergence status of a run from its stop reason, best validation step, the number of
    warm-up updates, the updates trained against the ``max_steps`` cap, and whether its validation
    curve ends flat (None: no curve to test, "no curve"; see the module docstring)."""
    if capped(stopped, steps, cap):
        return IMPROVING
    if stopped != PATIENCE or best_step is None or warmup is None:
        return UNKNOWN
    if best_step <= warmup:
        return WARMUP
    if flat is None:
        return NO_CURVE
    return CONVERGED if flat else NOT_FLAT


def convergence(history: Sequence[Sequence[float]], stopped: str | None, warmup: int | None,
                steps: int | None = None, cap: int | None = None) -> dict[str, Any]:
    """The convergence keys every run summary carries: ``stopped``, ``warmup``, ``best_step``,
    ``best_valid``, ``last_valid``, ``max_steps`` (the cap), ``valid_slope`` / ``valid_slope_se``
    (nats per 1,000 updates over the last validations), ``flat``, ``status`` and ``converged``
    (True only for ``converged``)."""
    best_step, best = best_validation(history)
    fit, flat = end_slope(history), is_flat(history)
    verdict = status(stopped, best_step, warmup, steps, cap, flat)
    return {"stopped": stopped or None, "warmup": warmup, "best_step": best_step, "best_valid": best,
            "last_valid": float(history[-1][1]) if history else None, "max_steps": cap or None,
            "valid_slope": fit[0] if fit else None, "valid_slope_se": fit[1] if fit else None, "flat": flat,
            "status": verdict, "converged": verdict == CONVERGED}


def status_of(summary: Mapping[str, Any] | None, cap: int | None = None,
              history: Sequence[Sequence[float]] | None = None) -> str:
    """:func:`status` recomputed from a stored summary's ``stopped``, ``best_step``, ``warmup``,
    ``steps`` and ``max_steps`` (or ``cap``, from the run's config, for summaries that predate it)
    and the flatness of ``history`` (else the summary's ``flat``). A stored ``status``/``converged``
    is never trusted: older runs used another rule."""
    summary = summary or {}
    as_int = lambda v: int(v) if v is not None else None  # noqa: E731
    steps = summary.get("steps", summary.get("step"))
    cap = cap if cap is not None else summary.get("max_steps")
    flat = is_flat(history) if history else summary.get("flat")
    return status(summary.get("stopped"), as_int(summary.get("best_step")), as_int(summary.get("warmup")),
                  as_int(steps), as_int(cap), flat)


def warmup_updates(cfg: Any, total: int) -> int:
    """Warm-up updates of the run's schedule (as training/schedule.py builds it): the cosine
    schedule's ``warmup_fraction`` of ``total`` when that is > 0, else ``train.warmup``."""
    if getattr(cfg, "schedule", "noam") == "cosine" and getattr(cfg, "warmup_fraction", 0.0) > 0:
        return int(cfg.warmup_fraction * total)
    return int(cfg.warmup)

