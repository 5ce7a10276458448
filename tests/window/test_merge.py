"""The archive of a timed session and ``posenc experiment NAME --merge ARCHIVE``: finished cells
travel without checkpoints, within a size limit; the merge places only cells that are the run this
grid asks for (a cell of another config is refused in one line naming the key), never over a cell
directory that holds anything, and regenerates the report."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from posenc.experiments.experiment import Cell
from posenc.experiments.runner import load_grid, run_experiment
from posenc.window.archive import CellArchive
from tests.helpers.grids import results_file, verdict_now
from tests.helpers.tiny import assert_one_line_error, cli

CELLS = [Cell("plain", "nobias", 1), Cell("plain", "bias", 1)]


def _dummy_yaml(directory: Path, out_dir: Path) -> Path:
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(out_dir),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}},
           "settings": {"plain": {}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1]}
    path = directory / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A dummy grid trained "on the GPU machine" (its own out_dir) and its session archive; the
    config file beside it. Returns (config, archive)."""
    tmp = tmp_path_factory.mktemp("session")
    path = _dummy_yaml(tmp, tmp / "gpu" / "exp")
    run_experiment(str(path))
    grid = load_grid(str(path))
    logs = grid.root / "logs"
    logs.mkdir()
    for cell in CELLS:
        (logs / f"{cell[0]}-{cell[1]}-seed{cell[2]}.log").write_text(f"log of {cell[1]}\n")
    archive = CellArchive(tmp / "out" / "cells.tar.gz")
    for cell in CELLS:
        archive.started(grid, cell, str(path), [])
        archive.finished(grid, cell, str(path), [])
    archive.write()
    return path, archive.path


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def test_the_archive_holds_the_finished_cells_without_checkpoints(session: tuple[Path, Path]) -> None:
    path, archive = session
    trained = Path(load_grid(str(path)).run_config(CELLS[0]).out_dir)
    assert (trained / "checkpoints").is_dir() and any((trained / "checkpoints").rglob("*.safetensors"))
    names = _names(archive)
    assert names[0] == "manifest.json"
    assert "grid0/cells/plain/nobias/seed1/results.json" in names and "grid0/logs/plain-bias-seed1.log" in names
    assert not [n for n in names if "/checkpoints/" in n or n.endswith(".safetensors") or n.endswith(".posenc.lock")]
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    (grid,) = manifest["grids"]
    assert grid["name"] == "dummy" and grid["root"] == str(trained.parents[2])
    assert [(c["group"], c["method"], c["seed"], c["path"]) for c in grid["cells"]] == [
        ("plain", "nobias", 1, "plain/nobias/seed1"), ("plain", "bias", 1, "plain/bias/seed1")]
    assert archive.stat().st_size < 16 * 2**20


