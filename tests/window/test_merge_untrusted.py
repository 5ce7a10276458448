"""``posenc experiment NAME --merge ARCHIVE`` treats the archive as untrusted input (issue 57 item
2): every hostile archive, built here from a real session's, is refused in one line before anything
is unpacked, with nothing written or left behind (no directory of the out_dir's path made), memory
stays bounded for a manifest bomb, and a translation cell's forged score is refused by rescoring
its carried hypotheses against the references prepared here."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from posenc.experiments.experiment import Cell
from posenc.experiments.runner import load_grid, run_experiment
from posenc.window.archive import CellArchive, cell_files, travelling_bound
from posenc.window.intake import MAX_MEMBERS
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import assert_one_line_error, cli

REPO = Path(__file__).resolve().parents[2]
CELLS = [Cell("plain", "nobias", 1), Cell("plain", "bias", 1)]
NOBIAS = "grid0/cells/plain/nobias/seed1"
#: A member: name, bytes (or a size of zeros), mode, type.
Member = tuple[str, "bytes | int", int, bytes]


def _archive_of(grid_yaml: Path, cells: list[Cell], out: Path) -> Path:
    """The session archive of the trained ``cells`` of the grid at ``grid_yaml``, with their logs."""
    grid = load_grid(str(grid_yaml))
    logs = grid.root / "logs"
    logs.mkdir(exist_ok=True)
    archive = CellArchive(out)
    for cell in cells:
        (logs / f"{cell[0]}-{cell[1]}-seed{cell[2]}.log").write_text(f"log of {cell[1]}\n")
        archive.started(grid, cell, str(grid_yaml), [])
        archive.finished(grid, cell, str(grid_yaml), [])
    return archive.write()


@pytest.fixture(scope="module")
def dummy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Member]]:
    """A dummy grid trained "on the GPU machine" and its archive's members: (config, members)."""
    tmp = tmp_path_factory.mktemp("dummy")
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp / "gpu" / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}},
           "settings": {"plain": {}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1]}
    path = tmp / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    run_experiment(str(path))
    return path, _members(_archive_of(path, CELLS, tmp / "cells.tar.gz"))


def _members(archive: Path) -> list[Member]:
    with tarfile.open(archive) as tar:
        return [(m.name, tar.extractfile(m).read(), m.mode, tarfile.REGTYPE) for m in tar.getmembers()]


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, streamed (a member of any size without holding it)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def _write(path: Path, members: list[Member]) -> Path:
    """A gzipped tar of ``members`` (an int for bytes: that many zeros, streamed)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data, mode, kind in members:
            info = tarfile.TarInfo(name)
            info.mode, info.type = mode, kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            if kind != tarfile.REGTYPE:
                tar.addfile(info)
                continue
            info.size = data if isinstance(data, int) else len(data)
            source = io.BufferedReader(_Zeros(data), 2**20) if isinstance(data, int) else io.BytesIO(data)
            tar.addfile(info, source)
    return path


def _file(name: str, data: bytes | int = b"x", mode: int = 0o644) -> Member:
    return name, data, mode, tarfile.REGTYPE


def _refused(capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path, archive: Path, *needles: str) -> None:
    """The merge into ``tmp_path/a/b/c`` is one line (exit 2) and leaves nothing: not even ``a``."""
    code, out, err = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a' / 'b' / 'c'}", "--merge", archive)
    assert_one_line_error(code, err, str(archive), *needles)
    assert out == "" and not (tmp_path / "a").exists()


def test_an_untouched_archive_merges(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The base of every case below: the real archive, rewritten member by member, merges."""
    config, members = dummy
    code, out, err = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'here'}", "--merge",
                         _write(tmp_path / "same.tar.gz", members))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("merge: 2 merged, 0 kept, 0 refused")


