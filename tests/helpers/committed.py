"""A committed methods grid (docs/results/<name>) read back as the shipped experiment's grid."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config, load_yaml
from posenc.experiments.experiment import Experiment
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.convergence import run_status
from posenc.training.convergence import CONVERGED, convergence
from posenc.training.logging import read_valid
from posenc.training.stopping import is_flat
from tests.helpers.grids import grid_of_config, results_file, verdict_now


def committed_grid(schema: type, experiment: str, committed: Path) -> Experiment:
    """The shipped ``experiment`` (its ``schema``) with ``out_dir`` at the committed copy."""
    exp = load_config(schema, find_experiment(experiment))
    return grid_of_config(replace(exp, out_dir=str(committed)))


def committed_results(grid: Experiment) -> list[dict]:
    """Every cell's results.json, in grid order."""
    return [json.loads(results_file(grid, cell).read_text(encoding="utf-8")) for cell in grid.cells()]


def assert_all_fresh(grid: Experiment, cells: int) -> None:
    """``cells`` committed cells, each answering the shipped config (the one rule says fresh)."""
    assert len(grid.cells()) == cells
    assert {cell: verdict_now(grid, cell).kind for cell in grid.cells()} == {cell: "fresh" for cell in grid.cells()}


def stops_of(grid: Experiment) -> dict[str, list[dict]]:
    """Per method, each seed's summary.json plus ``lr_at_stop``: the last logged lr / the peak lr."""
    out: dict[str, list[dict]] = {}
    for cell in grid.cells():
        run = results_file(grid, cell).parent
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        with open(run / "train.csv", newline="", encoding="utf-8") as fh:
            last_lr = float(list(csv.DictReader(fh))[-1]["lr"])
        out.setdefault(cell.method, []).append(dict(summary, lr_at_stop=last_lr / grid.run_config(cell).train.lr))
    return out


def assert_document_quotes(doc_path: Path, committed: Path, claims: dict[str, str]) -> None:
    """The document's table is the committed report's, and every claimed number is in its prose."""
    doc = doc_path.read_text(encoding="utf-8")
    assert report_rows_in(doc, committed / "report" / "README.md"), "the section's table is the committed report's"
    doc = " ".join(doc.split())  # prose wraps lines
    for what, text in claims.items():
        assert text in doc, (what, text)


def report_rows_in(doc: str, report: Path) -> bool:
    """Whether every table row of the committed report's README.md appears in ``doc``."""
    rows = [line for line in report.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    return bool(rows) and all(row in doc for row in rows)


def valid_history(run: Path) -> list[list[float]]:
    """A committed run's validation curve, ``[[step, loss], ...]`` from its valid.csv."""
    with open(run / "valid.csv", newline="", encoding="utf-8") as fh:
        return [[int(r["step"]), float(r["loss"])] for r in csv.DictReader(fh)]


def assert_status_is_the_rules(run: Path, summary: dict, cap: int | None) -> None:
    """The committed run's recorded stop step and convergence fields are the convergence rule's on
    its own valid.csv (recomputed here, not read back); floats to valid.csv's 8 digits."""
    history = valid_history(run)
    assert history[-1][0] == summary["steps"], run
    again = convergence(history, summary["stopped"], summary["warmup"], summary["steps"], cap)
    floats = {k for k, v in again.items() if isinstance(v, float)}
    assert {k: summary[k] for k in again if k not in floats} == {k: again[k] for k in again if k not in floats}, run
    expected = pytest.approx([again[k] for k in sorted(floats)], rel=1e-6, abs=1e-6)
    assert [summary[k] for k in sorted(floats)] == expected, run


#: The files that store a run's status: its summary and the ``summary`` of its results.json.
STATUS_FILES = ("summary.json", "results.json")
#: The stored fields the one rule decides.
STATUS_KEYS = ("status", "converged", "flat")


def stored_statuses(root: Path) -> list[tuple[Path, str, dict]]:
    """(run directory, file name, stored summary) for every file under ``root`` whose summary
    stores a status, ``converged`` or ``flat``."""
    out = []
    for name in STATUS_FILES:
        for path in sorted(root.rglob(name)):
            data = json.loads(path.read_text(encoding="utf-8"))
            summary = data.get("summary") if name == "results.json" else data
            if isinstance(summary, dict) and set(STATUS_KEYS) & set(summary):
                out.append((path.parent, name, summary))
    return out


def recorded_cap(run: Path, summary: dict) -> int | None:
    """The run's ``max_steps``: its summary's, else its recorded config's (config.yaml, or the
    extension values of the record a results.json carries); None when neither records one."""
    if summary.get("max_steps"):
        return int(summary["max_steps"])
    configs = [(load_yaml(run / "config.yaml").get("train") or {})] if (run / "config.yaml").is_file() else []
    if (run / "results.json").is_file():
        configs.append(json.loads((run / "results.json").read_text(encoding="utf-8"))["record"]["extension"])
    caps = [c.get("max_steps") for c in configs]
    return next((int(cap) for cap in caps if cap is not None), None)


def rule_fields(run: Path, summary: dict) -> dict:
    """The status fields ``summary`` stores, as the one rule decides them now from the run's
    committed valid.csv (``flat`` recomputed only where there is a curve: without one, the stored
    ``flat`` is the rule's input)."""
    history = [[r["step"], r["loss"]] for r in read_valid(run)]
    status = run_status(run, summary, recorded_cap(run, summary))
    rule = {"status": status, "converged": status == CONVERGED, "flat": is_flat(history) if history else summary.get("flat")}
    return {k: rule[k] for k in STATUS_KEYS if k in summary}


def gnu_time(record: Path) -> tuple[float, float]:
    """User + system CPU seconds and elapsed wall seconds of a ``/usr/bin/time -v`` record."""
    text = record.read_text(encoding="utf-8")
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", text).group(1)) for kind in ("User", "System"))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    wall = 0.0
    for part in clock.split(":"):
        wall = 60 * wall + float(part)
    return cpu, wall
