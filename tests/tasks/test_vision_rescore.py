"""A vision cell's ``eval`` section says how its run is scored, not what it is: a change of it
rescores the stored run's final model (no training), a record of an older posenc (``eval`` inside
its fingerprint, no evaluation) is judged by what it recorded there, and a model or training
option is still another run."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from posenc.config import to_dict
from posenc.errors import ConfigError
from posenc.experiments.cell import results_record
from posenc.experiments.runner import load_grid, run_experiment
from posenc.runs.same_run import RunRecord, read_stored, same_run, scoring_of
from posenc.tasks.vision.config import VisionEvalConfig
from posenc.tasks.vision.task import VisionTask
from tests.helpers.committed import committed_grid
from tests.helpers.grids import results_file, verdict_now
from tests.tasks.test_vision import quadrant_images, tiny_cfg
from tests.vision.test_images import write_idx

ROOT = Path(__file__).resolve().parents[2]
ONE_MORE = ["base.eval.resolutions=[8,12,16,24]"]  # the grid's [8, 16, 24] and one more


def _grid_spec(tmp_path: Path) -> Path:
    """A one-cell vision grid (tiny ViT, 256 training and 200 test images of a square's quadrant, as
    Fashion-MNIST files) that averages its last two checkpoints, so its final model is no average."""
    root = tmp_path / "data"
    root.mkdir()
    for prefix, images in (("train", quadrant_images(256)), ("t10k", quadrant_images(200, seed=1))):
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images.images[:, 0].numpy())
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", images.labels.numpy())
    base = to_dict(tiny_cfg("sinusoidal-2d", max_epochs=2, save_every=4, average_last=2))
    base["data"] = {"root": str(root), "batch_size": 32}
    spec = tmp_path / "vision.yaml"
    spec.write_text(yaml.safe_dump({"task": "vision", "name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
                                    "methods": {"sin": {"model.position.name": "sinusoidal-2d"}}, "seeds": [0]}))
    return spec


def _files(run: Path) -> dict[str, int]:
    """Every file of the run but its results, with its modification time."""
    return {str(p.relative_to(run)): p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()
            and p.name != "results.json"}


def test_one_more_resolution_rescores_the_trained_model_without_training(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The trained cell judged with one more test resolution is rescored: the accuracies it had are
    the same (its final model, not the average), the new one is added, nothing is trained or moved."""
    spec = _grid_spec(tmp_path)
    run_experiment(str(spec))
    (cell,) = load_grid(str(spec)).cells()
    path = results_file(load_grid(str(spec)), cell)
    trained, files = json.loads(path.read_text(encoding="utf-8")), _files(path.parent)
    assert (path.parent / "checkpoints" / "average").is_dir()

    grid = load_grid(str(spec), ONE_MORE)
    verdict = verdict_now(grid, cell)
    assert (verdict.kind, verdict.keys) == ("rescore", ("eval.resolutions",))
    monkeypatch.setattr(VisionTask, "train", lambda *a: pytest.fail("a rescore trains nothing"))
    run_experiment(str(spec), ONE_MORE)

    rescored = json.loads(path.read_text(encoding="utf-8"))
    accuracy = rescored["metrics"]["accuracy"]
    assert list(accuracy) == ["8", "12", "16", "24"]
    assert {r: accuracy[r] for r in trained["metrics"]["accuracy"]} == trained["metrics"]["accuracy"]
    assert rescored["metrics"]["tta"] == trained["metrics"]["tta"]
    assert rescored["summary"] == trained["summary"] and _files(path.parent) == files  # steps and checkpoints kept
    assert rescored["record"]["evaluation"] == {"eval": to_dict(grid.run_config(cell).eval)}
    assert rescored["record"]["fingerprint"] == trained["record"]["fingerprint"]
    assert verdict_now(grid, cell).kind == "fresh" and verdict_now(load_grid(str(spec)), cell).kind == "rescore"


def test_a_cell_that_cannot_be_rescored_is_stale_and_rerun_stale_retrains_it(tmp_path: Path) -> None:
    """A cell whose results are not of its latest checkpoint, or whose checkpoints are gone (a
    committed grid's copy, a cell merged from a GPU window), cannot be rescored: the plan names it
    stale before anything runs, its results stay as they were, and ``--rerun-stale`` retrains it."""
    spec = _grid_spec(tmp_path)
    run_experiment(str(spec))
    (cell,) = load_grid(str(spec)).cells()
    path = results_file(load_grid(str(spec)), cell)
    results = json.loads(path.read_text(encoding="utf-8"))
    results["summary"]["steps"] -= 1
    path.write_text(json.dumps(results), encoding="utf-8")
    before = path.read_bytes()
    verdict = verdict_now(load_grid(str(spec), ONE_MORE), cell)
    assert verdict.kind == "stale" and "its latest checkpoint is at step 16, its results at 15" in verdict.detail
    with pytest.raises(ConfigError, match=r"cannot be rescored: .* rerun with --rerun-stale"):
        run_experiment(str(spec), ONE_MORE)
    assert path.read_bytes() == before
    shutil.rmtree(path.parent / "checkpoints")
    verdict = verdict_now(load_grid(str(spec), ONE_MORE), cell)
    assert verdict.kind == "stale" and verdict.detail.endswith("cannot be rescored: no checkpoint of the trained run")
    assert verdict_now(load_grid(str(spec)), cell).kind == "fresh"  # under its own eval it stands as it is
    run_experiment(str(spec), ONE_MORE, rerun_stale=True)
    retrained = json.loads(path.read_text(encoding="utf-8"))
    assert list(retrained["metrics"]["accuracy"]) == ["8", "12", "16", "24"] and retrained["summary"]["steps"] == 16
    assert verdict_now(load_grid(str(spec), ONE_MORE), cell).kind == "fresh"


