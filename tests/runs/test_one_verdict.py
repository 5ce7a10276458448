"""One record, one verdict: a run directory, a grid cell and the checkpoint a run
resumes from are judged by the same function, :func:`posenc.runs.same_run.same_run`, on the same
:class:`~posenc.runs.same_run.RunRecord`; committed runs keep their fingerprints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import posenc.experiments.cell as cell_module
import posenc.runs.run as run_module
import posenc.runs.same_run as rules
import posenc.tasks.translation.load as translation_load
import posenc.tasks.translation.task as translation_task
from posenc.config import load_config, load_yaml
from posenc.errors import ConfigError
from posenc.runs.differences import ABSENT, config_differences
from posenc.runs.fingerprint import fingerprint
from posenc.runs.run import Run, write_run_files
from posenc.runs.same_run import RunRecord
from posenc.runs.spec import spec_of
from posenc.tasks.translation.config import located_config
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.freshness import evaluation_record
from posenc.training.checkpoint import checkpoint_name, save_checkpoint
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "results"
CALLERS = (run_module, cell_module, translation_load)


def _cfg(tmp_path: Path, **train: Any) -> tuple[Any, ExperimentConfig]:
    exp = load_config(ExperimentConfig, write_experiment(tmp_path, train=train or None))
    return grid_of_config(exp).run_config(("vanilla", "ape", 1)), exp


def _run_dir(cfg: Any, saved: Any) -> Path:
    """``cfg.out_dir`` as a run of ``saved`` left it: its files and one checkpoint, all recording ``saved``."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True)
    write_run_files(saved, out)
    state = {"kind": "train", "step": 3, "record": RunRecord.of(saved).to_dict()}
    save_checkpoint(out / "checkpoints" / checkpoint_name(3), {}, state=state)
    return out


def test_every_caller_asks_the_one_function() -> None:
    assert all(module.same_run is rules.same_run for module in CALLERS)


@pytest.mark.parametrize(("train", "kind"), [({}, "fresh"), ({"max_steps": 9}, "extend"), ({"lr": 0.01}, "stale")])
def test_run_dir_grid_cell_and_checkpoint_get_one_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          train: dict, kind: str) -> None:
    """The same change judged on the three paths: each asks same_run, and each answer is the same."""
    saved, exp = _cfg(tmp_path / "saved")
    cfg, exp_now = _cfg(tmp_path / "now", **train)
    calls: list[tuple[str, str]] = []

    def spy(stored: RunRecord | None, now: Any, evaluation: Any = None) -> rules.Verdict:
        verdict = rules.same_run(stored, now, evaluation)
        calls.append((verdict.kind, verdict.detail))
        return verdict

    for module in CALLERS:
        monkeypatch.setattr(module, "same_run", spy)
    _run_dir(cfg, saved)
    if kind == "stale":
        with pytest.raises(ConfigError, match="train.lr"), Run.open(cfg, cfg.out_dir, resume=True):
            pass
        assert len(calls) == 1  # the run's record is stale: its checkpoint is not asked
    else:
        with Run.open(cfg, cfg.out_dir, resume=True) as run:
            assert run.continues and run.checkpoint_path == Path(cfg.out_dir) / "checkpoints" / checkpoint_name(3)
        assert len(calls) == 1  # the run directory's record; its checkpoint records that run: not judged again
    results = {"record": RunRecord.of(saved, evaluation_record(saved, exp.splits)).to_dict(), "summary": {"steps": 3}}
    cell = translation_task.TASK.verdict(translation_task.TASK.experiment(exp_now), ("vanilla", "ape", 1), results)
    grid_cell = cell_module.recorded_verdict(cfg, {"record": RunRecord.of(saved).to_dict(), "summary": {"steps": 3}})
    assert cell is not None and grid_cell is not None and cell.kind == grid_cell.kind == kind
    assert {k for k, _ in calls} == {kind} and len(set(calls)) == 1  # one verdict, word for word


