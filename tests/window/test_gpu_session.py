"""The dry run of a GPU window on the CPU: ``benchmarks/gpu_session.sh pack``, then ``all`` with the
device set to cpu and a tiny translation grid in the queue, then ``posenc experiment --merge`` of
its archive into another out_dir: the whole path a GPU window takes, so a window is never spent
debugging the script.

The deadline's proof is the gate's decision, not the machine's speed: the session has 10 minutes,
which the first entry's cells (recorded at 3 s each) fit on any machine however loaded, and the
second entry's (recorded at 30 min) never do, so they are refused before they start, whatever the
time left when the queue reaches them; the session itself ends as soon as the queue is through."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import cli

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_session.sh"


def _session(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The tiny grid (train.device auto: cpu here), its queue and the script's environment."""
    exp = write_experiment(tmp_path, methods=("ape", "shape"), seeds=(1, 2), train={"device": "auto"})
    spec = yaml.safe_load(exp.read_text())
    spec["out_dir"] = str(tmp_path / "gpu" / "exp")  # the GPU machine's tree
    exp.write_text(yaml.safe_dump(spec, sort_keys=False))
    queue = {"entries": [
        # placed on the machine's device: a placement key, so the cells merge into the grid as it is here
        {"experiment": str(exp), "overrides": ["base.train.device=cpu"], "seeds": [1], "cell_minutes": 0.05},
        {"experiment": str(exp), "seeds": [2], "cell_minutes": 30},  # cannot finish before the deadline
    ]}
    (tmp_path / "queue.yaml").write_text(yaml.safe_dump(queue))
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    env = dict(os.environ, GPU_SESSION_DEVICE="cpu", GPU_SESSION_QUEUE=str(tmp_path / "queue.yaml"),
               GPU_SESSION_PAYLOAD=str(tmp_path / "payload"), GPU_SESSION_TESTS=f"--noconftest {tmp_path / 'test_ok.py'}",
               CUDA_TESTS_LIMIT="30", LOOP_STEPS="2", LOOP_COMPILE="off", LOOP_EXPERIMENT=str(exp),
               GPU_SESSION_ENV_LIMIT="300",  # step 1 imports torch: on a loaded machine it may take a minute
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))  # its python3
    return exp, env


def _script(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_dry_run_packs_runs_to_the_deadline_archives_and_merges(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    exp, env = _session(tmp_path)
    packed = _script(env, "pack", str(tmp_path / "payload"))
    assert packed.returncode == 0, packed.stderr
    assert "packed 1 prepared data directories" in packed.stdout
    shutil.rmtree(tmp_path / "gpu" / "exp" / "data")  # the GPU machine prepares nothing: the payload brings it

    out = tmp_path / "out"
    run = _script(env, "all", str(out), "10")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = (out / "summary.txt").read_text().splitlines()
    assert [line.split("]")[0] + "]" for line in lines] == [
        "[1/5 environment]", "[2/5 tests]", "[3/5 step]", "[4/5 grids]", "[5/5 archive]"], lines
    assert "cpu, torch" in lines[0] and "posenc imports" in lines[0]
    assert lines[1] == "[2/5 tests] 1 tests: 1 passed, 0 failed, 0 errors, 0 skipped"
    assert lines[2].startswith("[3/5 step] eager-fp32 ") and "upd/s (×1.00)" in lines[2]
    assert lines[3].startswith("[4/5 grids] queue: 2 cells finished, 0 failed or cut, 2 not started (deadline)")
    queue_log = (out / "queue.log").read_text()
    assert "payload: placed 1 prepared data directories, kept 0 already here" in queue_log
    assert "[seeds 1]: 2 cells: 0 committed, 2 finished, 0 failed or cut" in queue_log
    refused = re.search(r"\[seeds 2\]: 2 cells: 0 committed, 0 finished, 0 failed or cut, 2 not started \(a cell "
                        r"needs ~30m00s \(recorded\), (\d+)m(\d\d)s left\)", queue_log)
    assert refused and 0 < int(refused[1]) * 60 + int(refused[2]) < 30 * 60, queue_log  # refused by the gate
    assert not (tmp_path / "gpu" / "exp" / "vanilla" / "ape" / "seed2").exists()
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).stat().st_size <= 16 * 2**20 for f in files), files
    assert {"summary.txt", "cuda_tests.xml", "train_loop.json", "cells.tar.gz", "queue.log"} <= set(files)

    with tarfile.open(out / "cells.tar.gz") as tar:
        names = tar.getnames()
        (grid,) = json.load(tar.extractfile("manifest.json"))["grids"]
    assert sorted((c["method"], c["seed"]) for c in grid["cells"]) == [("ape", 1), ("shape", 1)]  # as they finished
    assert "grid0/cells/vanilla/ape/seed1/results.json" in names and "grid0/logs/vanilla-shape-seed1.log" in names
    assert not [n for n in names if "/checkpoints/" in n or n.endswith(".safetensors")]
    assert not [n for n in names if "/seed2/" in n]
    assert lines[4].endswith("(0.00 MiB): tiny: 2 cells; OUT holds 7 files")

    here = tmp_path / "here" / "exp"
    code, merged, err = cli(capsys, "experiment", exp, f"out_dir={here}", "--merge", out / "cells.tar.gz")
    assert code == 0, err
    assert merged.splitlines()[-1] == f"merge: 2 merged, 0 kept, 0 refused; report: {here / 'report' / 'README.md'}"
    assert "| cpu | 2 | vanilla/ape/seed1, vanilla/shape/seed1 |" in (here / "report" / "README.md").read_text()


def test_window_refuses_minutes_under_the_sessions_minimum() -> None:
    """``window N``: N under the session's minimum (no second left for a cell under ``all N``; zero and
    negative N too) or not a number up to a day is one line, exit 2; from the minimum on, a cell has
    at least one second and more minutes never give it less."""
    def window(minutes: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), "window", minutes], cwd=REPO, capture_output=True, text=True,
                              timeout=60)

    for minutes in ("-5", "0", "1", "x", "nan", "1e30"):
        done = window(minutes)
        assert done.returncode == 2 and done.stdout == "", (minutes, done)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    low = int(re.search(r"minimum of (\d+) s", window("0").stderr).group(1))
    assert window(str((low - 1) / 60)).returncode == 2
    cells = []
    for seconds in (low, low + 1, low + 60, 12 * 60):
        done = window(str(seconds / 60))
        assert done.returncode == 0, done
        cells.append(int(re.match(r"all \S+: (-?\d+) s for a cell", done.stdout).group(1)))
    assert cells[0] >= 1 and cells == sorted(cells)