def test_cells_finished_last_are_left_out_over_the_size_limit(session: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = session
    grid = load_grid(str(path))
    whole = CellArchive(tmp_path / "whole.tar.gz")
    for cell in CELLS[:1]:
        whole.finished(grid, cell, str(path), [])
    one_cell = whole.write().stat().st_size
    small = CellArchive(tmp_path / "small.tar.gz", limit=one_cell + 200)
    for cell in CELLS:
        small.finished(grid, cell, str(path), [])
    small.write()
    assert small.left_out == ["plain/bias/1"] and small.cell_count() == 1
    assert not [n for n in _names(small.path) if "/bias/" in n]


def test_the_archive_on_disk_is_never_over_the_limit(session: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a file under the limit replaces the archive (a window taken back at any moment returns
    one that can come back); when even no cell fits, the archive written before stays as it was."""
    import posenc.window.archive as archive_module

    path, _ = session
    grid = load_grid(str(path))
    one = CellArchive(tmp_path / "one.tar.gz")
    one.finished(grid, CELLS[0], str(path), [])
    limit = one.write().stat().st_size + 200
    moved: list[int] = []
    real = os.replace
    monkeypatch.setattr(archive_module.os, "replace", lambda a, b: moved.append(os.path.getsize(a)) or real(a, b))
    small = CellArchive(tmp_path / "out" / "small.tar.gz", limit=limit)
    for cell in CELLS:
        small.started(grid, cell, str(path), [])
        small.finished(grid, cell, str(path), [])
    small.write()
    assert moved and max(moved) <= limit and small.cell_count() == 1 and small.left_out == ["plain/bias/1"]
    kept = small.path.read_bytes()
    small.limit = 100  # smaller than the manifest alone
    small.write()
    assert small.path.read_bytes() == kept and small.cell_count() == 1
    assert small.left_out == ["plain/bias/1"] and "kept as written before (1 cells)" in small.note
    assert sorted(p.name for p in small.path.parent.iterdir()) == ["small.tar.gz"]  # no temporary left


def test_merge_places_fresh_cells_with_their_logs_and_regenerates_the_report(
        session: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, archive = session
    here = tmp_path / "here"
    code, out, err = cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (f"merged plain/nobias/1: {here / 'plain' / 'nobias' / 'seed1'} (trained on cpu; scores as "
                        "carried: its task carries no outputs to recompute them from)")
    assert lines[-1] == f"merge: 2 merged, 0 kept, 0 refused; report: {here / 'report' / 'README.md'}"
    assert (here / "plain" / "bias" / "seed1" / "results.json").is_file()
    assert not (here / "plain" / "bias" / "seed1" / "checkpoints").exists()
    assert (here / "logs" / "plain-bias-seed1.log").read_text() == "log of bias\n"
    assert "| plain | bias | 1 |" in (here / "report" / "README.md").read_text()
    assert not [p for p in here.iterdir() if p.name.startswith(".merge-")]  # its unpacked copy is gone
    grid = load_grid(str(path), [f"out_dir={here}"])
    assert all(verdict_now(grid, cell).kind == "fresh" for cell in CELLS)


def test_a_cell_without_a_group_is_merged_only_with_results_of_the_grids_task(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a grid without settings (vision, speech) a cell's results name the grid's task where a
    cell's would name its setting: results naming another are refused as another cell's."""
    path = _dummy_yaml(tmp_path, tmp_path / "gpu")
    exp = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**exp, "settings": {}}), encoding="utf-8")
    run_experiment(str(path))
    grid = load_grid(str(path))
    moved = results_file(grid, Cell("", "bias", 1))
    moved.write_text(json.dumps({**json.loads(moved.read_text()), "setting": "vision"}))
    archive = CellArchive(tmp_path / "cells.tar.gz")
    for cell in grid.cells():
        archive.finished(grid, cell, str(path), [])
    archive.write()
    here = tmp_path / "here"
    code, out, err = cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive.path)
    assert code == 1, (out, err)  # a cell refused
    lines = out.splitlines()
    assert any(line.startswith(f"merged nobias/1: {here / 'nobias' / 'seed1'} (trained on cpu") for line in lines)
    assert "refused bias/1: its results.json is of another cell ('vision'/'bias'/'1')" in lines
    assert not (here / "bias").exists()