def test_a_huge_junk_file_in_a_cell_is_refused_unread(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A real cell plus a 1,000 MiB junk.bin (4.5 MB gzipped): refused by its header, so never
    unpacked; a one-byte one likewise (not a file a cell carries)."""
    config, members = dummy
    for size in (1000 * 2**20, 1):
        archive = _write(tmp_path / f"junk{size}.tar.gz", [*members, _file(f"{NOBIAS}/junk.bin", size)])
        _refused(capsys, config, tmp_path, archive, f"member '{NOBIAS}/junk.bin' is not a file a cell carries")


@pytest.mark.parametrize("name, mode, why", [
    ("checkpoints/ckpt_99999999/model.safetensors", 0o644, "is not a file a cell carries"),
    (".posenc.lock", 0o644, "is not a file a cell carries"),
    ("tensorboard/events.out.tfevents.1", 0o644, "is not a file a cell carries"),
    ("spm.model", 0o644, "is not a file a cell carries"),
    ("translations/test.beam4.hyp", 0o644, "is not a file a cell carries"),  # not a dummy task's file
    ("run.sh", 0o755, "is executable"),
    ("train.csv", 0o755, "is executable"),
])
def test_anything_but_a_cells_own_files_is_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], name: str, mode: int,
                                                   why: str) -> None:
    config, members = dummy
    kept = [m for m in members if m[0] != f"{NOBIAS}/{name}"]
    archive = _write(tmp_path / "extra.tar.gz", [*kept, _file(f"{NOBIAS}/{name}", b"#!/bin/sh\n", mode)])
    _refused(capsys, config, tmp_path, archive, f"member '{NOBIAS}/{name}' {why}")


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE])
def test_links_folders_and_devices_are_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str], kind: bytes) -> None:
    config, members = dummy
    archive = _write(tmp_path / "kind.tar.gz", [*members, (f"{NOBIAS}/translations", b"", 0o755, kind)])
    _refused(capsys, config, tmp_path, archive, f"member '{NOBIAS}/translations' is not a regular file")


@pytest.mark.parametrize("name", ["manifest.json", f"{NOBIAS}/results.json"])
def test_a_member_present_twice_is_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str], name: str) -> None:
    """A second copy (which the last-wins reading took before, saying "(it holds: none)" for an
    empty second manifest) is refused, whatever it holds."""
    config, members = dummy
    second = json.dumps({"format": "posenc-cells/1", "grids": []}).encode() if name == "manifest.json" else b"{}"
    archive = _write(tmp_path / "twice.tar.gz", [*members, _file(name, second)])
    _refused(capsys, config, tmp_path, archive, f"member '{name}' appears twice")


def test_a_file_that_is_also_a_folder_is_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``results.json`` and ``results.json/x``, in either order: one line, never a traceback."""
    config, members = dummy
    inner = _file(f"{NOBIAS}/results.json/x")
    archive = _write(tmp_path / "clash.tar.gz", [*members, inner])
    _refused(capsys, config, tmp_path, archive, f"member '{NOBIAS}/results.json/x' is both a file and a folder")
    first = [m for m in members if m[0] != f"{NOBIAS}/results.json"]
    archive = _write(tmp_path / "clash2.tar.gz", [first[0], inner, *first[1:], _file(f"{NOBIAS}/results.json")])
    _refused(capsys, config, tmp_path, archive, f"member '{NOBIAS}/results.json/x' is not a file a cell carries")


def _manifest(members: list[Member]) -> dict:
    return json.loads(members[0][1])


def test_a_bad_manifest_or_layout_is_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config, members = dummy
    manifest = _manifest(members)
    cases: list[tuple[list[Member], str]] = [
        ([*members[1:], members[0]], "no manifest.json of format posenc-cells/1 as its first member"),
        ([_file("manifest.json", b'{"format": "posenc-cells/1", "grids": [], "grids": []}'), *members[1:]],
         "key 'grids' appears twice"),
        ([*members, _file("grid1/cells/x/results.json")], "lies under grid1/, which the manifest does not list"),
        ([*members, _file("grid0/logs/notes.txt")], "is not a worker log"),
        ([*members, _file("README.md")], "is not a file of a cell archive"),
        ([*members, _file("grid0/cells/plain/other/seed1/results.json")], "lies in no cell the manifest lists"),
        ([*members, _file("grid0/cells/plain/nobias/seed1/./results.json")], "is not under a plain relative name"),
    ]
    twice = dict(manifest, grids=[dict(manifest["grids"][0], cells=manifest["grids"][0]["cells"] * 2)])
    cases.append(([_file("manifest.json", json.dumps(twice).encode()), *members[1:]], "a cell or a cell path twice"))
    nested = json.loads(json.dumps(manifest))
    nested["grids"][0]["cells"][1]["path"] = "plain/nobias/seed1/inner"
    cases.append(([_file("manifest.json", json.dumps(nested).encode()), *members[1:]],
                  "cell path 'plain/nobias/seed1/inner' lies inside cell path 'plain/nobias/seed1'"))
    for i, (archive_members, why) in enumerate(cases):
        _refused(capsys, config, tmp_path, _write(tmp_path / f"bad{i}.tar.gz", archive_members), why)


def test_an_archive_beyond_its_bounds_is_refused(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The file over 32 MiB, a log over 16 MiB, members over 128 MiB in all, more than 20,000
    members: each one line, unpacked nowhere."""
    config, members = dummy
    big = tmp_path / "big.tar.gz"
    with open(big, "wb") as fh:
        fh.truncate(33 * 2**20)
    _refused(capsys, config, tmp_path, big, "weighs more than 32 MiB")
    log = _write(tmp_path / "log.tar.gz", [*members, _file("grid0/logs/gpu.csv", 17 * 2**20)])
    _refused(capsys, config, tmp_path, log, "member 'grid0/logs/gpu.csv' is 17.0 MiB, more than a log may be (16 MiB)")
    logs = [_file(f"grid0/logs/x{i}-seed1.log", 15 * 2**20) for i in range(9)]
    _refused(capsys, config, tmp_path, _write(tmp_path / "sum.tar.gz", [*members, *logs]), "unpacks to more than 128 MiB")
    many = [_file(f"grid0/logs/m{i}-seed1.log", b"") for i in range(MAX_MEMBERS)]
    _refused(capsys, config, tmp_path, _write(tmp_path / "many.tar.gz", [*members, *many]),
             f"holds more than {MAX_MEMBERS} members")


def test_the_grids_an_error_names_are_bounded(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An archive of 10,000 other grids: the line names five and counts the rest."""
    config, members = dummy
    manifest = {"format": "posenc-cells/1", "grids": [{"name": f"g{i}", "root": "/r"} for i in range(10_000)]}
    archive = _write(tmp_path / "grids.tar.gz", [_file("manifest.json", json.dumps(manifest).encode())])
    code, _, err = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a'}", "--merge", archive)
    assert_one_line_error(code, err, "no cells of experiment dummy (it holds: 'g0' at '/r', ", "and 9995 more)")
    assert len(err) < 400 and not (tmp_path / "a").exists()


_BOMB_CHILD = """
import resource, sys
from posenc.cli.main import main
import posenc.window.merge, posenc.experiments.runner, tests.dummy_task  # imported before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(sys.argv[1:])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(code, before, after)
"""


def test_a_manifest_bomb_is_refused_in_bounded_memory(dummy: tuple[Path, list[Member]], tmp_path: Path) -> None:
    """A ~100 KB archive whose manifest.json is 100 MB of ``{},`` (which took 5.85 GB and built a
    490 MB message): refused by its size before it is read, in a child process whose peak RSS grows
    by less than 100 MiB over its baseline."""
    config, _ = dummy
    bomb = b'{"format": "posenc-cells/1", "grids": [' + b"{}," * (100 * 10**6 // 3) + b"{}]}"
    archive = _write(tmp_path / "bomb.tar.gz", [_file("manifest.json", bomb)])
    assert archive.stat().st_size < 500_000
    argv = ["experiment", str(config), f"out_dir={tmp_path / 'a'}", "--merge", str(archive)]
    done = subprocess.run([sys.executable, "-c", _BOMB_CHILD, *argv], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}, check=False)
    code, before, after = map(int, done.stdout.split())
    assert code == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "its manifest.json is 95.4 MiB, more than a manifest may be (1 MiB)" in done.stderr
    assert (after - before) * 1024 < 100 * 2**20, (before, after)  # ru_maxrss is in KiB on Linux
    assert not (tmp_path / "a").exists()


def test_a_refused_merge_leaves_no_directory_it_made(dummy: tuple[Path, list[Member]], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Every cell refused (of another config) at ``out_dir=a/b/c``: exit 1, and neither ``a/b/c``
    nor its parents remain; an out_dir that was there stays, as it was."""
    config, members = dummy
    archive = _write(tmp_path / "same.tar.gz", members)
    code, out, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a' / 'b' / 'c'}", "base.model.dim=2",
                       "--merge", archive)
    assert code == 1 and out.splitlines()[-1].startswith("merge: 0 merged, 0 kept, 2 refused")
    assert not (tmp_path / "a").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    code, _, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'mine'}", "base.model.dim=2", "--merge", archive)
    assert code == 1 and sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_only_the_files_a_cell_carries_travel(dummy: tuple[Path, list[Member]], tmp_path: Path) -> None:
    """The archive side of the same rule: a stray file, a lock or a temporary in a run directory
    stays behind; per task, its own files travel (translations, lengthgen's eval.json)."""
    from posenc.tasks.lengthgen.spec import SPEC as LENGTHGEN
    from posenc.tasks.translation.spec import SPEC as TRANSLATION

    run = tmp_path / "run"
    (run / "translations").mkdir(parents=True)
    (run / "checkpoints" / "average").mkdir(parents=True)
    for name in ("results.json", "train.csv", ".posenc-run", ".posenc.lock", "notes.txt", "spm.model",
                 "translations/test.beam4.hyp", "translations/.test.beam4.hyp.1.tmp", "checkpoints/average/state.json"):
        (run / name).write_text("x")
    assert [p.relative_to(run).as_posix() for p in cell_files(run, TRANSLATION)] == [
        ".posenc-run", "results.json", "train.csv", "translations/test.beam4.hyp"]
    assert travelling_bound(LENGTHGEN, "eval.json") == 2**20 and travelling_bound(TRANSLATION, "eval.json") is None
    assert travelling_bound(TRANSLATION, "translations/test.beam4.hyp") == 16 * 2**20
    assert travelling_bound(TRANSLATION, "translations/valid.lp1.4.beam4.json") == 2**20


# ----------------------------------------------------------------------------- translation: scores rescored
@pytest.fixture(scope="module")
def translation(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Member]]:
    """A tiny translation cell trained "on the GPU machine" (toy data, 3 steps, α chosen among 0.6 and
    1 on the validation split) and its archive's members."""
    tmp = tmp_path_factory.mktemp("translation")
    config = write_experiment(tmp)
    spec = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump(dict(spec, tune_length_penalty=[0.6, 1.0], tune_length_penalty_max=1.0)))
    run_experiment(str(config))
    return config, _members(_archive_of(config, [Cell("vanilla", "ape", 1)], tmp / "cells.tar.gz"))


def _forged(members: list[Member], edit: Callable[[dict], None]) -> list[Member]:
    """``members`` with the results.json of the cell edited by ``edit``."""
    out = []
    for name, data, mode, kind in members:
        if name.endswith("/results.json"):
            results = json.loads(data)
            edit(results)
            data = json.dumps(results, indent=2).encode()
        out.append((name, data, mode, kind))
    return out


def test_a_forged_score_is_refused_by_rescoring(translation: tuple[Path, list[Member]], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A results.json with the right config but a test BLEU of 99.99 (or a chrF off by 0.5) is
    refused: the carried hypotheses, rescored against the references prepared here, give another
    score; nothing is left in the out_dir (the data prepared to rescore it included). The cell as
    it came merges, its scores recomputed."""
    config, members = translation
    stored = json.loads(next(d for n, d, _, _ in members if n.endswith("/results.json")))["scores"]["test"]
    here = tmp_path / "a" / "b"
    forgeries: list[tuple[str, Callable[[dict], None]]] = [
        ("BLEU 99.99", lambda r: r["scores"]["test"].update(bleu=99.99)),
        (f"chrF {stored['chrf'] + 0.5:.2f}", lambda r: r["scores"]["test"].update(chrf=stored["chrf"] + 0.5))]
    for what, edit in forgeries:
        archive = _write(tmp_path / "forged.tar.gz", _forged(members, edit))
        code, out, _ = cli(capsys, "experiment", config, f"out_dir={here}", "--merge", archive)
        lines = out.splitlines()
        assert code == 1 and lines[0].startswith(f"refused vanilla/ape/1: its scores do not hold here (test {what} is ")
        assert "from its translations/test.beam2.hyp against " in lines[0] and lines[0].endswith("test.tgt)")
        assert lines[-1] == "merge: 0 merged, 0 kept, 1 refused; report not regenerated (no cell merged)"
        assert not (tmp_path / "a").exists()
    code, out, err = cli(capsys, "experiment", config, f"out_dir={here}", "--merge",
                         _write(tmp_path / "ok.tar.gz", members))
    assert code == 0, err
    assert out.splitlines()[0] == (f"merged vanilla/ape/1: {here / 'vanilla' / 'ape' / 'seed1'} (trained on cpu; "
                                   "scores recomputed here)")


def test_a_forged_validation_sweep_is_refused_by_rescoring(translation: tuple[Path, list[Member]], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The validation BLEU of each α of the length-penalty search (which chose the α the test split
    was decoded with) is rescored from its carried hypotheses too."""
    config, members = translation
    names = [name for name, _, _, _ in members]
    assert any(n.endswith("/translations/valid.lp0.6.beam2.hyp") for n in names)
    assert any(n.endswith("/translations/valid.lp1.beam2.hyp") for n in names)
    archive = _write(tmp_path / "sweep.tar.gz", _forged(members, lambda r: r["length_penalty"]["sweep"].update({"1": 99.0})))
    code, out, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a'}", "--merge", archive)
    assert code == 1 and out.startswith("refused vanilla/ape/1: its scores do not hold here (valid (α 1) BLEU 99.00 is ")
    assert "from its translations/valid.lp1.beam2.hyp against " in out and not (tmp_path / "a").exists()


def test_a_score_without_its_hypotheses_is_refused(translation: tuple[Path, list[Member]], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config, members = translation
    cases = [([m for m in members if not m[0].endswith("/test.beam2.hyp")],
              "hypotheses translations/test.beam2.hyp are not in the archive"),
             (_forged(members, lambda r: r["scores"]["test"].update(hyp="../../results.json")),
              "names hypotheses '../../results.json'"),
             (_forged(members, lambda r: r["scores"]["test"].update(bleu="99")), "test BLEU is '99', not a number")]
    for i, (archive_members, why) in enumerate(cases):
        archive = _write(tmp_path / f"nohyp{i}.tar.gz", archive_members)
        code, out, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a'}", "--merge", archive)
        assert code == 1 and why in out.splitlines()[0], out
        assert not (tmp_path / "a").exists()


def test_a_cell_of_another_tokenizer_is_refused(translation: tuple[Path, list[Member]], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The cell's tokenizer identity must be the grid's (its committed SentencePiece model): one
    recorded by another model makes the cell stale, and a cell that records none is refused too."""
    config, members = translation
    other = _write(tmp_path / "other.tar.gz", _forged(members, lambda r: r["summary"].update(tokenizer="f" * 64)))
    code, out, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a'}", "--merge", other)
    assert code == 1 and "it trained with tokenizer 'fffffffffffffff...', the grid's data here are tokenized with " \
        in out.splitlines()[0], out
    assert not (tmp_path / "a").exists()
    none = _write(tmp_path / "none.tar.gz", _forged(members, lambda r: r["summary"].pop("tokenizer")))
    code, out, _ = cli(capsys, "experiment", config, f"out_dir={tmp_path / 'a'}", "--merge", none)
    assert code == 1 and "it trained with tokenizer (none recorded), the grid's data here are tokenized with " in out.splitlines()[0], out
    assert not (tmp_path / "a").exists()
