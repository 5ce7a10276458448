"""One cell of an experiment grid (:class:`~posenc.experiments.experiment.Experiment`): its
freshness (:func:`recorded_verdict`, the one rule of every task), its judgement taken once
(:class:`JudgedCell`; taken and kept by :mod:`posenc.experiments.judgements`) and where it trained
(:func:`trained_on`).

A cell is a run directory: its run config's ``out_dir``, holding ``results.json`` once done. The
cell is judged once, when the runner first looks at it: its stored results and the task's one
verdict on them (fresh / rescore / extend / stale, or none: it has to run); without results, the
one rule on the run started there, if any (:func:`started_verdict`: stale, or kept for the run
that resumes it). That verdict is handed down to whatever brings the cell up to date: the task's
``run_cell`` passes it to training (the run directory resumes without being judged again,
:meth:`posenc.runs.run.Run.open`) and to checkpoint loading; the results are stored by the
cell's :class:`~posenc.runs.run.Run` (:meth:`~posenc.runs.run.Run.write_results`, their one
writer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from posenc.experiments.experiment import Cell
from posenc.runs.run import RESULTS_NAME, started_run
from posenc.runs.same_run import RunRecord, Verdict, same_run


def results_record(results: dict[str, Any], where: str = RESULTS_NAME) -> RunRecord:
    """The record a cell's ``results.json`` holds, read by the one reader (:meth:`RunRecord.read`).

    Args:
        results: the cell's stored results.
        where: the file, named when it holds no record.

    Returns:
        Its ``record``, with the steps trained (its summary's ``steps``, where known).

    Raises:
        RunDirError: the results hold no record (one line naming ``posenc upgrade``).
    """
    summary = results.get("summary")
    steps = summary.get("steps") if isinstance(summary, dict) else None
    return RunRecord.read(results.get("record"), steps, where)


def run_identity(run_dir: Path) -> dict[str, Any] | None:
    """What makes the finished cell in ``run_dir`` the run it is, from its ``results.json``: equal
    for the same finished run, so an output computed from a cell's run is known to still be of it.

    Args:
        run_dir: the cell's run directory.

    Returns:
        The fingerprint its results' record holds and where its training ended (its summary's
        ``steps`` and ``best_step``); None without a ``results.json``.
    """
    path = run_dir / RESULTS_NAME
    if not path.is_file():
        return None
    results = json.loads(path.read_text(encoding="utf-8"))
    summary = results.get("summary", {})
    return {"fingerprint": results.get("record", {}).get("fingerprint"),
            "steps": summary.get("steps"), "best_step": summary.get("best_step")}


def recorded_verdict(cfg: Any, results: dict[str, Any] | None,
                     evaluation: dict[str, Any] | None = None) -> Verdict | None:
    """A cell's freshness, the one rule of every task: the record its results hold (:func:`results_record`)
    judged by :func:`~posenc.runs.same_run.same_run` against its run config ``cfg``, scored as
    ``evaluation`` where the task scores its cells (a task adds only what its results hold beyond
    the record, e.g. translation's α search). Without results: stale when the run started in its
    directory is another config's (:func:`started_verdict`), else None (the cell has to run).

    Args:
        cfg: the cell's run config.
        results: its stored ``results.json`` (None: none).
        evaluation: how the task scores the cell now (None: it records none).

    Returns:
        The verdict, or None.

    Raises:
        RunDirError: the results, or the started run, hold no record (one line naming ``posenc upgrade``).
    """
    if results is not None:
        return same_run(results_record(results, str(results_path(cfg))), cfg, evaluation)
    started = started_verdict(cfg)
    return started if started is not None and started.kind == "stale" else None


def started_verdict(cfg: Any) -> Verdict | None:
    """The one rule on the run started in a cell's directory, not finished (no results): its
    record (fingerprint.json, with the steps its latest checkpoint trained,
    :func:`~posenc.runs.run.started_run`) judged against the cell's run config ``cfg``. Not
    stale, the run resumes with it (handed to training, so it is judged once); stale, the run
    is another config's (refused, or cleared with ``--rerun-stale``).

    Args:
        cfg: the cell's run config.

    Returns:
        The verdict, or None when the directory records no run.

    Raises:
        RunDirError: the started run holds no record (one line naming ``posenc upgrade``).
    """
    stored = started_run(cfg.out_dir)
    if stored is None:
        return None
    verdict = same_run(stored, cfg)
    if verdict.kind == "stale":
        return replace(verdict, detail=f"the run in {cfg.out_dir} was started with another config ({verdict.detail})")
    return verdict


@dataclass(frozen=True)
class JudgedCell:
    """A cell with its run config, its stored results and the task's verdict on them, taken once.

    Attributes:
        cell: the grid coordinate.
        cfg: its run config (``out_dir``: the cell's run directory).
        results: its stored ``results.json`` (None: none yet).
        verdict: the task's verdict on them (None: the cell has to run).
        started: without results, the verdict on the run started in its directory, not stale
            (:func:`started_verdict`: the cell has to run, and its training resumes with it);
            None otherwise.
    """

    cell: Cell
    cfg: Any
    results: dict[str, Any] | None
    verdict: Verdict | None
    started: Verdict | None = None

    @property
    def fresh(self) -> bool:
        """Whether the stored results hold for today's config (nothing to do)."""
        return self.verdict is not None and self.verdict.kind == "fresh"

    @property
    def stale(self) -> bool:
        """Whether the stored run is another config's (refused, or cleared with ``--rerun-stale``)."""
        return self.verdict is not None and self.verdict.kind == "stale"

    @property
    def name(self) -> str:
        """The cell's name (:attr:`Cell.name`), with the verdict's kind when there is one (the runner's listings)."""
        return self.cell.name + ("" if self.verdict is None else f" ({self.verdict.kind})")


def results_path(cfg: Any) -> Path:
    """Where the ``results.json`` of the cell whose run config is ``cfg`` is (or will be)."""
    return Path(cfg.out_dir) / RESULTS_NAME


def trained_on(results: dict[str, Any]) -> str:
    """Where a cell's run trained, from its stored results: the device its training summary names
    (with the GPU's name), else the ``train.device`` of its record when that names one (``auto``
    says nothing of where it ran), else ``unknown``."""
    named = (results.get("summary") or {}).get("device")
    if named:
        return str(named)
    configured = ((results.get("record") or {}).get("extension") or {}).get("device")
    return str(configured) if configured and configured != "auto" else "unknown"
