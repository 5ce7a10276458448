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
