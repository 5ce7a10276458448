"""The lengthgen report: one plot per task (sequence and per-token accuracy by test length, a line
per method, mean over seeds) and Markdown tables of the accuracy averaged over unseen lengths (Ruoss et al.
2023, Table 1 style: rows tasks, columns methods)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from posenc.evaluation.seeds import mean_std
from posenc.experiments.cell import recorded_verdict, results_record
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig, experiment_of
from posenc.training.convergence import CONVERGED, NO_CURVE, status_of
from posenc.training.logging import read_valid


def _by(results: list[dict[str, Any]], task: str, method: str) -> list[dict[str, Any]]:
    return [r for r in results if r["task"] == task and r["method"] == method]


def _cell(runs: list[dict[str, Any]], key: str, with_max: bool = True) -> str:
    """Mean ± std (× 100) of ``metrics[key]`` over the runs that have it; the best run too when asked."""
    values = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None]
    if not values:
        return "–"
    best = f" (max {100 * max(values):.1f})" if with_max and len(values) > 1 else ""
    return mean_std(values, 1, 100) + best


def with_curves(results: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """``results`` with each run's validation curve (``valid_history``: ``[[step, loss], ...]``)
    read from ``root/<task>/<method>/seed<N>/valid.csv`` where that file exists (a run that carries
    one already keeps it)."""
    out = []
    for r in results:
        rows = [] if "valid_history" in r else read_valid(Path(root) / r["task"] / r["method"] / f"seed{r['seed']}")
        out.append(dict(r, valid_history=[[row["step"], row["loss"]] for row in rows]) if rows else r)
    return out


def run_status(run: dict[str, Any]) -> str:
    """The run's status by the one rule, with its ``max_steps`` from the recorded config (a run that
    reached the cap is capped even where patience was recorded at that step) and the flatness of
    its validation curve (``valid_history``, :func:`with_curves`; else the summary's recorded
    ``flat``; a run with neither is "no curve", never converged)."""
    cap = _train(run).get("max_steps")
    return status_of(run.get("summary"), int(cap) if cap is not None else None, run.get("valid_history") or None)


def _status_cell(runs: list[dict[str, Any]]) -> str:
    """``converged/runs`` plus the other statuses, recomputed by the one convergence rule."""
    if not runs:
        return "–"
    statuses = [run_status(r) for r in runs]
    others = sorted({s for s in statuses if s != CONVERGED})
    text = f"{statuses.count(CONVERGED)}/{len(runs)}"
    return text + (f" ({', '.join(others)})" if others else "")


_SHORT = {CONVERGED: "conv", "still improving": "capped", "best in warm-up": "warm-up", "not flat": "not flat",
          NO_CURVE: "no curve", "unknown": "?"}


def _device(run: dict[str, Any]) -> str:
    """``GPU`` for a run whose recorded config trained on CUDA, else ``CPU`` (``train.device``)."""
    return "GPU" if "cuda" in str(_train(run).get("device", "cpu")) else "CPU"


def _train(run: dict[str, Any]) -> dict[str, Any]:
    """The ``train`` section a run's results record (:func:`posenc.experiments.cell.results_record`)."""
    train = (results_record(run).config or {}).get("train")
    return train if isinstance(train, dict) else {}


def long_table(exp: Any, results: list[dict[str, Any]]) -> list[str]:
    """One row per task × method: seen and unseen sequence accuracy and unseen token accuracy
    (mean ± std over seeds), each seed's convergence status and stopping step (``GPU`` marks a run
    trained on a GPU), and the mean training wall clock per run and device (``summary.wall_s``,
    minutes; the machine's load is not recorded)."""
    lines = ["| task | method | seen seq. acc. | unseen seq. acc. | unseen token acc. | runs (seed: status @ step) "
             "| train min/run |",
             "|---|---|---|---|---|---|---|"]
    for task in exp.tasks:
        for method in exp.methods:
            runs = sorted(_by(results, task, method), key=lambda r: r["seed"])
            if not runs:
                continue
            seeds = ", ".join(f"{r['seed']}: {_SHORT.get(run_status(r), '?')} @ {r['summary'].get('steps')}"
                              + (" GPU" if _device(r) == "GPU" else "") for r in runs)
            lines.append(f"| {task} | {method} | {_cell(runs, 'seen_seq_acc', with_max=False)} | "
                         f"{_cell(runs, 'unseen_seq_acc', with_max=False)} | "
                         f"{_cell(runs, 'unseen_token_acc', with_max=False)} | {seeds} | {_minutes(runs)} |")
    return lines


