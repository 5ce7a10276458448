"""Every methods grid (vision, speech, lengthgen, a user's task) judges a finished cell by the
record its results.json holds (experiments/cell.recorded_verdict), not by a config.yaml beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from posenc.config import to_dict
from posenc.errors import RunDirError
from posenc.experiments.cell import recorded_verdict
from posenc.runs.same_run import RunRecord


@dataclass
class Run:
    width: int = 4
    out_dir: str = ""


def _record(cfg: object) -> dict:
    """What a cell's results.json holds: the run's record, as in its fingerprint.json."""
    return {"record": RunRecord.of(cfg).to_dict()}


def test_recorded_config_decides_freshness(tmp_path: Path) -> None:
    cfg = Run(out_dir=str(tmp_path / "a"))
    results = {**_record(cfg), "metrics": {}}
    assert "out_dir" not in json.dumps(results)
    assert recorded_verdict(replace(cfg, out_dir=str(tmp_path / "b")), results).kind == "fresh"
    stale = recorded_verdict(replace(cfg, width=8), results)
    assert stale.kind == "stale" and "width (4 -> 8)" in stale.detail
    assert recorded_verdict(cfg, None) is None  # nothing run yet


def test_results_without_a_record_are_never_reused(tmp_path: Path) -> None:
    """Results that hold no record (an older posenc's whole ``config``, or nothing) are refused in
    one line naming the file and ``posenc upgrade``: never silently reused, never judged stale."""
    cfg = Run(out_dir=str(tmp_path / "a"))
    for results in ({"metrics": {}}, {"config": {k: v for k, v in to_dict(cfg).items() if k != "out_dir"}}):
        with pytest.raises(RunDirError, match=r"a/results\.json holds no run record .*`posenc upgrade DIR`"):
            recorded_verdict(cfg, results)


@dataclass
class Train:
    lr: float = 0.1
    device: str = "cpu"
    num_threads: int = 0


@dataclass
class TrainedRun:
    train: Train
    out_dir: str = ""


def test_where_a_cell_trained_never_makes_it_stale(tmp_path: Path) -> None:
    """A cell trained on a GPU with one thread answers the CPU config (train.device and
    train.num_threads are placement keys); any other train key still makes it stale, and a run
    started elsewhere resumes here."""
    cfg = TrainedRun(Train(), out_dir=str(tmp_path / "run"))
    gpu = TrainedRun(Train(device="cuda", num_threads=1), out_dir=cfg.out_dir)
    assert recorded_verdict(cfg, _record(gpu)).kind == "fresh"
    other = recorded_verdict(cfg, _record(replace(gpu, train=Train(lr=0.2, device="cuda"))))
    assert other.kind == "stale" and "lr (0.2 -> 0.1)" in other.detail
    Path(cfg.out_dir).mkdir()
    started = Path(cfg.out_dir) / "fingerprint.json"  # the record of a run started, not finished
    started.write_text(json.dumps(_record(gpu)["record"]))
    assert recorded_verdict(cfg, None) is None  # started on the GPU: resumable, not stale
    started.write_text(json.dumps(_record(replace(gpu, train=Train(lr=0.3)))["record"]))
    assert recorded_verdict(cfg, None).kind == "stale"
