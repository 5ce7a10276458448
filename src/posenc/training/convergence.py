"""What "converged" means for a training run: the one definition (issue 17).

A run is **converged** when training stopped because the validation loss stopped improving
(``stopped == "patience"``: ``train.patience`` validations in a row without lowering the best loss
by more than ``train.min_delta``, relative), its best validation came after the learning-rate
warm-up, it stopped before its step cap, *and* its validation curve is flat at the end (issue 26):
the least-squares line through its last :data:`FLAT_WINDOW` validation losses (the smoothed curve
whose slope the summaries and reports quote) does not fall significantly, i.e. its slope is not
below ``-FLAT_T`` standard errors. Every other run is not:

* ``still improving``: stopped by ``max_steps``/``max_epochs`` (a cap), or reached ``max_steps``
  at all, even when patience ran out at that same update (older trainers recorded "patience"
  there; the recorded steps against the cap decide). Always, whatever its curve looked like: a
  cap says nothing about a plateau, so more steps may change its numbers.
* ``not flat``: stopped by patience, but the smoothed validation curve was still falling (patience
  ran out on noise: on the multi30k_cpu runs the validation loss moves 0.007-0.021 nats between
  validations, several times ``min_delta``).
* ``best in warm-up``: stopped by patience, but the best validation was at or before the last
  warm-up step; the stopping signal rose while the learning rate was still climbing, which is an
  artefact of the signal (e.g. validation on unseen lengths), not a plateau of the model.
* ``unknown``: no stop reason or no validation recorded (e.g. run directories written before the
  stop reason was recorded, or ``validate_every: 0``). Never read as converged.

A summary written before the slope was recorded, read without its validation history (e.g. the
lengthgen results.json files), is judged without the flatness test; its ``flat`` is None.

The trainer and ``posenc train`` (``summary.json``), the experiment runner,
the report and the learning-curve plots all call :func:`status` / :func:`status_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CONVERGED, IMPROVING, WARMUP, UNKNOWN = "converged", "still improving", "best in warm-up", "unknown"
NOT_FLAT = "not flat"
STATUSES = (CONVERGED, IMPROVING, WARMUP, NOT_FLAT, UNKNOWN)
#: Validations the flatness test fits: twice the multi30k_cpu patience (4), so it sees "the last
#: four against the four before" (issue 26).
FLAT_WINDOW = 8
#: A curve is flat unless its fitted slope is below -FLAT_T standard errors (about a one-sided 5 %
#: test at 8 points: the slope is significantly negative).
FLAT_T = 2.0
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


def is_flat(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> bool | None:
    """True when the last ``window`` validations do not fall significantly (slope >= -FLAT_T
    standard errors); None when there are too few to tell."""
    fit = end_slope(history, window)
    return None if fit is None else fit[0] >= -FLAT_T * fit[1]


def capped(stopped: str | None, steps: int | None, cap: int | None) -> bool:
    """Whether a run stopped at a budget cap: by its stop reason, or because it reached ``max_steps``
    (``cap``; 0/None = none) whatever reason was recorded."""
    return stopped in CAPS or bool(cap and steps is not None and steps >= cap)


def status(stopped: str | None, best_step: int | None, warmup: int | None, steps: int | None = None,
           cap: int | None = None, flat: bool | None = None) -> str:
    """The convergence status of a run from its stop reason, best validation step, the number of
    warm-up updates, the updates trained against the ``max_steps`` cap, and whether its validation
    curve ends flat (None: not known; see the module docstring)."""
    if capped(stopped, steps, cap):
        return IMPROVING
    if stopped != PATIENCE or best_step is None or warmup is None:
        return UNKNOWN
    if best_step <= warmup:
        return WARMUP
    return NOT_FLAT if flat is False else CONVERGED


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