@pytest.mark.parametrize("judged", ["the run's", "another run's"])
def test_a_verdict_handed_down_stands_for_the_record_it_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              judged: str) -> None:
    """Run.open with a caller's verdict (a grid cell's) judges nothing more when that verdict is on
    the run's own record; a verdict on another record is no answer for this run: it is judged."""
    saved, _ = _cfg(tmp_path / "saved")
    other, _ = _cfg(tmp_path / "other", lr=0.01)
    cfg, _ = _cfg(tmp_path / "now", max_steps=9)
    _run_dir(cfg, saved)
    given = rules.same_run(RunRecord.read(RunRecord.of(saved if judged == "the run's" else other).to_dict(), 3), cfg)
    calls: list[str] = []
    monkeypatch.setattr(run_module, "same_run", lambda *a: calls.append("judged") or rules.same_run(*a))
    with Run.open(cfg, cfg.out_dir, resume=True, verdict=given) as run:
        assert run.verdict is not None and run.verdict.kind == "extend"
    assert calls == ([] if judged == "the run's" else ["judged"])


def test_a_checkpoint_of_another_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    cfg, _ = _cfg(tmp_path)
    other, _ = _cfg(tmp_path / "other", lr=0.01)
    out = _run_dir(cfg, cfg)
    ckpt = out / "checkpoints" / checkpoint_name(3)
    state = json.loads((ckpt / "state.json").read_text())
    state["record"] = RunRecord.of(other).to_dict()
    (ckpt / "state.json").write_text(json.dumps(state))
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ConfigError, match=r"its checkpoint ckpt_00000003 is another run's \(train.lr"), \
            Run.open(cfg, out, resume=True):
        pass
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize(("model", "gpu", "refused"),
                         [({}, False, False), ({}, True, False), ({"d_ff": 48}, False, True)])
def test_a_loaded_checkpoint_is_judged_by_the_one_rule(tmp_path: Path, model: dict, gpu: bool, refused: bool) -> None:
    """``load_run``/``posenc average``: the run's record against that record with the checkpoint's
    sections, judged by same_run. Only those sections can differ: a run trained where
    ``precision: auto`` meant bf16 (its record says so) still loads here."""
    from dataclasses import replace

    from posenc.config import to_dict
    from posenc.errors import CheckpointError

    cfg, _ = _cfg(tmp_path)
    out = _run_dir(cfg, cfg)
    if gpu:  # the record a GPU machine writes for this config
        record = json.loads((out / "fingerprint.json").read_text())
        record["fingerprint"]["train"]["precision"] = "bf16"
        (out / "fingerprint.json").write_text(json.dumps(record))
    sections = {"arch": cfg.arch, "data": to_dict(cfg.data), "model": to_dict(replace(cfg.model, **model))}
    if refused:
        with pytest.raises(CheckpointError, match=r"ckpt: a checkpoint of another model .*model.d_ff \(\d+ -> 48\)"):
            translation_load.check_checkpoint_run(out, sections, Path("ckpt"))
    else:
        translation_load.check_checkpoint_run(out, sections, Path("ckpt"))


@pytest.mark.parametrize("train", [{}, {"device": "cpu", "num_threads": 2}, {"max_steps": 9}, {"lr": 0.01}])
def test_a_record_equal_to_todays_is_judged_as_reading_it_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                train: dict) -> None:
    """same_run needs no reading of a stored record that already equals today's (placement keys
    and unresolved derived keys aside): its verdict is the one reading it gives."""
    from dataclasses import replace

    saved, _ = _cfg(tmp_path / "saved")
    cfg, _ = _cfg(tmp_path / "now", **train)
    resolved = replace(saved, model=replace(saved.model, vocab_size=40))  # the data filled in at setup
    for stored in (RunRecord.of(saved), RunRecord.of(resolved)):
        quick = rules.same_run(stored, cfg)
        with monkeypatch.context() as patched:
            patched.setattr(rules, "_differences", lambda *a: [("read", 0, 1)])  # always read the record
            assert rules.same_run(stored, cfg) == quick