def test_an_eval_option_added_with_the_earlier_behaviour_as_default_rescores_nothing() -> None:
    """A stored evaluation is read through today's classes: an option it lacks takes today's
    default (the stand-in: ``batch_size``, at its default, dropped from what was stored), in a record of today's
    form and in one of an older posenc; a value other than the default is a rescore."""
    cfg = tiny_cfg()
    now = RunRecord.of(cfg, scoring_of(cfg))
    assert cfg.eval.batch_size == VisionEvalConfig().batch_size
    lacking = {k: v for k, v in to_dict(cfg.eval).items() if k != "batch_size"}
    for stored in (replace(now, evaluation={"eval": lacking}),
                   RunRecord({**now.fingerprint, "eval": lacking}, now.extension)):
        assert same_run(stored, cfg, scoring_of(cfg)).kind == "fresh"
        other = replace(cfg, eval=replace(cfg.eval, batch_size=7))
        verdict = same_run(stored, other, scoring_of(other))
        assert (verdict.kind, verdict.keys) == ("rescore", ("eval.batch_size",))


def test_upgraded_results_of_an_older_posenc_are_fresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A committed cell's results.json as a posenc before records wrote it (its whole config, no
    record) comes back from ``posenc upgrade`` judged fresh: its eval recorded as its evaluation."""
    from posenc.tasks.vision.config import VisionConfig, VisionExperimentConfig
    from tests.helpers.tiny import cli

    committed = ROOT / "docs/results/fashion_mnist_small"
    grid = committed_grid(VisionExperimentConfig, "vision/fashion_mnist_small", committed)
    cell = grid.cells()[0]
    source = results_file(grid, cell)
    copy = tmp_path / "results" / source.parent.relative_to(committed)
    shutil.copytree(source.parent, copy)
    results = json.loads(source.read_text(encoding="utf-8"))
    whole = to_dict(read_stored(VisionConfig, results_record(results).config))
    older = {("config" if k == "record" else k): ({k: v for k, v in whole.items() if k != "out_dir"}
                                                  if k == "record" else v) for k, v in results.items()}
    (copy / "results.json").write_text(json.dumps(older, indent=2), encoding="utf-8")
    code, _, err = cli(capsys, "upgrade", str(tmp_path / "results"))
    assert code == 0, err
    upgraded = json.loads((copy / "results.json").read_text(encoding="utf-8"))
    cfg = grid.run_config(cell)
    assert upgraded["record"]["evaluation"] == scoring_of(cfg)
    assert same_run(results_record(upgraded), cfg, scoring_of(cfg)).kind == "fresh"


def test_a_record_from_before_is_judged_by_the_eval_its_fingerprint_holds() -> None:
    cfg = tiny_cfg()
    now = RunRecord.of(cfg)
    assert "eval" not in now.fingerprint  # eval is how the run is scored, not what it is
    older = RunRecord({**now.fingerprint, "eval": to_dict(cfg.eval)}, now.extension)  # an older posenc's record
    assert older.evaluation is None
    assert same_run(older, cfg, scoring_of(cfg)).kind == "fresh"
    other = replace(cfg, eval=replace(cfg.eval, resolutions=[8, 16, 24, 32]))
    verdict = same_run(older, other, scoring_of(other))
    assert (verdict.kind, verdict.keys) == ("rescore", ("eval.resolutions",))


def test_a_committed_cell_from_before_is_fresh_and_rescored_by_one_more_resolution() -> None:
    from posenc.tasks.vision.config import VisionExperimentConfig

    grid = committed_grid(VisionExperimentConfig, "vision/fashion_mnist_small", ROOT / "docs/results/fashion_mnist_small")
    cell = grid.cells()[0]
    results = json.loads(results_file(grid, cell).read_text(encoding="utf-8"))
    stored, cfg = results_record(results), grid.run_config(cell)
    assert stored.evaluation is None and "eval" in stored.fingerprint  # written before eval left the fingerprint
    assert same_run(stored, cfg, scoring_of(cfg)).kind == "fresh"
    more = replace(cfg, eval=replace(cfg.eval, resolutions=[*cfg.eval.resolutions, 56]))
    assert same_run(stored, more, scoring_of(more)).kind == "rescore"


def test_a_model_or_training_option_is_still_another_run(tmp_path: Path) -> None:
    spec = _grid_spec(tmp_path)
    run_experiment(str(spec))
    (cell,) = load_grid(str(spec)).cells()
    for changed, key in (("base.model.d_model=32", "model.d_model"), ("base.train.lr=0.01", "train.lr")):
        verdict = verdict_now(load_grid(str(spec), [changed, *ONE_MORE]), cell)
        assert (verdict.kind, verdict.keys) == ("stale", (key,))
    with pytest.raises(ConfigError, match="stale results .* rerun with --rerun-stale"):
        run_experiment(str(spec), ["base.train.lr=0.01"])
