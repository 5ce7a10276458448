"""Training speed, training time, parameters and learning curves (SHAPE Tables 2/6, Fig. 8-9).

Reads each run's ``train.csv`` (step, wall_s, tokens_per_s, ...) and ``valid.csv`` (step, loss,
bleu, ...) as written by :mod:`posenc.training.logging`. Per run:

* ``tokens_per_s``: mean of the logged interval throughputs; ``speed`` = this / the baseline's
  (SHAPE's "Speed", relative to APE, larger is faster);
* ``train_time_s``: wall clock at the last logged step (Table 6), ``s_per_step`` = that / steps;
* ``best_bleu`` / ``best_step`` and the last validation loss.

Learning curves: validation perplexity (exp of the loss) and BLEU against gradient steps
(Fig. 8) and against wall clock (Fig. 9; the wall clock of a validation step is interpolated
from the training log).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.analysis import plots
from posenc.errors import DataError

RunFiles = str | Path | tuple[str | Path, str | Path]


def read_log(path: Path, required: Sequence[str]) -> dict[str, list[float | None]]:
    """The columns of a CSV training log.

    Args:
        path: a train.csv or valid.csv (:mod:`posenc.training.logging`).
        required: the columns it must have.

    Returns:
        Column name → its values as floats, row by row (empty cells → None).

    Raises:
        DataError: the file is missing, lacks a required column, has no rows, or has a
            non-numeric column.
    """
    if not path.is_file():
        raise DataError(f"{path}: training log not found")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: missing column {missing[0]!r} (has: {', '.join(reader.fieldnames or [])})")
        rows = list(reader)
    if not rows:
        raise DataError(f"{path}: log has no rows")
    out: dict[str, list[float | None]] = {}
    for name in reader.fieldnames or []:
        try:
            out[name] = [float(r[name]) if r[name] not in ("", None) else None for r in rows]
        except ValueError:
            raise DataError(f"{path}: column {name!r} is not numeric") from None
    return out


def run_paths(run: RunFiles) -> tuple[Path, Path]:
    """The training and validation logs of a run.

    Args:
        run: a run directory (with train.csv and valid.csv) or an explicit (train, valid) pair of files.

    Returns:
        ``(train.csv, valid.csv)`` paths.
    """
    if isinstance(run, tuple):
        return Path(run[0]), Path(run[1])
    return Path(run) / "train.csv", Path(run) / "valid.csv"


def metric_column(valid: dict[str, list[float | None]]) -> list[float | None]:
    """valid.csv's metric column (translation: BLEU).

    Args:
        valid: the columns of a valid.csv (:func:`read_log`).

    Returns:
        Its ``metric`` values (None where not scored); empty when the log has no such column.
    """
    return valid.get("metric") or []


def summarize(train: dict[str, list[float | None]], valid: dict[str, list[float | None]]) -> dict[str, Any]:
    """One run's row of the speed table.

    Args:
        train: the columns of its train.csv (``step``, ``wall_s``, ``tokens_per_s``).
        valid: the columns of its valid.csv (``step``, ``loss``, and ``metric`` where scored).

    Returns:
        ``steps, train_time_s, s_per_step, tokens_per_s`` (mean of the logged intervals),
        ``best_bleu, best_step`` (the best metric, the earlier step on a tie; None when never scored)
        and ``final_valid_loss``.
    """
    tps = [v for v in train["tokens_per_s"] if v is not None]
    steps, wall = train["step"][-1], train["wall_s"][-1]
    scored = [(b, s) for b, s in zip(metric_column(valid), valid["step"]) if b is not None]
    best = max(scored, key=lambda x: (x[0], -x[1])) if scored else (None, None)
    return {
        "steps": int(steps), "train_time_s": wall, "s_per_step": wall / steps if steps else None,
        "tokens_per_s": float(np.mean(tps)) if tps else None,
        "best_bleu": best[0], "best_step": None if best[1] is None else int(best[1]),
        "final_valid_loss": valid["loss"][-1],
    }


def speed(
    runs: Mapping[str, RunFiles],
    out_dir: str | Path,
    baseline: str | None = None,
    params: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Speed/time/parameter table → ``speed.csv``, ``speed.md``; learning curves →
    ``curves_steps.png`` and ``curves_wall.png``.

    Args:
        runs: model name → its run directory or (train.csv, valid.csv) pair.
        out_dir: the output directory (created if needed).
        baseline: the model ``speed`` is relative to (default: the first).
        params: model name → parameter count, for the ``params`` column (None: empty).

    Returns:
        The rows written: ``model, steps, train_time_s, s_per_step, tokens_per_s, speed, best_bleu,
        best_step, final_valid_loss, params``.

    Raises:
        DataError: no runs, a baseline not among them, or a log that cannot be read (:func:`read_log`).
    """
    if not runs:
        raise DataError("speed: no runs given")
    base = baseline if baseline is not None else next(iter(runs))
    if base not in runs:
        raise DataError(f"speed: baseline {base!r} is not among the runs ({', '.join(runs)})")
    logs = {}
    for name, run in runs.items():
        train_path, valid_path = run_paths(run)
        logs[name] = (read_log(train_path, ("step", "wall_s", "tokens_per_s")), read_log(valid_path, ("step", "loss")))
    rows = [{"model": name, **summarize(*logs[name]), "params": (params or {}).get(name)} for name in runs]
    base_tps = next(r["tokens_per_s"] for r in rows if r["model"] == base)
    for r in rows:
        r["speed"] = r["tokens_per_s"] / base_tps if r["tokens_per_s"] and base_tps else None
    columns = ["model", "steps", "train_time_s", "s_per_step", "tokens_per_s", "speed", "best_bleu", "best_step",
               "final_valid_loss", "params"]
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "speed.csv", rows, columns)
    plots.write_markdown(out / "speed.md", rows, columns)
    plot_curves(logs, out)
    return rows


def plot_curves(logs: Mapping[str, tuple[dict, dict]], out: Path) -> None:
    """Validation perplexity and BLEU against steps (``curves_steps.png``) and against wall clock
    (``curves_wall.png``, a validation's wall clock interpolated from the training log).

    Args:
        logs: model name → the columns of its (train.csv, valid.csv) (:func:`read_log`).
        out: the existing output directory.
    """
    for axis, path in (("step", out / "curves_steps.png"), ("wall", out / "curves_wall.png")):
        fig, (ax1, ax2) = plots.figure(ncols=2)
        ppl, bleu = {}, {}
        for name, (train, valid) in logs.items():
            x = np.asarray(valid["step"], dtype=float)
            if axis == "wall":
                x = np.interp(x, np.asarray(train["step"], dtype=float), np.asarray(train["wall_s"], dtype=float))
            ppl[name] = (x, [math.exp(v) if v is not None else None for v in valid["loss"]])
            if any(b is not None for b in metric_column(valid)):
                bleu[name] = (x, metric_column(valid))
        xlabel = "gradient steps" if axis == "step" else "wall clock (s)"
        plots.lines(ax1, ppl, xlabel, "validation perplexity", "Validation perplexity")
        plots.lines(ax2, bleu, xlabel, "validation BLEU", "Validation BLEU")
        plots.save_png(fig, path)
