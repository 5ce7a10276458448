"""Progress of the running runs of a --jobs grid: step, validation loss and ETA
read from each run's train.csv / valid.csv; a redrawn status line on a terminal, plain lines
otherwise; the scheduler's loop calls it while workers run."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from posenc.experiments.progress import Progress, duration, last_row
from posenc.processes import run_processes


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _write(run: Path, steps: list[int], valid: list[tuple[int, float]]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "train.csv").write_text("step,loss,wall_s\n" + "".join(f"{s},3.0,{s / 10}\n" for s in steps))
    (run / "valid.csv").write_text("step,loss,ppl\n" + "".join(f"{s},{v},1\n" for s, v in valid))


def test_duration_and_last_row(tmp_path: Path) -> None:
    assert [duration(s) for s in (5, 75, 3700)] == ["5s", "1m15s", "1h01m"]
    assert last_row(tmp_path / "missing.csv") is None
    _write(tmp_path, [50, 100], [(100, 2.5)])
    assert last_row(tmp_path / "train.csv")["step"] == "100"


def test_lines_with_step_validation_loss_and_eta(tmp_path: Path) -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(lambda k: tmp_path / k, lambda k: 1000, lambda k: k, stream=out, interval_s=5.0,
                        clock=lambda: now[0])
    progress(["ape"])  # no train.csv yet
    _write(tmp_path / "ape", [100], [])
    now[0] = 10.0
    progress(["ape"])  # first step seen at t = 10: no rate yet
    _write(tmp_path / "ape", [100, 200, 300], [(200, 2.345)])
    now[0] = 12.0
    progress(["ape"])  # inside the interval: nothing
    now[0] = 30.0
    progress(["ape"])  # 200 steps in 20 s: 700 left at 10/s = 70 s
    assert out.getvalue().splitlines() == [
        "progress: ape starting", "progress: ape step 100/1000", "progress: ape step 300/1000 valid 2.345 ETA ≤ 1m10s"]


def test_the_estimate_does_not_grow_while_the_log_waits_for_its_next_row(tmp_path: Path) -> None:
    """The rate is timed by the rows' own wall_s: a later look at the same rows gives the same ETA."""
    now = [0.0]
    out = io.StringIO()
    progress = Progress(lambda k: tmp_path / k, lambda k: 1000, lambda k: k, stream=out, interval_s=5.0,
                        clock=lambda: now[0])
    _write(tmp_path / "ape", [100], [])
    progress(["ape"])
    _write(tmp_path / "ape", [100, 300], [])  # 200 steps in 20 s of the run's clock
    for now[0] in (40.0, 400.0):
        progress(["ape"])
    assert out.getvalue().splitlines()[1:] == ["progress: ape step 300/1000 ETA ≤ 1m10s"] * 2


def test_terminal_redraws_one_line_with_bars(tmp_path: Path) -> None:
    out = Tty()
    _write(tmp_path / "ape", [500], [])
    _write(tmp_path / "rpe", [250], [(250, 1.5)])
    progress = Progress(lambda k: tmp_path / k, lambda k: 1000, lambda k: k, stream=out, interval_s=0.0, clock=lambda: 1.0)
    progress(["ape", "rpe"])
    progress.clear()
    assert out.getvalue() == ("\r\033[Kape [######      ] step 500/1000 | rpe [###         ] step 250/1000 valid 1.500"
                              "\r\033[K")


def test_scheduler_loop_reports_running_workers(tmp_path: Path) -> None:
    """run_processes hands the running keys to the progress callback while workers run."""
    script = ("import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); p.mkdir(parents=True, exist_ok=True); "
              "(p / 'train.csv').write_text('step,loss\\n7,1.0\\n'); time.sleep(1.0)")
    jobs = [(k, [sys.executable, "-c", script, str(tmp_path / k)], tmp_path / f"{k}.log") for k in ("a", "b")]
    out = io.StringIO()
    progress = Progress(lambda k: tmp_path / k, lambda k: 0, lambda k: k, stream=out, interval_s=0.0)
    assert run_processes(jobs, 2, lambda k, rc: f"done {k} {rc}", poll_s=0.1, progress=progress) == []
    lines = out.getvalue().splitlines()
    assert "progress: a step 7 | b step 7" in lines
