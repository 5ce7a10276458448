"""A timed session's deadline: no cell starts that could not finish before it (the recorded time,
then the longest measured), and the pool stops what still runs at the deadline."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from posenc.processes import run_processes
from posenc.window.deadline import CellGate


class Clock:
    """A settable clock for the gate."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_gate_admits_a_cell_only_while_the_recorded_then_measured_time_fits() -> None:
    clock = Clock()
    gate = CellGate(at=600.0, recorded_s=300.0, clock=clock)
    assert gate.admit("a") and gate.started == {"a": 0.0}
    clock.now = 301.0
    assert not gate.admit("b")  # 299 s left, a cell was recorded to take 300 s
    assert gate.refused == ["b"] and "b" not in gate.started
    assert gate.why_not() == "a cell needs ~5m00s (recorded), 4m59s left"
    gate.done("a")  # the first cell took 301 s here: the measurement replaces the record
    assert gate.measured == [301.0] and gate.cell_seconds() == 301.0
    clock.now = 200.0
    assert gate.admit("c")
    clock.now = 300.0
    gate.done("c")  # 100 s: the longest measured cell still counts
    assert gate.cell_seconds() == 301.0
    clock.now = 299.5
    assert not gate.admit("d") and gate.left() == 300.5 and not gate.fits()
    gate.done("never-started")  # nothing to measure
    assert gate.measured == [301.0, 100.0]


def _touch_job(tmp_path: Path, key: str, seconds: float = 0.0) -> tuple[str, list[str], Path]:
    """A job that writes ``key``'s marker file (so a started job is visible) and sleeps."""
    script = f"import pathlib, time; pathlib.Path({str(tmp_path / key)!r}).touch(); time.sleep({seconds})"
    return key, [sys.executable, "-c", script], tmp_path / f"{key}.log"


def test_a_job_the_gate_refuses_is_never_started(tmp_path: Path) -> None:
    lines: list[str] = []
    asked: list[str] = []

    def admit(key: str) -> bool:
        asked.append(key)
        return key != "b"

    jobs = [_touch_job(tmp_path, k) for k in ("a", "b", "c")]
    failed = run_processes(jobs, 1, lambda k, rc: lines.append(f"{k} {rc}") or f"{k} {rc}", poll_s=0.05, admit=admit)
    assert failed == [] and asked == ["a", "b", "c"]
    assert sorted(lines) == ["a 0", "c 0"]
    assert (tmp_path / "a").exists() and (tmp_path / "c").exists() and not (tmp_path / "b").exists()
    assert not (tmp_path / "b.log").exists()  # not even its log is opened


def test_the_pool_stops_running_jobs_at_the_deadline_and_starts_no_more(tmp_path: Path) -> None:
    """The running job is stopped (failed); the ones waiting for a slot are reported as dropped."""
    start = time.time()
    jobs = [_touch_job(tmp_path, "slow", 30.0), _touch_job(tmp_path, "later"), _touch_job(tmp_path, "last")]
    dropped: list[str] = []
    failed = run_processes(jobs, 1, lambda k, rc: f"{k} {rc}", poll_s=0.05, stop_at=start + 1.5,
                           dropped=dropped.append)
    assert failed == ["slow"]  # stopped at the deadline: it counts as failed
    assert dropped == ["later", "last"]  # never started, and said so
    assert time.time() - start < 15  # well before the job's own 30 s
    assert (tmp_path / "slow").exists() and not (tmp_path / "later").exists()
