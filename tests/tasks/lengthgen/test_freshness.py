"""A lengthgen results.json judges its own freshness: it records the run config it was trained
with, so results copied or committed elsewhere (docs/results/lengthgen_cpu) are reused only while
the grid's config for that cell is unchanged (issue 17: a changed config once silently reused
results trained with another)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config, to_dict
from posenc.errors import RunDirError
from posenc.runs.same_run import RunRecord, read_stored, with_placement_of
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, run_config
from posenc.tasks.lengthgen.task import TASK

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "src" / "posenc" / "configs" / "experiments" / "lengthgen_cpu.yaml"
COMMITTED = ROOT / "docs" / "results" / "lengthgen_cpu"


def _exp(out_dir: Path) -> LengthgenExperimentConfig:
    return replace(load_config(LengthgenExperimentConfig, SHIPPED), out_dir=str(out_dir))


def _results(cfg) -> dict:
    return {"task": cfg.data.task, "method": "ape", "seed": cfg.train.seed, "record": RunRecord.of(cfg).to_dict(),
            "summary": {}, "metrics": {}}


def test_results_of_the_same_config_are_fresh_wherever_they_lie(tmp_path: Path) -> None:
    exp = _exp(tmp_path / "a")
    cfg = run_config(exp, "parity", "ape", 1)
    moved = _exp(tmp_path / "elsewhere")  # the record has no out_dir
    assert TASK.verdict(TASK.experiment(moved), ("parity", "ape", 1), _results(cfg)).kind == "fresh"


def test_results_of_another_config_are_stale_and_name_the_key(tmp_path: Path) -> None:
    exp = _exp(tmp_path)
    cfg = run_config(exp, "parity", "ape", 1)
    other = replace(cfg, model=replace(cfg.model, layers=cfg.model.layers + 1))
    v = TASK.verdict(TASK.experiment(exp), ("parity", "ape", 1), _results(other))
    assert v.kind == "stale" and "model.layers" in v.detail


def test_results_without_a_record_are_refused_naming_the_upgrade(tmp_path: Path) -> None:
    """Results an older posenc wrote (its whole ``config``, no ``record``) are not read: one line
    tells the user to run ``posenc upgrade``, which rewrites them."""
    exp = _exp(tmp_path)
    cfg = run_config(exp, "parity", "ape", 1)
    results = {"task": "parity", "method": "ape", "seed": 1, "config": to_dict(cfg), "summary": {}, "metrics": {}}
    with pytest.raises(RunDirError, match=r"results\.json holds no run record \(written by an older posenc: "
                                          r"`posenc upgrade DIR`") as err:
        TASK.verdict(TASK.experiment(exp), ("parity", "ape", 1), results)
    assert "\n" not in str(err.value)


def test_committed_results_match_the_shipped_config_or_are_stale(tmp_path: Path) -> None:
    """Every committed run's recorded config is the shipped grid's config for its cell, unless the
    cell's config changed since (then stale, so `posenc experiment` retrains it, never reuses it)."""
    exp = _exp(COMMITTED)
    kinds = {}
    for path in sorted(COMMITTED.glob("*/*/seed*/results.json")):
        res = json.loads(path.read_text(encoding="utf-8"))
        cell = (res["task"], res["method"], res["seed"])
        kinds[cell] = TASK.verdict(TASK.experiment(exp), cell, res).kind
        cfg = run_config(exp, *cell)  # the record read with today's defaults, placed as today's config
        saved = with_placement_of(read_stored(LengthgenConfig, RunRecord.read(res["record"]).config, cfg.out_dir), cfg)
        same = RunRecord.of(saved) == RunRecord.of(cfg)
        assert kinds[cell] == ("fresh" if same else "stale"), cell
    assert kinds, "no committed lengthgen results found"
    # the whole grid (4 tasks x 9 methods x 3 seeds) is committed and answers today's config: the
    # parity cells were re-run with patience 25, copy seeds 2-3 and parity on a lent GPU (fp32)
    assert len(kinds) == 6 * 9 * 3 and set(kinds.values()) == {"fresh"}


def test_committed_run_dirs_are_marked_as_posenc_runs() -> None:
    """A stale committed cell is retrained in place after `cp -r docs/results/lengthgen_cpu runs/`
    only if posenc recognises the directory as its own run (never-destroy rule)."""
    from posenc.runs.ownership import dir_kind

    dirs = [p.parent for p in COMMITTED.glob("*/*/seed*/results.json")]
    assert dirs and all(dir_kind(d) == "run" for d in dirs)
