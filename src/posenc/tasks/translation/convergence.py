"""Convergence status of a finished run, read from its run directory.

A thin reader: the rule itself lives in :mod:`posenc.training.convergence` (converged = stopped
by patience before the cap, with the best validation after warm-up and a flat end of the
validation curve; capped = "still improving"; no record = "unknown"). The status is always
recomputed from the recorded stop reason, best step, warm-up, steps against the cap and the
run's valid.csv (:func:`~posenc.training.logging.read_valid`), never from a stored
``status``/``converged`` flag.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posenc.training.convergence import UNKNOWN, status_of
from posenc.training.logging import read_valid
from posenc.training.stopping import end_slope

#: The run's summary (the Trainer's stop reason, best step and warm-up, with the task's entries).
SUMMARY_FILE = "summary.json"


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """The run's summary.json in ``run_dir`` when it records a stop reason and a best step, else {}."""
    path = Path(run_dir) / SUMMARY_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if data.get("stopped") and data.get("best_step") is not None else {}


def _history(run_dir: str | Path) -> list[list[float]]:
    return [[r["step"], r["loss"]] for r in read_valid(run_dir)]


def run_status(run_dir: str | Path, summary: dict[str, Any] | None = None, cap: int | None = None) -> str:
    """The status of ``summary`` when it records the stop reason, best step and warm-up, else of
    the summary in ``run_dir``, judged with ``cap`` (the run's ``max_steps``, for summaries that
    do not record it) and the flatness of ``run_dir/valid.csv``; "unknown" when nothing recorded them."""
    history = _history(run_dir) or None
    verdict = status_of(summary, cap, history)
    return verdict if verdict != UNKNOWN else status_of(read_summary(run_dir), cap, history)


def judge_run(run_dir: str | Path, summary: dict[str, Any] | None, cap: int | None) -> dict[str, Any]:
    """``status`` (:func:`run_status`) and the end slope of the run's validation curve
    (``valid_slope`` ± ``valid_slope_se``, nats per 1,000 updates over the last validations; None
    without a valid.csv), read from its run directory now, never from stored flags."""
    fit = end_slope(_history(run_dir))
    return {"status": run_status(run_dir, summary, cap), "valid_slope": fit[0] if fit else None,
            "valid_slope_se": fit[1] if fit else None}
