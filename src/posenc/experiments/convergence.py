"""Convergence status of a run from its ``valid.csv`` (issue 13: "converged" or "still improving").

A run is *still improving* when its last validation perplexity is better than the best before it
by more than ``tolerance`` (1%): a longer budget would likely change its numbers, so every table
row and conclusion drawn from it must say so. With fewer than two validations nothing is known.
The trainer's own ``converged`` flag (``summary.json``), when present, wins over this estimate.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

CONVERGED, IMPROVING, UNKNOWN = "converged", "still improving", "unknown"


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


def status_from_curve(ppls: list[float], tolerance: float = 0.01) -> str:
    """``still improving`` iff the last perplexity beats the best before it by more than ``tolerance``."""
    if len(ppls) < 2:
        return UNKNOWN
    best_before = min(ppls[:-1])
    return IMPROVING if ppls[-1] < best_before * (1.0 - tolerance) else CONVERGED


def run_status(run_dir: str | Path, summary: dict[str, Any] | None = None, tolerance: float = 0.01) -> str:
    """The trainer's ``converged`` flag if it wrote one, else :func:`status_from_curve` on valid.csv."""
    flag = (summary or {}).get("converged")
    if isinstance(flag, bool):
        return CONVERGED if flag else IMPROVING
    return status_from_curve([r["ppl"] for r in read_valid(run_dir)], tolerance)


def caveat(status: str) -> str:
    """The words a table row or conclusion from a run of this status must carry ('' if converged)."""
    return "" if status == CONVERGED else f" ({status}: not converged, numbers may change with more steps)"
