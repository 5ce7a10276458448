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
from typing import Any

from posenc.training.stopping import end_slope, is_flat

CONVERGED, IMPROVING, WARMUP, UNKNOWN = "converged", "still improving", "best in warm-up", "unknown"
NOT_FLAT, NO_CURVE = "not flat", "no curve"
PATIENCE = "patience"  # the trainer's stop reason for an early stop
CAPS = ("max_steps", "max_epochs")  # stop reasons that are budget caps


def best_validation(history: Sequence[Sequence[float]]) -> tuple[int | None, float | None]:
    """The best validation of a run.

    Args:
        history: the run's validations, ``[[step, loss], ...]``.

    Returns:
        ``(step, loss)`` of the lowest validation loss (ties: the earlier step, the one patience
        counted from); ``(None, None)`` without validations.
    """
    if not history:
        return None, None
    step, loss = min(((int(s), float(v)) for s, v in history), key=lambda p: (p[1], p[0]))
    return step, loss


def capped(stopped: str | None, steps: int | None, cap: int | None) -> bool:
    """Whether a run stopped at a budget cap: by its stop reason, or because it reached ``max_steps``
    whatever reason was recorded.

    Args:
        stopped: the run's stop reason (``patience``, ``max_steps``, ``max_epochs``), or None.
        steps: the updates it trained, or None when unknown.
        cap: its ``max_steps``; 0 or None = none.

    Returns:
        True when ``stopped`` is a cap or ``steps`` reached ``cap``.
    """
    return stopped in CAPS or bool(cap and steps is not None and steps >= cap)


def status(stopped: str | None, best_step: int | None, warmup: int | None, steps: int | None = None,
           cap: int | None = None, flat: bool | None = None) -> str:
    """The convergence status of a run from its stop reason, best validation step, the number of
    warm-up updates, the updates trained against the ``max_steps`` cap, and whether its validation
    curve ends flat (see the module docstring).

    Args:
        stopped: the run's stop reason (``patience``, ``max_steps``, ``max_epochs``), or None.
        best_step: the step of its best validation (:func:`best_validation`), or None.
        warmup: its warm-up updates (:func:`warmup_updates`), or None when unknown.
        steps: the updates it trained, or None when unknown.
        cap: its ``max_steps``; 0 or None = none.
        flat: whether its validation curve ends flat (:func:`~posenc.training.stopping.is_flat`);
            None: no curve to test.

    Returns:
        One of ``converged``, ``still improving``, ``not flat``, ``best in warm-up``, ``no curve``
        and ``unknown``.
    """
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
    """The convergence keys every run summary carries.

    Args:
        history: the run's validations, ``[[step, loss], ...]``.
        stopped: the run's stop reason, or None.
        warmup: its warm-up updates, or None when unknown.
        steps: the updates it trained, or None when unknown.
        cap: its ``max_steps``; 0 or None = none.

    Returns:
        ``stopped``, ``warmup``, ``best_step``, ``best_valid``, ``last_valid``, ``max_steps`` (the
        cap), ``valid_slope`` / ``valid_slope_se`` (nats per 1,000 updates over the last
        validations), ``flat``, ``status`` (:func:`status`) and ``converged`` (True only for
        ``converged``).
    """
    best_step, best = best_validation(history)
    fit, flat = end_slope(history), is_flat(history)
    verdict = status(stopped, best_step, warmup, steps, cap, flat)
    return {"stopped": stopped or None, "warmup": warmup, "best_step": best_step, "best_valid": best,
            "last_valid": float(history[-1][1]) if history else None, "max_steps": cap or None,
            "valid_slope": fit[0] if fit else None, "valid_slope_se": fit[1] if fit else None, "flat": flat,
            "status": verdict, "converged": verdict == CONVERGED}


def status_of(summary: Mapping[str, Any] | None, cap: int | None = None,
              history: Sequence[Sequence[float]] | None = None) -> str:
    """:func:`status` recomputed from a stored summary, so every run is judged by this rule
    whatever ``status``/``converged`` its summary stores (those are never read).

    Args:
        summary: a run's ``summary.json`` (its ``stopped``, ``best_step``, ``warmup``, ``steps``,
            ``max_steps`` and ``flat``); None or empty for none.
        cap: the run's ``max_steps`` from its config, used in place of the summary's; None: the
            summary's.
        history: the run's validations, ``[[step, loss], ...]``, whose flatness is tested; None
            or empty: the summary's ``flat``.

    Returns:
        The run's convergence status (:func:`status`).
    """
    summary = summary or {}
    as_int = lambda v: int(v) if v is not None else None  # noqa: E731
    steps = summary.get("steps", summary.get("step"))
    cap = cap if cap is not None else summary.get("max_steps")
    flat = is_flat(history) if history else summary.get("flat")
    return status(summary.get("stopped"), as_int(summary.get("best_step")), as_int(summary.get("warmup")),
                  as_int(steps), as_int(cap), flat)


def warmup_updates(cfg: Any, total: int) -> int:
    """Warm-up updates of the run's schedule (as training/optimization.py builds it).

    Args:
        cfg: the run's training config (a :class:`~posenc.training.config.TrainConfig`).
        total: the run's total updates.

    Returns:
        The cosine schedule's ``warmup_fraction`` of ``total`` when that is > 0, else ``cfg.warmup``.
    """
    if getattr(cfg, "schedule", "noam") == "cosine" and getattr(cfg, "warmup_fraction", 0.0) > 0:
        return int(cfg.warmup_fraction * total)
    return int(cfg.warmup)

