"""The queue of a timed session: the committed queue's grids and what their overrides mean, which
cells a session trains (none committed, none half-run here), one-line errors for a bad queue."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from posenc.experiments.experiment import Cell
from posenc.experiments.runner import load_grid, run_experiment
from posenc.experiments.tasks import task_of
from posenc.runs.same_run import RunRecord, same_run
from posenc.window.queue import blocker, check_entries, entry_cells, load_queue
from tests.helpers.tiny import assert_one_line_error, cli

REPO = Path(__file__).resolve().parents[2]
QUEUE = REPO / "benchmarks" / "gpu_queue.yaml"
ADDED = ["rnn", "rr", "rnn-nmt", "cape", "learned"]


def test_the_committed_queue_starts_with_the_extrapolate_column_to_the_alpha_peak() -> None:
    """Issue 60's order (the EXTRAPOLATE column is rebuilt on the committed tokenizer and committed
    from the CPU): the column with α searched to its peak and greedy decoding, then VANILLA of the
    added methods and the rest."""
    entries = check_entries(load_queue(QUEUE))
    peak, added, rest = (e for e, _ in entries[:3])
    assert peak.experiment == "multi30k_select" and peak.settings == ["extrapolate"] and {"tune_length_penalty_max=5.0", "greedy_splits=[test]"} <= set(
        peak.overrides)
    assert "out_dir=docs/results/multi30k_select_peak" in peak.overrides
    assert (added.experiment, added.settings, added.methods) == ("multi30k_select", ["vanilla"], ADDED)
    assert rest.experiment == "multi30k_select" and not (rest.settings or rest.methods or rest.seeds)
    assert [e.experiment for e, _ in entries[3:]] == ["neishi_gpu", "shape_gpu", "multi30k_select"]
    assert entries[3][0].settings == ["short", "middle", "long"] and entries[4][0].settings == ["interpolate"]


def _window(minutes: str) -> dict[str, int]:
    """``gpu_session.sh window MINUTES``: the seconds a cell has under ``all`` and ``queue``."""
    out = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_session.sh"), "window", minutes], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return {part: int(seconds) for part, seconds in re.findall(r"(all|queue) [\d.]+: (-?\d+) s for a cell", out)}


def test_every_entrys_first_cell_fits_the_documented_queue_window() -> None:
    """With every step before the grids taking its whole allowance, a cell of every entry can still
    start under ``queue OUT 9`` (the gate admits it: cell_minutes <= the time left); under ``all OUT 9``
    none can, as the docs and the queue's header say, with both windows quoted as the script gives them."""
    window = _window("9")
    entries = load_queue(QUEUE).entries
    assert [e.experiment for e in entries if e.cell_minutes * 60 > window["queue"]] == []
    assert [e.experiment for e in entries if e.cell_minutes * 60 <= window["all"]] == []
    assert all(e.jobs != "auto" for e in entries)  # auto adds a cell per ~30 s: too few start in a window
    quoted = f"`queue OUT 9` {window['queue']} s ({window['queue'] / 60:.1f} min), `all OUT 9` {window['all']} s"
    assert quoted in " ".join(QUEUE.read_text().replace("#", " ").split())
    docs = " ".join((REPO / "docs" / "performance.md").read_text().split())
    assert f"`queue OUT 9` leaves a cell {window['queue']} s" in docs and f"`all OUT 9` {window['all']} s" in docs