def _committed_runs() -> list[Path]:
    return sorted(p.parent for p in COMMITTED.rglob("fingerprint.json") if (p.parent / "config.yaml").is_file())


def _config_type(run: Path) -> type:
    """The run config class of a committed run, by its grid's directory (translation's by default)."""
    from posenc.tasks.lengthgen.config import LengthgenConfig
    from posenc.tasks.speech.config import SpeechConfig
    from posenc.tasks.translation.config import RunConfig
    from posenc.tasks.vision.config import VisionConfig

    grid = run.relative_to(COMMITTED).parts[0]
    if grid.startswith("lengthgen"):
        return LengthgenConfig
    if grid.startswith("fashion_mnist"):  # fashion_mnist_small, fashion_mnist_converged
        return VisionConfig
    if grid.startswith("fsdd"):  # fsdd_small, fsdd_converged
        return SpeechConfig
    return RunConfig


def test_no_committed_fingerprint_changes() -> None:
    """Today's fingerprint of every committed run's config.yaml is the stored one, read by the one
    adapter (RunRecord.read), but for ``precision: auto``: today's fingerprint keeps ``auto`` (the same
    on every machine) where the stored one holds what it resolved to on the CPU that trained it,
    fp32, and the two are judged the same run; and but for a section its task now declares a scoring
    section (vision's ``eval``), which the stored one still holds and is judged as its evaluation. The
    oldest runs (multi30k_cpu) differ only where they are older too: they stored every method's
    position block and lack options added since (their defaults are judged fresh)."""
    runs = _committed_runs()
    assert len(runs) >= 300
    resolved = 0
    for run in runs:
        cfg = located_config(load_yaml(run / "config.yaml"), run) if _config_type(run).__name__ == "RunConfig" \
            else rules.read_stored(_config_type(run), load_yaml(run / "config.yaml"))
        stored = RunRecord.read(json.loads((run / "fingerprint.json").read_text(encoding="utf-8")))
        diffs = config_differences(stored.fingerprint, fingerprint(cfg))
        auto = [d for d in diffs if d == ("train.precision", "fp32", "auto")]
        resolved += len(auto)
        sections = spec_of(cfg).scoring_sections
        scoring = [d for d in diffs if d[0].split(".")[0] in sections and d[2] is ABSENT]
        if scoring:  # held by the stored fingerprint, it is the stored record's evaluation
            assert rules.as_scored(stored, cfg).evaluation == rules.scoring_of(cfg), run
        diffs = [d for d in diffs if d not in auto and d not in scoring]
        active = set(cfg.model.position.name.split("+"))

        def unused_block(k: str, now: object) -> bool:
            return k.startswith("model.position.") and now is ABSENT and k.split(".")[2] not in active

        assert all(was is ABSENT or unused_block(k, now) for k, was, now in diffs), (run, diffs[:3])
        assert not diffs or run.relative_to(COMMITTED).parts[0] == "multi30k_cpu", run
        assert rules.same_run(stored, cfg).kind == "fresh", run  # and every one still resumes
    assert resolved >= 100  # the committed runs whose config says auto


def test_every_committed_record_gets_the_verdict_reading_it_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """same_run's shortcut for a record equal to today's changes no committed run's verdict."""
    for run in _committed_runs():
        cfg = located_config(load_yaml(run / "config.yaml"), run) if _config_type(run).__name__ == "RunConfig" \
            else rules.read_stored(_config_type(run), load_yaml(run / "config.yaml"))
        stored = RunRecord.read(json.loads((run / "fingerprint.json").read_text(encoding="utf-8")))
        quick = rules.same_run(stored, cfg)
        with monkeypatch.context() as patched:
            patched.setattr(rules, "_differences", lambda *a: [("read", 0, 1)])  # always read the record
            assert rules.same_run(stored, cfg) == quick, run