def _minutes(runs: list[dict[str, Any]]) -> str:
    """Mean training wall clock of ``runs`` in minutes ("–" when no run recorded it), per device
    when the runs trained on both ("6.2 CPU / 1.1 GPU")."""
    walls: dict[str, list[float]] = {}
    for r in runs:
        if isinstance(r.get("summary", {}).get("wall_s"), (int, float)):
            walls.setdefault(_device(r), []).append(float(r["summary"]["wall_s"]))
    if len(walls) == 1:
        ((_, values),) = walls.items()
        return f"{sum(values) / len(values) / 60:.1f}"
    return " / ".join(f"{sum(v) / len(v) / 60:.1f} {device}" for device, v in sorted(walls.items())) or "–"


def table(exp: Any, results: list[dict[str, Any]], key: str) -> list[str]:
    """Rows tasks, columns methods; ``key`` a metric of eval.json, or "status" (converged runs)."""
    methods = list(exp.methods)
    lines = ["| task | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for task in exp.tasks:
        cells = [_status_cell(_by(results, task, m)) if key == "status" else _cell(_by(results, task, m), key)
                 for m in methods]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


#: A run fitted its training lengths when its sequence accuracy on seen lengths reaches this (a
#: cell is compared only if every seed fitted; below it the unseen numbers say nothing).
FIT = 0.95


def fitted(run: dict[str, Any]) -> bool:
    """Whether ``run`` fitted its training lengths (seen sequence accuracy ≥ :data:`FIT`)."""
    seen = run["metrics"].get("seen_seq_acc")
    return seen is not None and seen >= FIT


def leaderboard(exp: Any, results: list[dict[str, Any]]) -> list[str]:
    """Per task, the methods whose every seed was trained and fitted its training lengths, best
    unseen sequence accuracy first (token accuracy beside it, and how many seeds converged: a fitted
    run may still be capped); then the cells left out and why (seeds below :data:`FIT` on seen
    lengths, or fewer seeds than the grid's: a grid reported before it is complete)."""
    lines = ["| task | rank | method | unseen seq. acc. | unseen token acc. | seeds converged |",
             "|---|---|---|---|---|---|"]
    left_out: list[str] = []
    seeds = len(getattr(exp, "seeds", ())) or 1
    for task in exp.tasks:
        cells = [(m, runs) for m in exp.methods if (runs := _by(results, task, m))]
        fit = [(m, runs) for m, runs in cells if all(fitted(r) for r in runs) and len(runs) >= seeds]
        fit.sort(key=lambda c: -statistics.fmean(r["metrics"]["unseen_seq_acc"] for r in c[1]))
        for rank, (m, runs) in enumerate(fit, start=1):
            conv = sum(run_status(r) == CONVERGED for r in runs)
            lines.append(f"| {task} | {rank} | {m} | {_cell(runs, 'unseen_seq_acc', with_max=False)} | "
                         f"{_cell(runs, 'unseen_token_acc', with_max=False)} | {conv}/{len(runs)} |")
        for m, runs in cells:
            short = [r for r in runs if not fitted(r)]
            if short:
                left_out.append(f"{task} / {m} ({len(short)} of {len(runs)} seeds below {100 * FIT:.0f} % seen)")
            elif len(runs) < seeds:
                left_out.append(f"{task} / {m} ({len(runs)} of {seeds} seeds trained)")
    note = (f"Left out ({len(left_out)} cells): " + "; ".join(left_out) + ".") if left_out else "No cell left out."
    return lines + ["", note]


def _curve(runs: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """Test lengths and the mean over ``runs`` of ``by_length[key]`` at each."""
    rows = [r["metrics"]["by_length"] for r in runs]
    lengths = [row["length"] for row in rows[0]]
    return lengths, [statistics.fmean(run[i][key] for run in rows) for i in range(len(lengths))]


def plot_task(exp: Any, results: list[dict[str, Any]], task: str, path: Path) -> None:
    """Two panels, sequence and per-token accuracy by test length (mean over seeds, a line per
    method); a cell with a seed below :data:`FIT` on seen lengths is dashed and labelled "not fitted"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    train_max = None
    for method in exp.methods:
        runs = _by(results, task, method)
        if not runs:
            continue
        fit = all(fitted(r) for r in runs)
        label = method if fit else f"{method} (not fitted)"
        for ax, key in zip(axes, ("seq_acc", "token_acc")):
            ax.plot(*_curve(runs, key), marker=".", linestyle="-" if fit else "--", label=label)
        train_max = runs[0]["metrics"].get("train_max_length", train_max)
    for ax, what in zip(axes, ("sequence accuracy", "per-token accuracy")):
        if train_max:
            ax.axvline(train_max, color="grey", linestyle=":", label="max train length")
        ax.set(title=f"{task}: {what}", xlabel="input length", ylabel=what, ylim=(-0.02, 1.02))
    if axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(exp: Any, results: list[dict[str, Any]], out_dir: Path,
                 stale: Sequence[tuple[dict[str, Any], str]] = (), root: Path | None = None) -> Path:
    """``README.md`` + ``<task>.png`` under ``out_dir``; returns ``out_dir``. ``stale``: results
    trained with another config than the grid's for their cell, with what differs; listed, never
    in the tables. ``root`` (default ``exp.root``) holds the run directories whose valid.csv the
    convergence status tests for flatness."""
    results = with_curves(results, Path(root) if root is not None else exp.root)
    out_dir.mkdir(parents=True, exist_ok=True)
    for task in exp.tasks:
        plot_task(exp, results, task, out_dir / f"{task}.png")
    seeds = ", ".join(str(s) for s in exp.seeds)
    lines = [f"# {exp.name}: length generalization", "", exp.description, "",
             "Accuracy (%) averaged over unseen test lengths (> the longest training input); "
             f"mean ± std over seeds {seeds} (max = best seed). "
             "Teacher-forced argmax; sequence accuracy equals greedy decoding's.", "",
             f"## Leaderboard: cells that fitted their training lengths (every seed ≥ {100 * FIT:.0f} % seen)", "",
             *leaderboard(exp, results), "",
             "## Sequence accuracy, unseen lengths", "", *table(exp, results, "unseen_seq_acc"), "",
             "## Token accuracy, unseen lengths", "", *table(exp, results, "unseen_token_acc"), "",
             "## Sequence accuracy, seen lengths", "", *table(exp, results, "seen_seq_acc"), "",
             "## Convergence (converged runs / runs; training/convergence.py)", "", *table(exp, results, "status"), "",
             "## Every cell (mean ± std over seeds; conv = stopped by patience after warm-up with a flat validation "
             "curve, capped = max_steps, no curve = stopped by patience with no validation curve recorded)", "",
             *long_table(exp, results), "",
             "## Plots", ""]
    lines += [f"![{task}]({task}.png)" for task in exp.tasks]
    if stale:
        lines += ["", "## Not in the tables: results of another config (stale)", "",
                  *(f"- {r['task']} / {r['method']} / seed {r['seed']}: {why}" for r, why in stale)]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out_dir


def collect(root: Path) -> list[dict[str, Any]]:
    """Every ``<task>/<method>/seed<N>/results.json`` under ``root`` (finished runs of a grid), each
    with its validation curve where its run directory keeps a valid.csv
    (:func:`~posenc.tasks.lengthgen.report.with_curves`: what the report's status tests).

    Args:
        root: the grid's output directory (or a committed copy of it).

    Returns:
        The results, in path order.
    """
    return with_curves([json.loads(p.read_text(encoding="utf-8"))
                        for p in sorted(Path(root).glob("*/*/seed*/results.json"))], root)


def main(argv: list[str]) -> int:
    """``python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR``: the report of
    the finished runs under RESULTS_ROOT (a run directory tree or docs/results/<name>), partial grids
    included (missing cells are "–"); results of another config than the grid's for their cell
    (stale) are listed, not tabulated. OUT_DIR must be new, empty or a report directory posenc
    wrote (never-destroy); a bad argument or target is one line on stderr and exit status 2.

    Args:
        argv: the three arguments.

    Returns:
        The exit status (0, or 2 on a bad argument or target).
    """
    from posenc.errors import PosencError

    if len(argv) != 3:
        print("usage: python -m posenc.tasks.lengthgen EXPERIMENT RESULTS_ROOT OUT_DIR", file=sys.stderr)
        return 2
    try:
        return _report(argv[0], Path(argv[1]), Path(argv[2]))
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _report(name: str, root: Path, out_dir: Path) -> int:
    from posenc.config import load_config
    from posenc.experiments.runner import find_experiment
    from posenc.runs.ownership import check_target, write_marker

    exp = load_config(LengthgenExperimentConfig, find_experiment(name))
    check_target(out_dir, "report", "OUT_DIR")  # before reading anything: nothing of a user's is overwritten
    grid = experiment_of(exp)
    current: list[dict[str, Any]] = []
    stale: list[tuple[dict[str, Any], str]] = []
    for r in collect(root):
        if r["task"] not in exp.tasks or r["method"] not in exp.methods or r["seed"] not in exp.seeds:
            continue
        verdict = recorded_verdict(grid.run_config((r["task"], r["method"], r["seed"])), r)  # results given: never None
        if verdict.kind == "fresh":
            current.append(r)
        else:
            stale.append((r, verdict.detail))
    write_report(exp, current, out_dir, stale, root)
    write_marker(out_dir, "report")
    print(out_dir / "README.md")
    return 0

