"""Every methods grid (vision, speech, lengthgen, a user's task) judges a finished cell by the
config its results.json records (tasks/grid.recorded_verdict), not by a config.yaml beside it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from posenc.tasks.grid import config_record, recorded_verdict


@dataclass
class Run:
    width: int = 4
    out_dir: str = ""


def test_recorded_config_decides_freshness(tmp_path: Path) -> None:
    cfg = Run(out_dir=str(tmp_path / "a"))
    results = {"config": config_record(cfg), "metrics": {}}
    assert "out_dir" not in results["config"]
    assert recorded_verdict(replace(cfg, out_dir=str(tmp_path / "b")), results).kind == "fresh"
    stale = recorded_verdict(replace(cfg, width=8), results)
    assert stale.kind == "stale" and "width (4 -> 8)" in stale.detail
    assert recorded_verdict(cfg, {"metrics": {}}).kind == "stale"  # no record: never silently reused
    assert recorded_verdict(cfg, None) is None  # nothing run yet


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
    assert recorded_verdict(cfg, {"config": config_record(gpu)}).kind == "fresh"
    other = recorded_verdict(cfg, {"config": config_record(replace(gpu, train=Train(lr=0.2, device="cuda")))})
    assert other.kind == "stale" and "lr (0.2 -> 0.1)" in other.detail
    Path(cfg.out_dir).mkdir()
    (Path(cfg.out_dir) / "config.yaml").write_text("train: {device: cuda, num_threads: 1}\n")
    assert recorded_verdict(cfg, None) is None  # started on the GPU: resumable, not stale
    (Path(cfg.out_dir) / "config.yaml").write_text("train: {lr: 0.3}\n")
    assert recorded_verdict(cfg, None).kind == "stale"