def test_merge_never_overwrites_a_cell_that_is_here(session: tuple[Path, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path, archive = session
    here = tmp_path / "here"
    assert cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive)[0] == 0
    results = here / "plain" / "nobias" / "seed1" / "results.json"
    results.write_text(results.read_text().replace('"seed": 1', '"seed": 1 '))  # marked, still fresh
    marked = results.read_text()
    other = here / "plain" / "bias" / "seed1"
    for child in sorted(other.rglob("*"), reverse=True):
        child.unlink() if child.is_file() else child.rmdir()
    (other / "notes.txt").write_text("mine")  # a directory that holds something else
    code, out, _ = cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive)
    assert code == 0
    assert f"kept plain/nobias/1: {results.parent} already holds fresh results; never overwritten" in out
    assert f"kept plain/bias/1: {other} already holds files; never overwritten" in out
    assert out.splitlines()[-1] == "merge: 0 merged, 2 kept, 0 refused; report not regenerated (no cell merged)"
    assert results.read_text() == marked and sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_merge_refuses_a_cell_of_another_config_naming_the_key(session: tuple[Path, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, archive = session
    here = tmp_path / "here"
    code, out, _ = cli(capsys, "experiment", path, f"out_dir={here}", "base.model.dim=2", "--merge", archive)
    assert code == 1
    refused = [line for line in out.splitlines() if line.startswith("refused ")]
    assert len(refused) == 2
    assert refused[0].startswith("refused plain/nobias/1: not the run this grid asks for (stale: ")
    assert all("model.dim (3 -> 2)" in line for line in refused)
    assert out.splitlines()[-1].startswith("merge: 0 merged, 0 kept, 2 refused")
    assert not (here / "plain").exists()


def test_the_out_dir_is_checked_before_anything_is_placed(session: tuple[Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A report directory holding a user's file, or an out_dir inside a posenc run: one line (exit 2)
    and nothing written, no cell placed, no unpacked copy, no directory made."""
    path, archive = session
    here = tmp_path / "here"
    (here / "report").mkdir(parents=True)
    (here / "report" / "notes.txt").write_text("mine")
    code, out, err = cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive)
    assert_one_line_error(code, err, str(here / "report"), "posenc did not write")
    assert out == "" and sorted(p.name for p in here.iterdir()) == ["report"]
    run = Path(load_grid(str(path)).run_config(CELLS[0]).out_dir)
    before = sorted(p.name for p in run.iterdir())
    code, out, err = cli(capsys, "experiment", path, f"out_dir={run / 'grid'}", "--merge", archive)
    assert_one_line_error(code, err, str(run), "lies inside the posenc run directory")
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_report_that_fails_still_leaves_the_cells_lines_and_summary(session: tuple[Path, Path], tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Any posenc error while the report is regenerated (here a refused write) is the summary's
    note; every placed cell's line is printed before it."""
    import posenc.window.merge as merge_module
    from posenc.errors import RunDirError

    def refused(*args: object, **kwargs: object) -> Path:
        raise RunDirError("cannot write report/README.md: No space left on device")

    monkeypatch.setattr(merge_module, "run_grid", refused)
    path, archive = session
    here = tmp_path / "here"
    code, out, _ = cli(capsys, "experiment", path, f"out_dir={here}", "--merge", archive)
    assert code == 0
    lines = out.splitlines()
    assert [line.split(" ")[0] for line in lines[:-1]] == ["merged", "merged"]
    assert lines[-1] == ("merge: 2 merged, 0 kept, 0 refused; report not regenerated (cannot write report/README.md: "
                         "No space left on device)")


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_bad_input_is_a_one_line_error(session: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path, archive = session
    merge = ("experiment", path, f"out_dir={tmp_path / 'here'}", "--merge")
    assert_one_line_error(*cli(capsys, *merge, tmp_path / "none.tar.gz")[::2], "none.tar.gz: no such file")
    (tmp_path / "text.tar.gz").write_text("not a tar")
    assert_one_line_error(*cli(capsys, *merge, tmp_path / "text.tar.gz")[::2], "not a posenc cell archive")
    bare = _tar(tmp_path / "bare.tar.gz", {"x.txt": b"x"})
    assert_one_line_error(*cli(capsys, *merge, bare)[::2], "not a posenc cell archive (no manifest.json")
    manifest = json.dumps({"format": "posenc-cells/1", "grids": []}).encode()
    escape = _tar(tmp_path / "escape.tar.gz", {"manifest.json": manifest, "grid0/../../x": b"x"})
    assert_one_line_error(*cli(capsys, *merge, escape)[::2], "is not under a plain relative name")
    empty = _tar(tmp_path / "empty.tar.gz", {"manifest.json": manifest})
    assert_one_line_error(*cli(capsys, *merge, empty)[::2], "no cells of experiment dummy (it holds: none)")
    assert_one_line_error(*cli(capsys, *merge, archive, "--jobs", "2")[::2], "--merge trains nothing: drop --jobs")


def test_a_committed_multi30k_cell_travels_in_the_size_the_docs_quote() -> None:
    """docs/performance.md quotes what one Multi30k cell adds to the archive: its travelling files
    (:func:`~posenc.window.archive.cell_files`) gzipped, for every committed multi30k_select cell."""
    from posenc.tasks.translation.spec import SPEC
    from posenc.window.archive import cell_files

    repo = Path(__file__).resolve().parents[2]
    sizes = []
    for run_dir in sorted((repo / "docs" / "results" / "multi30k_select").glob("*/*/seed*")):
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as tar:
            for path in cell_files(run_dir, SPEC):
                tar.add(path, path.relative_to(run_dir).as_posix(), recursive=False)
        sizes.append(len(packed.getvalue()) / 2**20)
    quoted = f"{min(sizes):.2f}-{max(sizes):.2f}"
    assert len(sizes) >= 36 and float(quoted.split("-")[1]) <= 0.2  # a cell adds a few per cent of a 16 MiB window
    docs = " ".join((repo / "docs" / "performance.md").read_text(encoding="utf-8").split())
    assert f"{quoted} MiB for each committed Multi30k cell" in docs
