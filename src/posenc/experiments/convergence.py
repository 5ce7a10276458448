"""Convergence status of a finished run, read from its run directory (issue 17).

A thin reader: the rule itself lives in :mod:`posenc.training.convergence` (converged = stopped
by patience with the best validation after warm-up; capped = "still improving"; no record =
"unknown"). The status is always recomputed from the recorded stop reason, best step and warm-up,
never from a stored ``status``/``converged`` flag or from the shape of the validation curve.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from posenc.training.convergence import CONVERGED, IMPROVING, UNKNOWN, WARMUP, status_of

__all__ = ["CONVERGED", "IMPROVING", "UNKNOWN", "WARMUP", "read_summary", "read_valid", "run_status"]

SUMMARY_FILES = ("summary.json", "train_summary.json")  # posenc train's, then the trainer's


def read_valid(run_dir: str | Path) -> list[dict[str, float]]:
    """valid.csv rows as floats (step, loss, ppl, wall_s); rows without a loss are skipped."""
    path = Path(run_dir) / "valid.csv"
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("loss"):
                loss = float(row["loss"])
                ppl = float(row["ppl"]) if row.get("ppl") else math.exp(loss)
                rows.append({"step": float(row["step"]), "loss": loss, "ppl": ppl, "wall_s": float(row.get("wall_s") or 0.0)})
    return rows


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """The first of summary.json / train_summary.json in ``run_dir`` that records a stop reason
    and a best step ({} when neither does)."""
    for name in SUMMARY_FILES:
        path = Path(run_dir) / name
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("stopped") and data.get("best_step") is not None:
                return data
    return {}


def run_status(run_dir: str | Path, summary: dict[str, Any] | None = None) -> str:
    """The status of ``summary`` when it records the stop reason, best step and warm-up, else of
    the summaries in ``run_dir``; "unknown" when nothing recorded them."""
    verdict = status_of(summary)
    return verdict if verdict != UNKNOWN else status_of(read_summary(run_dir))
