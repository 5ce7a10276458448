"""``posenc experiment --report-only``: a grid that spans sessions is reported from the runs that
are done and fresh; nothing trains, nothing is cleared, the runs left out are named, and a
translation setting's analyses compare only the methods and seeds that are done."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import assert_one_line_error, cli


def _dummy(tmp_path: Path) -> Path:
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4}},
           "settings": {"plain": {}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1]}
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def test_report_only_trains_nothing_and_names_the_runs_left_out(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _dummy(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    root = tmp_path / "exp" / "plain"
    done = {m: (root / m / "seed1" / "results.json").read_text() for m in ("bias", "nobias")}
    code, out, _ = cli(capsys, "experiment", path, "seeds=[1,2]", "--report-only")
    assert code == 0
    assert "report only: 2 of 4 runs left out (not trained or not fresh): plain/bias/2, plain/nobias/2" in out
    assert not (root / "bias" / "seed2").exists() and not (root / "nobias" / "seed2").exists()  # nothing trained
    report = (tmp_path / "exp" / "report" / "README.md").read_text(encoding="utf-8")
    assert "| plain | bias | 1 |" in report and "| plain | bias | 2 |" not in report
    assert report.rstrip().endswith("## Runs left out of this report (`--report-only`)\n\n2 of 4 runs are not trained "
                                    "or not fresh: plain/bias/2, plain/nobias/2.")
    # a stale run is named as stale and kept as it was (not cleared as --rerun-stale would); with no
    # fresh run at all there is nothing to report
    code, _, err = cli(capsys, "experiment", path, "base.model.dim=2", "--report-only")
    assert_one_line_error(code, err, "--report-only: none of the 2 runs of dummy is done and fresh")
    assert {m: (root / m / "seed1" / "results.json").read_text() for m in done} == done
    code, _, err = cli(capsys, "experiment", path, "--report-only", "--rerun-stale")
    assert_one_line_error(code, err, "drop --rerun-stale")


def test_partial_view_of_a_grid_with_a_selection_stage(tmp_path: Path) -> None:
    """The selected method not trained yet: the partial view keeps the methods with runs (the
    selection block, already applied, is not re-validated against them)."""
    from posenc.config import load_config
    from posenc.tasks.translation.experiment import ExperimentConfig
    from posenc.tasks.translation.report import done_part

    path = write_experiment(tmp_path, methods=("ape", "shape"), seeds=(1, 2))
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["selection"] = {"key": "model.position.max_shift", "values": [1, 8], "method": "shape", "seeds": [1]}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    exp = load_config(ExperimentConfig, path)
    results = [{"setting": "vanilla", "method": "ape", "seed": s} for s in (1, 2)]
    part, why = done_part(exp, "vanilla", results)
    assert part is not None and list(part.methods) == ["ape"] and part.seeds == [1, 2] and "Partial grid" in why
    assert done_part(exp, "vanilla", results[:0] + [{"setting": "vanilla", "method": "shape", "seed": 1}])[0] is None


def test_a_method_missing_seeds_waits_rather_than_cutting_the_others_seeds(tmp_path: Path) -> None:
    """With the baseline on every seed, a method done on one seed of three is left out of the
    partial view (named as waiting) instead of cutting every comparison down to that seed; with
    the baseline itself incomplete, the view keeps the seeds every method has."""
    from posenc.config import load_config
    from posenc.tasks.translation.experiment import ExperimentConfig
    from posenc.tasks.translation.report import done_part

    exp = load_config(ExperimentConfig, write_experiment(tmp_path, methods=("ape", "shape", "cape"), seeds=(1, 2, 3)))
    cells = [("ape", s) for s in (1, 2, 3)] + [("shape", s) for s in (1, 2, 3)] + [("cape", 1)]
    results = [{"setting": "vanilla", "method": m, "seed": s} for m, s in cells]
    part, why = done_part(exp, "vanilla", results)
    assert list(part.methods) == ["ape", "shape"] and part.seeds == [1, 2, 3]
    assert "cape waits for its other seeds (done: 1)" in why and "2 run(s) of this setting are left out" in why
    part, _ = done_part(exp, "vanilla", [r for r in results if (r["method"], r["seed"]) != ("ape", 3)])
    assert list(part.methods) == ["ape", "shape", "cape"] and part.seeds == [1]


def test_report_only_leaves_out_the_cells_waiting_for_the_sweep(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    """While the selection sweep is incomplete, the selected method's cells wait for its choice: the
    report holds the other methods and names those cells among the runs left out."""
    path = write_experiment(tmp_path, methods=("ape", "shape"))
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["selection"] = {"key": "model.position.max_shift", "values": [1, 8], "method": "shape", "seeds": [1]}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    code, _, err = cli(capsys, "experiment", path, "--report-only")
    assert_one_line_error(code, err, "--report-only: none of the 2 runs of tiny is done and fresh")
    assert not (tmp_path / "exp" / "vanilla").exists()
    assert cli(capsys, "experiment", path, "--methods", "ape")[0] == 0
    code, out, _ = cli(capsys, "experiment", path, "--report-only")
    assert code == 0 and "the selection sweep is not complete (0 of 2 runs done)" in out
    report = (tmp_path / "exp" / "report" / "README.md").read_text(encoding="utf-8")
    assert "| ape |" in report and "| shape |" not in report
    assert "vanilla/shape/1 (waits for the selection sweep)" in report


def test_translation_analyses_compare_only_the_runs_done(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Two methods × two seeds, only ape seeds 1-2 and shape seed 1 trained: the length analysis
    pools seed 1 of both (the seeds every method has), the table counts each cell's seeds."""
    path = write_experiment(tmp_path, methods=("ape", "shape"), seeds=(1, 2))
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["analyses"] = ["length_bleu"]
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert cli(capsys, "experiment", path, "methods={ape: {model.position.name: ape}}")[0] == 0
    assert cli(capsys, "experiment", path, "seeds=[1]", "analyses=[]")[0] == 0  # shape seed 1 (ape is fresh)
    leftover = tmp_path / "exp" / "report" / "vanilla" / "length_bleu" / "seed9"
    leftover.mkdir(parents=True)
    (leftover / "old.md").write_text("OUTPUT OF AN EARLIER REPORT", encoding="utf-8")
    code, out, _ = cli(capsys, "experiment", path, "--report-only")
    assert code == 0 and "1 of 4 runs left out" in out and "vanilla/shape/2" in out
    assert not leftover.exists()  # an analysis folder holds this report's outputs only
    report = (tmp_path / "exp" / "report" / "README.md").read_text(encoding="utf-8")
    assert "**Partial grid**: the analyses below compare the runs done so far (ape, shape; seed(s) 1); " \
           "1 run(s) of this setting are left out (not trained or not fresh)." in report
    assert "(n=1)" in report.split("| shape |")[1].split("\n")[0]  # shape: one of two seeds
    assert "(n=" not in report.split("| ape |")[1].split("\n")[0]  # ape: both seeds
    n_test = len((tmp_path / "exp" / "vanilla" / "ape" / "seed1" / "translations" / "test.beam2.hyp").read_text().splitlines())
    assert "All seeds pooled (1): each test sentence once per seed." in report
    rows = (tmp_path / "exp" / "report" / "vanilla" / "length_bleu" / "length_bleu.csv").read_text().splitlines()[1:]
    for model in ("ape", "shape"):  # one seed pooled: the buckets hold one test set, not two
        assert sum(int(r.split(",")[2]) for r in rows if r.startswith(f"{model},")) == n_test