def test_the_queues_measured_figures_are_the_committed_cells() -> None:
    """The per-update times and update counts the queue's header derives cell_minutes from are those
    the multi30k_select cells trained on a lent H100 recorded (results.json: summary.wall_s / steps;
    docs/perf/gpu_multi30k_select_cells.json keeps those of the EXTRAPOLATE cells since removed), and the
    multi30k_select entries' cell_minutes covers 18 s + the most updates x the slowest update at 6 at
    once + the 150 s given to decoding."""
    measured = json.loads((REPO / "docs" / "perf" / "gpu_multi30k_select_cells.json").read_text(encoding="utf-8"))
    per_update = {c["cell"]: (c["wall_s"] / c["steps"], c["steps"]) for c in measured["cells"]}
    root = REPO / "docs" / "results" / "multi30k_select"
    for cell in (c for c in per_update if c.startswith("vanilla/")):  # those still in the grid: the same record
        summary = json.loads((root / cell / "results.json").read_text(encoding="utf-8"))["summary"]
        assert (summary["wall_s"] / summary["steps"], summary["steps"]) == per_update[cell]
    six = [t for cell, (t, _) in per_update.items() if cell.split("/")[1] in ("shape-kstar", "shape-k500-public")
           and cell.startswith("extrapolate/")]
    vanilla_steps = [n for cell, (_, n) in per_update.items() if cell.startswith("vanilla/")]
    assert len(six) == 6 and (round(min(six), 3), round(max(six), 3)) == (0.029, 0.031)
    assert (min(vanilla_steps), max(vanilla_steps)) == (5400, 8400)
    header = " ".join(QUEUE.read_text().replace("#", " ").split())
    assert "6 cells at once (SHAPE K* and its public-code variant, EXTRAPOLATE), 0.029-0.031 s per update" in header
    assert "stopped after 5,400-8,400 updates" in header
    need = 18 + max(vanilla_steps) * max(six) + 150
    for entry in load_queue(QUEUE).entries:
        if entry.experiment == "multi30k_select":
            assert entry.cell_minutes * 60 >= need and entry.jobs <= 6, entry.note


def test_the_queues_placement_overrides_keep_every_runs_identity() -> None:
    """multi30k_select's base says device cpu: trained on the GPU with the queue's overrides, each cell
    is the same run as here (train.device is a placement key; fp32 is what auto is on a CPU at d 128)."""
    for entry, grid in check_entries(load_queue(QUEUE)):
        placed = [o for o in entry.overrides if o.startswith("base.train.")]
        if not placed:
            continue
        assert sorted(placed) == ["base.train.device=cuda", "base.train.precision=fp32"]
        here = load_grid(entry.experiment, [o for o in entry.overrides if o not in placed])
        configs = {cell: stage.run_config(cell) for stage, cell in entry_cells(entry, here)}
        for stage, cell in entry_cells(entry, grid):
            gpu = stage.run_config(cell)
            assert gpu.train.device == "cuda" and configs[cell].train.device == "cpu"
            verdict = same_run(RunRecord.of(gpu), configs[cell])
            assert verdict.kind == "fresh", (cell, verdict.detail)


@pytest.fixture
def dummy(tmp_path: Path) -> Path:
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}}, "settings": {"plain": {}},
           "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1, 2]}
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def test_a_session_trains_only_cells_without_results_or_run_directory(dummy: Path, tmp_path: Path) -> None:
    run_experiment(str(dummy), ["seeds=[1]", "methods={nobias: {}}"])
    grid = load_grid(str(dummy))
    assert blocker(grid, task_of(grid), Cell("plain", "nobias", 1)) == ""  # committed: skipped
    assert blocker(grid, task_of(grid), Cell("plain", "bias", 1)) is None  # to train
    partial = Path(grid.run_config(Cell("plain", "bias", 2)).out_dir)
    partial.mkdir(parents=True)
    (partial / "train.csv").write_text("step,loss\n")
    assert blocker(grid, task_of(grid), Cell("plain", "bias", 2)) == f"{partial} already holds a run without results"
    changed = load_grid(str(dummy), ["base.model.dim=2"])
    assert blocker(changed, task_of(changed), Cell("plain", "nobias", 1)).startswith("stale results here (model.dim (3 -> 2)")


def _queue(tmp_path: Path, entry: dict) -> Path:
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump({"entries": [entry]}), encoding="utf-8")
    return path


