"""When training stops: a step or epoch cap, or patience on the validation loss (optionally on
its moving average, and only once the validation curve is flat).

Patience: ``train.patience`` validations in a row without an improvement stop training; an
improvement lowers the best loss by more than ``train.min_delta`` (relative) and by more than
``train.min_delta_abs`` (nats). Flatness (:func:`is_flat`): the least-squares slope of the last
:data:`FLAT_WINDOW` validation losses is not significantly negative (one-sided Student's t test at
:data:`FLAT_LEVEL` on the slope, n - 2 degrees of freedom), or the window lies below an absolute
floor. With ``train.require_flat`` patience stops only on a flat curve; the convergence status of
a finished run (:mod:`posenc.training.convergence`) always asks for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: convergence.py (reports) imports this module without torch
    from posenc.training.config import TrainConfig
    from posenc.training.state import TrainState

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


def cap_reached(cfg: TrainConfig, state: TrainState) -> str:
    """Which step or epoch cap the loop has reached.

    Args:
        cfg: the training config (``max_steps``, ``max_epochs``; 0 = no cap).
        state: the loop's state.

    Returns:
        ``max_steps`` or ``max_epochs`` when ``state`` reached that cap, else ``""``.
    """
    if cfg.max_steps and state.step >= cfg.max_steps:
        return "max_steps"
    if cfg.max_epochs and state.epoch >= cfg.max_epochs:
        return "max_epochs"
    return ""


def smoothed(history: list[list[float]], window: int) -> float:
    """The validation loss patience compares: the mean of the last ones.

    Args:
        history: the validations so far, ``[[step, loss], ...]``, at least one.
        window: how many of the last to average (1: the last loss).

    Returns:
        The mean of the last ``window`` losses (of all, when there are fewer).
    """
    last = [float(v) for _, v in history[-window:]]
    return sum(last) / len(last)


def record_validation(state: TrainState, loss: float, cfg: TrainConfig) -> bool:
    """Add a validation loss to ``state`` and update the patience counter; True = stop.

    An improvement lowers the best loss by more than ``train.min_delta`` (relative) and by more
    than ``train.min_delta_abs`` (nats); ``train.patience`` validations without one stop training.
    With ``train.smooth_window`` W > 1 the loss compared is the moving average of the last W
    validations (``state.best_valid`` is then the best moving average), and with
    ``train.require_flat`` patience only stops once the last validations have stopped falling
    significantly (:func:`is_flat`). Defaults (1, False): the raw rule.

    Args:
        state: the loop's state, updated in place (``valid_history``, ``best_valid``,
            ``bad_validations``).
        loss: the validation loss measured at ``state.step``.
        cfg: the training config (``patience``, ``min_delta``, ``min_delta_abs``,
            ``smooth_window``, ``require_flat``).

    Returns:
        True when training stops (:func:`patience_ran_out`).
    """
    state.valid_history.append([state.step, loss])
    value = smoothed(state.valid_history, cfg.smooth_window)
    best = state.best_valid
    if best is None or value < best - max(best * cfg.min_delta, cfg.min_delta_abs):
        state.best_valid, state.bad_validations = value, 0
    else:
        state.bad_validations += 1
    return patience_ran_out(state, cfg)


def patience_ran_out(state: TrainState, cfg: TrainConfig) -> bool:
    """Whether patience has run out: the run stops, or stays stopped on resume.

    Args:
        state: the loop's state (its patience counter and validation history).
        cfg: the training config (``patience``, ``require_flat``).

    Returns:
        True after ``train.patience`` validations without an improvement (and, with
        ``train.require_flat``, on a validation curve that has stopped falling significantly);
        False when patience is off.
    """
    if cfg.patience is None or state.bad_validations < cfg.patience:
        return False
    return not cfg.require_flat or bool(is_flat(state.valid_history))


def end_slope(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> tuple[float, float] | None:
    """Least-squares slope of the validation loss against the step over the last ``window``
    validations ``[[step, loss], ...]``, and its standard error, both in nats per 1,000 updates;
    None with fewer than 3 validations (no error estimate).

    Args:
        history: the validations, ``[[step, loss], ...]``.
        window: how many of the last validations to fit.

    Returns:
        ``(slope, standard error)`` in nats per 1,000 updates, or None with fewer than 3
        validations or all at one step.
    """
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
    is imported here, when a curve is judged: it costs seconds at every process's start.)

    Args:
        points: the validations fitted, at least 3.

    Returns:
        The critical value (cached per ``points``).
    """
    from scipy.stats import t as student_t

    return float(student_t.ppf(1.0 - FLAT_LEVEL, points - 2))


def below_floor(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> bool:
    """Whether the last ``window`` validation losses are all <= :data:`LOSS_FLOOR` or spread over
    <= :data:`SPREAD_FLOOR` nats: a solved task, or no measurable change.

    Args:
        history: the validations, ``[[step, loss], ...]``.
        window: how many of the last validations to look at.

    Returns:
        True when the window lies below either floor; False without validations.
    """
    losses = [float(v) for _, v in history][-window:]
    return bool(losses) and (max(losses) <= LOSS_FLOOR or max(losses) - min(losses) <= SPREAD_FLOOR)


def is_flat(history: Sequence[Sequence[float]], window: int = FLAT_WINDOW) -> bool | None:
    """True when the last ``window`` validations are below the absolute floor (:func:`below_floor`)
    or do not fall significantly (slope >= -:func:`flat_t` standard errors).

    Args:
        history: the validations, ``[[step, loss], ...]``.
        window: how many of the last validations to test.

    Returns:
        True when the curve ends flat, False when it still falls significantly, None when there
        are too few validations (< 3) to tell.
    """
    fit = end_slope(history, window)
    if fit is None:
        return None
    return below_floor(history, window) or fit[0] >= -flat_t(min(len(history), window)) * fit[1]
