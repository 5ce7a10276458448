"""What "converged" means for a training run: the one definition (issue 17).

A run is **converged** when training stopped because the validation loss stopped improving
(``stopped == "patience"``: ``train.patience`` validations in a row without lowering the best loss
by more than ``train.min_delta``, relative) *and* its best validation came after the learning-rate
warm-up. Every other run is not:

* ``still improving``: stopped by ``max_steps``/``max_epochs`` (a cap). Always, whatever its
  curve looked like: a cap says nothing about a plateau, so more steps may change its numbers.
* ``best in warm-up``: stopped by patience, but the best validation was at or before the last
  warm-up step; the stopping signal rose while the learning rate was still climbing, which is an
  artefact of the signal (e.g. validation on unseen lengths), not a plateau of the model.
* ``unknown``: no stop reason or no validation recorded (e.g. run directories written before the
  stop reason was recorded, or ``validate_every: 0``). Never read as converged.

The trainer (``train_summary.json``), ``posenc train`` (``summary.json``), the experiment runner,
the report and the learning-curve plots all call :func:`status` / :func:`status_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CONVERGED, IMPROVING, WARMUP, UNKNOWN = "converged", "still improving", "best in warm-up", "unknown"
STATUSES = (CONVERGED, IMPROVING, WARMUP, UNKNOWN)
PATIENCE = "patience"  # the trainer's stop reason for an early stop
CAPS = ("max_steps", "max_epochs")  # stop reasons that are budget caps


def best_validation(history: Sequence[Sequence[float]]) -> tuple[int | None, float | None]:
    """(step, loss) of the lowest validation loss in ``[[step, loss], ...]`` (ties: the earlier
    step, the one patience counted from); (None, None) without validations."""
    if not history:
        return None, None
    step, loss = min(((int(s), float(v)) for s, v in history), key=lambda p: (p[1], p[0]))
    return step, loss


def status(stopped: str | None, best_step: int | None, warmup: int | None) -> str:
    """The convergence status of a run from its stop reason, best validation step and the number
    of warm-up updates (see the module docstring)."""
    if stopped in CAPS:
        return IMPROVING
    if stopped != PATIENCE or best_step is None or warmup is None:
        return UNKNOWN
    return CONVERGED if best_step > warmup else WARMUP


def convergence(history: Sequence[Sequence[float]], stopped: str | None, warmup: int | None) -> dict[str, Any]:
    """The convergence keys every run summary carries: ``stopped``, ``warmup``, ``best_step``,
    ``best_valid``, ``last_valid``, ``status`` and ``converged`` (True only for ``converged``)."""
    best_step, best = best_validation(history)
    verdict = status(stopped, best_step, warmup)
    return {"stopped": stopped or None, "warmup": warmup, "best_step": best_step, "best_valid": best,
            "last_valid": float(history[-1][1]) if history else None, "status": verdict,
            "converged": verdict == CONVERGED}


def status_of(summary: Mapping[str, Any] | None) -> str:
    """:func:`status` recomputed from a stored summary's ``stopped``, ``best_step`` and ``warmup``
    (a stored ``status``/``converged`` is never trusted: older runs used another rule)."""
    summary = summary or {}
    best, warmup = summary.get("best_step"), summary.get("warmup")
    return status(summary.get("stopped"), int(best) if best is not None else None,
                  int(warmup) if warmup is not None else None)


def warmup_updates(cfg: Any, total: int) -> int:
    """Warm-up updates of the run's schedule (as training/schedule.py builds it): the cosine
    schedule's ``warmup_fraction`` of ``total`` when that is > 0, else ``train.warmup``."""
    if getattr(cfg, "schedule", "noam") == "cosine" and getattr(cfg, "warmup_fraction", 0.0) > 0:
        return int(cfg.warmup_fraction * total)
    return int(cfg.warmup)