def test_a_bad_queue_is_a_one_line_error(dummy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def error(*argv: object) -> str:
        return assert_one_line_error(*cli(capsys, "queue", *argv)[::2])

    ok = {"experiment": str(dummy), "cell_minutes": 1}
    assert "methods ['nope'] not in the grid (['bias', 'nobias'])" in error(
        "pack", _queue(tmp_path, {**ok, "methods": ["nope"]}), tmp_path / "pack")
    assert "settings ['long'] not in the grid" in error("pack", _queue(tmp_path, {**ok, "settings": ["long"]}),
                                                      tmp_path / "pack")
    assert "cell_minutes must be > 0" in error("pack", _queue(tmp_path, {"experiment": str(dummy)}), tmp_path / "p")
    assert "minutes: unknown option" in error("pack", _queue(tmp_path, {**ok, "minutes": 2}), tmp_path / "p")
    assert "--jobs must be >= 1" in error("pack", _queue(tmp_path, {**ok, "jobs": 0}), tmp_path / "p")
    good = _queue(tmp_path, ok)
    assert "needs --until EPOCH and --archive FILE" in error("run", good)
    assert "has already passed" in error("run", good, "--until", "1", "--archive", tmp_path / "a.tar.gz")
    assert "not a packed payload" in error("run", good, "--until", "9999999999", "--archive", tmp_path / "a.tar.gz",
                                           "--payload", tmp_path)
    assert not (tmp_path / "exp").exists()  # nothing trained


def test_packed_data_is_placed_wherever_a_queue_cell_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One data config read by two grids (two out_dirs): packed once, placed at both; one already
    there is kept."""
    from posenc.window.payload import place
    from posenc.window.queue import queue_cells
    from tests.experiments.tiny_grid import write_experiment

    exp = write_experiment(tmp_path)
    entries = [{"experiment": str(exp), "overrides": [f"out_dir={tmp_path / name}"], "cell_minutes": 1}
               for name in ("a", "b")]
    (tmp_path / "queue.yaml").write_text(yaml.safe_dump({"entries": entries}))
    code, out, err = cli(capsys, "queue", "pack", tmp_path / "queue.yaml", tmp_path / "payload")
    assert code == 0, err
    assert out.startswith("packed 1 prepared data directories")
    (data_a,) = (tmp_path / "a" / "data").glob("vanilla-*")
    assert not (tmp_path / "b" / "data").exists()  # prepared once
    cells = queue_cells(load_queue(tmp_path / "queue.yaml"))
    assert place(cells, tmp_path / "payload") == "payload: placed 1 prepared data directories, kept 1 already here"
    data_b = tmp_path / "b" / "data" / data_a.name
    assert sorted(p.name for p in data_b.iterdir()) == sorted(p.name for p in data_a.iterdir())
    assert (data_b / "train.src").read_bytes() == (data_a / "train.src").read_bytes()


def test_a_target_holding_other_files_is_one_line_before_anything_is_placed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Where a cell reads its prepared data a directory holds files but no meta.json: ``queue run``
    stops in one line naming it, before the session starts and before any data is placed."""
    from tests.experiments.tiny_grid import write_experiment

    exp = write_experiment(tmp_path)
    entries = [{"experiment": str(exp), "overrides": [f"out_dir={tmp_path / name}"], "cell_minutes": 1}
               for name in ("a", "b")]
    (tmp_path / "queue.yaml").write_text(yaml.safe_dump({"entries": entries}))
    assert cli(capsys, "queue", "pack", tmp_path / "queue.yaml", tmp_path / "payload")[0] == 0
    (data_a,) = (tmp_path / "a" / "data").glob("vanilla-*")
    shutil.rmtree(data_a)
    data_b = tmp_path / "b" / "data" / data_a.name
    data_b.mkdir(parents=True)
    (data_b / "notes.txt").write_text("mine")
    code, out, err = cli(capsys, "queue", "run", tmp_path / "queue.yaml", "--until", "9999999999", "--archive",
                         tmp_path / "cells.tar.gz", "--payload", tmp_path / "payload")
    assert_one_line_error(code, err, f"payload: {data_b} holds files but no prepared data (no meta.json)")
    assert out == "" and not data_a.exists() and [p.name for p in data_b.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "cells.tar.gz").exists()


def test_an_archive_error_costs_one_cell_not_the_session(dummy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The archive failing for a finished cell (here: the disk full as the first one is added) is one
    line and that cell counts as not archived; the other cell, training meanwhile, finishes and is
    archived (the error never goes through the process pool, which would stop it)."""
    import time

    from posenc.window.archive import CellArchive
    from posenc.window.queue import Queue, QueueEntry, QueueSession

    real, calls = CellArchive.finished, []

    def finished(self: CellArchive, grid: object, cell: Cell, *rest: object) -> None:
        calls.append(cell)
        if len(calls) == 1:
            raise OSError(28, "No space left on device", str(self.path))
        real(self, grid, cell, *rest)

    monkeypatch.setattr(CellArchive, "finished", finished)
    session = QueueSession(time.time() + 600, CellArchive(tmp_path / "out" / "cells.tar.gz"))
    session.run(Queue([QueueEntry(str(dummy), cell_minutes=0.1, seeds=[1], jobs=2)]))
    out = capsys.readouterr().out
    first = "/".join(map(str, calls[0]))
    assert f"archive: {first} not archived: {tmp_path / 'out' / 'cells.tar.gz'}: No space left on device" in out
    assert "[seeds 1]: 2 cells: 0 committed, 2 finished (1 not archived), 0 failed or cut" in out
    assert out.splitlines()[-1].startswith("queue: 2 cells finished (1 not archived), 0 failed or cut")
    assert session.archive.cell_count() == 1 and len(calls) == 2


def test_pack_and_run_refuse_what_posenc_may_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``pack DIR`` into a folder holding a user's file or inside a posenc directory, ``run --archive``
    over a file that is no cell archive or inside a posenc directory: one line each, nothing
    prepared, nothing written."""
    from posenc.runs.ownership import write_marker
    from tests.experiments.tiny_grid import write_experiment

    queue = _queue(tmp_path, {"experiment": str(write_experiment(tmp_path)), "cell_minutes": 1})
    mine, run, notes = tmp_path / "mine", tmp_path / "run", tmp_path / "notes.txt"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    run.mkdir()
    write_marker(run, "run")
    notes.write_text("keep")

    def error(*argv: object) -> str:
        return assert_one_line_error(*cli(capsys, "queue", *argv)[::2])

    assert "holds files posenc did not write ('notes.txt')" in error("pack", queue, mine)
    assert "lies inside the posenc run directory" in error("pack", queue, run / "pack")
    until = ("--until", "9999999999")
    assert "is a file that is not a posenc cell archive" in error("run", queue, *until, "--archive", notes)
    assert "lies inside the posenc run directory" in error("run", queue, *until, "--archive", run / "cells.tar.gz")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and notes.read_text() == "keep"
    assert sorted(p.name for p in run.iterdir()) == [".posenc-run"] and not (tmp_path / "exp").exists()


def test_a_failed_pack_leaves_no_temporary_and_no_index(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk full while the data is packed: one line naming data.tar.gz; no temporary file, and no
    payload.json, so the folder is not taken for a payload."""
    import errno
    import tarfile

    from tests.experiments.tiny_grid import write_experiment

    queue = _queue(tmp_path, {"experiment": str(write_experiment(tmp_path)), "cell_minutes": 1})

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "add", full)
    code, _, err = cli(capsys, "queue", "pack", queue, tmp_path / "payload")
    assert_one_line_error(code, err, str(tmp_path / "payload" / "data.tar.gz"), "No space left on device")
    assert sorted(p.name for p in (tmp_path / "payload").iterdir()) == [".posenc-run"]


def test_a_grid_without_settings_names_its_cells_method_then_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """In a grid without an outer axis (vision, speech) every message of the window names a cell
    ``method/seed``, never with a leading slash: a cell left alone, one not archived, one whose run
    directory lies outside the grid, the cells left out of an archive over its limit."""
    import time
    from types import SimpleNamespace

    from posenc.errors import ConfigError
    from posenc.window.archive import CellArchive
    from posenc.window.queue import Queue, QueueEntry, QueueSession

    exp = {"name": "flat", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}}, "settings": {},
           "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1]}
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    grid = load_grid(str(path))
    partial = Path(grid.run_config(Cell("", "bias", 1)).out_dir)
    partial.mkdir(parents=True)
    (partial / "train.csv").write_text("step,loss\n")

    def full(self: CellArchive, *args: object) -> None:
        raise OSError(28, "No space left on device", str(self.path))

    monkeypatch.setattr(CellArchive, "finished", full)
    session = QueueSession(time.time() + 600, CellArchive(tmp_path / "out" / "cells.tar.gz"))
    session.run(Queue([QueueEntry(str(path), cell_minutes=0.1, jobs=1)]))
    assert session.counts[0].blocked == [f"bias/1: {partial} already holds a run without results"]
    assert f"archive: nobias/1 not archived: {tmp_path / 'out' / 'cells.tar.gz'}" in capsys.readouterr().out
    monkeypatch.undo()

    archive = CellArchive(tmp_path / "small.tar.gz", limit=1)
    archive.finished(grid, Cell("", "nobias", 1), str(path), [])
    assert archive.write() and archive.left_out == ["nobias/1"]
    outside = SimpleNamespace(name=grid.name, root=grid.root,
                              run_config=lambda cell: SimpleNamespace(out_dir=str(tmp_path / "elsewhere")))
    with pytest.raises(ConfigError, match=r"^cell nobias/1: its run directory"):
        archive.finished(outside, Cell("", "nobias", 1), str(path), [])
