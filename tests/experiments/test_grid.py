"""A tiny experiment grid (2 settings × 2 methods × 2 seeds): runs, resumes without retraining,
writes the report with every analysis, and ``posenc analyze`` works on it afterwards."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

from posenc.config import load_config
from posenc.evaluation.seeds import mean_std
from posenc.experiments.runner import find_experiment, run_experiment
from posenc.tasks.translation.experiment import TRANSLATION_ANALYSES, ExperimentConfig
from tests.helpers.grids import grid_of_config, results_file
from tests.helpers.tiny import assert_one_line_error, cli, read

REPO = Path(__file__).resolve().parents[2]
SETTINGS = ("vanilla", "interpolate")
METHODS = ("ape", "shape")
SEEDS = (1, 2)


def tiny_experiment(root: Path) -> Path:
    """configs/experiments/toy.yaml shrunk: 3 steps, 2 methods, 2 seeds, 2 settings, small data."""
    exp = yaml.safe_load(find_experiment("toy").read_text())
    exp["name"] = "tiny"
    exp["out_dir"] = str(root / "exp")
    base = exp["base"]
    base["data"]["options"] = {"n_train": 60, "n_valid": 8, "n_test": 20}
    base["model"].update(d_model=32, d_ff=64)
    base["train"].update(max_steps=3, max_tokens=400, warmup=2, lr=0.001, validate_every=0, save_every=0,
                         keep_last=2, average_last=0, log_every=1, device="cpu")
    exp["methods"] = {m: exp["methods"][m] for m in METHODS}
    exp["settings"] = {"vanilla": {}, "interpolate": {"data.setting": "interpolate", "data.group": 3}}
    exp["seeds"] = list(SEEDS)
    exp["analysis_options"].update(shift_sentences=5, bootstrap_samples=20, bucket_width=5, shift_offsets=[0, 3, 7])
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ExperimentConfig, Path]:
    path = tiny_experiment(tmp_path_factory.mktemp("experiment"))
    report = run_experiment(str(path))
    return path, load_config(ExperimentConfig, path), report


def _results(exp: ExperimentConfig) -> dict[tuple[str, str, int], dict]:
    grid = grid_of_config(exp)
    return {cell: json.loads(results_file(grid, cell).read_text()) for cell in grid.cells()}


def test_every_cell_ran(experiment) -> None:
    _, exp, report = experiment
    assert report == exp.root / "report"
    grid = grid_of_config(exp)
    results = _results(exp)
    assert sorted(results) == sorted((s, m, seed) for s in SETTINGS for m in METHODS for seed in SEEDS)
    for (setting, method, seed), r in results.items():
        assert (r["setting"], r["method"], r["seed"]) == (setting, method, seed)
        assert r["summary"]["steps"] == 3 and set(r["scores"]) == {"test"}
        cfg = yaml.safe_load((results_file(grid, (setting, method, seed)).parent / "config.yaml").read_text())
        assert cfg["train"]["seed"] == seed and cfg["model"]["position"]["name"] == method
    # one prepared directory per setting, shared by its methods and seeds
    data_dirs = sorted(p.name for p in (exp.root / "data").iterdir() if not p.name.startswith("."))
    assert len(data_dirs) == 2 and [d.split("-")[0] for d in data_dirs] == ["interpolate", "vanilla"]
    assert {grid.run_config(("vanilla", m, s)).prepared_dir for m in METHODS for s in SEEDS} == {
        str(exp.root / "data" / next(d for d in data_dirs if d.startswith("vanilla")))}


def test_seeds_give_different_runs(experiment) -> None:
    _, exp, _ = experiment
    hyps = [read(Path(grid_of_config(exp).run_config(("vanilla", "ape", seed)).out_dir) / "translations" / "test.beam2.hyp") for seed in SEEDS]
    assert hyps[0] != hyps[1]


def test_results_table(experiment) -> None:
    _, exp, report = experiment
    text = (report / "README.md").read_text(encoding="utf-8")
    results = _results(exp)
    header = "| method | vanilla BLEU | interpolate BLEU | params | train s (first run) | steps | status |"
    assert header in text
    # stopped by max_steps (3): capped runs are "still improving", never converged, and every cell says so
    assert {r["summary"]["status"] for r in results.values()} == {"still improving"}
    assert {r["summary"]["stopped"] for r in results.values()} == {"max_steps"}
    for method in METHODS:
        row = next(line for line in text.splitlines() if line.startswith(f"| {method} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        for setting, cell in zip(SETTINGS, cells[1:3]):
            bleu = [results[(setting, method, seed)]["scores"]["test"]["bleu"] for seed in SEEDS]
            assert re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d\*", cell), cell
            assert cell == f"{statistics.mean(bleu):.2f} ± {statistics.stdev(bleu):.2f}*"
        assert cells[3] == f"{results[('vanilla', method, 1)]['summary']['params']:,}"
        assert cells[5] == "3" and cells[6].startswith("NOT CONVERGED (vanilla/seed1: still improving;")
    assert "* from at least one run that had not converged" in text


def test_a_method_without_runs_in_the_first_setting_takes_its_size_and_time_from_its_first_run(experiment) -> None:
    from posenc.tasks.translation.report import results_table

    _, exp, _ = experiment
    results = _results(exp)
    kept = [r for (setting, method, _), r in sorted(results.items()) if (setting, method) != ("vanilla", METHODS[1])]
    row = next(line for line in results_table(exp, kept).splitlines() if line.startswith(f"| {METHODS[1]} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    first = results[("interpolate", METHODS[1], 1)]["summary"]
    assert cells[1] == "–" and cells[3] == f"{first['params']:,}" and cells[4] == f"{first['wall_s']}"


def _analysis_files(directory: Path) -> set[str]:
    return {p.suffix for p in directory.rglob("*") if p.is_file()}


def test_report_has_every_analysis(experiment) -> None:
    _, exp, report = experiment
    text = (report / "README.md").read_text(encoding="utf-8")
    assert exp.analyses == list(TRANSLATION_ANALYSES)  # toy.yaml asks for all of them
    for setting in SETTINGS:
        assert f"## {setting}" in text
        for name in exp.analyses:
            out = report / setting / name
            assert f"### {name}" in text
            if name == "swapped" and setting == "vanilla":
                assert not any(p.is_file() for p in out.rglob("*"))  # needs <sep>-joined groups: INTERPOLATE only
                continue
            if name == "long_sources" and _analysis_files(out) == {".md"}:  # every test source as long as training's
                assert "No test source is longer than the longest training source" in (out / f"{name}.md").read_text()
                continue
            assert {".csv", ".png"} <= _analysis_files(out), (setting, name)
            for csv_path in out.rglob("*.csv"):
                with open(csv_path, newline="", encoding="utf-8") as fh:
                    assert len(list(csv.DictReader(fh))) >= 1, csv_path
    from posenc.analysis.registry import REGISTRY

    n_test = len(read(Path(grid_of_config(exp).run_config(("vanilla", "ape", 1)).prepared_dir) / "test.src"))
    with open(report / "vanilla" / "length_bleu" / "length_bleu.csv", newline="", encoding="utf-8") as fh:
        ape = [r for r in csv.DictReader(fh) if r["model"] == "ape"]
    assert sum(int(r["sentences"]) for r in ape) == len(SEEDS) * n_test  # every seed's outputs, pooled
    with open(report / "vanilla" / "shift_invariance" / "seed1" / "shift_invariance.csv", newline="", encoding="utf-8") as fh:
        assert {int(r["k1"]) for r in csv.DictReader(fh)} == {0, 3, 7}  # analysis_options.shift_offsets
    for name in {n for n in exp.analyses if not REGISTRY[n].pooled} - {"swapped"}:  # model analyses: one per seed
        entries = list((report / "vanilla" / name).iterdir())
        assert {p.name for p in entries if p.is_dir()} == {f"seed{s}" for s in SEEDS}, name
        combined = {p.name for p in entries if p.is_file()}  # the seeds compared, where the analysis does
        plotted = {f"{name}_seeds.png"} if name == "position_nll" else set()  # CAPE Fig. 8 over the seeds
        assert combined == ({f"{name}_seeds.csv", f"{name}_seeds.md", f"{name}_pairs.csv"} | plotted
                            if REGISTRY[name].across_seeds else set()), name
    for setting in SETTINGS:  # learning curves of every run, whatever the analyses
        assert (report / setting / "learning_curves" / "learning_curves.png").is_file()
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text))
    assert linked == {str(p.relative_to(report)) for p in report.rglob("*.png")}


def test_rerun_reuses_results(capsys: pytest.CaptureFixture[str], experiment) -> None:
    path, exp, report = experiment
    grid = grid_of_config(exp)
    cells = [Path(grid.run_config(cell).out_dir) for cell in grid.cells()]
    before = {p: p.stat().st_mtime_ns for c in cells for p in [c / "results.json", *c.rglob("*.safetensors")]}
    readme = (report / "README.md").read_text(encoding="utf-8")
    code, out, _ = cli(capsys, "experiment", path)
    assert code == 0
    assert {p: p.stat().st_mtime_ns for p in before} == before  # nothing retrained or rescored
    assert out.startswith("## Test BLEU") and "| ape |" in out and out.rstrip().endswith(f"report: {report / 'README.md'}")
    assert (report / "README.md").read_text(encoding="utf-8") == readme


def test_analyze_after_the_experiment(capsys: pytest.CaptureFixture[str], tmp_path: Path, experiment) -> None:
    path, exp, report = experiment
    code, out, _ = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--out", tmp_path)
    assert code == 0 and out == "".join(f"length_bleu ({s}) -> {tmp_path / s}\n" for s in SETTINGS)
    for setting in SETTINGS:
        assert (tmp_path / setting / "length_bleu.png").is_file()
        assert read(tmp_path / setting / "length_bleu.csv") == read(report / setting / "length_bleu" / "length_bleu.csv")
    code, out, _ = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--out", tmp_path)
    assert code == 0  # its own --out directories again: rewritten
    theirs = tmp_path / "theirs" / "vanilla"
    theirs.mkdir(parents=True)
    (theirs / "length_bleu.csv").write_text("my numbers")
    code, _, err = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--setting", "vanilla", "--out", theirs.parent)
    assert_one_line_error(code, err, "--out")
    assert (theirs / "length_bleu.csv").read_text() == "my numbers"
    code, out, _ = cli(capsys, "analyze", "length-bleu", "--experiment", path, "--setting", "interpolate")
    assert code == 0 and out == f"length_bleu (interpolate) -> {report / 'interpolate' / 'length_bleu'}\n"
    code, _, err = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--setting", "extrapolate")
    assert_one_line_error(code, err, "unknown setting 'extrapolate'")


@pytest.mark.parametrize("name", ["speed", "length_bleu"])
def test_analyze_out_is_a_directory_posenc_may_write(capsys: pytest.CaptureFixture[str], tmp_path: Path, experiment,
                                                     name: str) -> None:
    """Issue 28: ``--out F.txt`` (a file) and ``--out U`` holding a user's files are one-line
    errors before any analysis runs; nothing is written (``U/vanilla`` was)."""
    path, _, _ = experiment
    f, user = tmp_path / "F.txt", tmp_path / "U"
    f.write_text("mine\n")
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, out, err = cli(capsys, "analyze", name, "--experiment", path, "--out", f)
    assert_one_line_error(code, err, str(f), "is a file")
    code, out, err = cli(capsys, "analyze", name, "--experiment", path, "--out", user)
    assert_one_line_error(code, err, str(user), "notes.txt")
    assert out == "" and sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert f.read_text() == (user / "notes.txt").read_text() == "mine\n"


def test_mean_std() -> None:
    assert mean_std([10.0, 14.0]) == "12.00 ± 2.83"  # sample std: sqrt(((10-12)² + (14-12)²) / 1)
    assert mean_std([7.125]) == "7.12"
    assert mean_std([1.0, 2.0, 6.0]) == "3.00 ± 2.65"


def test_report_of_a_committed_grid_in_another_clone(tmp_path: Path, experiment) -> None:
    """A grid committed as its .gitignore keeps it (no checkpoints, no prepared data, no spm.model)
    and read in another clone: nothing is trained, the data are prepared again, the text analyses
    equal the original's and the model analyses say why they are skipped."""
    import shutil

    from posenc.analysis.registry import REGISTRY

    path, exp, report = experiment
    ignored = shutil.ignore_patterns("checkpoints", "data", "tensorboard", "*.safetensors", ".posenc.lock", "spm.model", "report")
    shutil.copytree(exp.root, tmp_path / "exp", ignore=ignored)
    spec = yaml.safe_load(path.read_text())
    spec["out_dir"] = str(tmp_path / "exp")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    clone = run_experiment(str(tmp_path / "tiny.yaml"))
    assert not list((tmp_path / "exp").rglob("*.safetensors"))  # nothing trained
    text = (clone / "README.md").read_text(encoding="utf-8")
    model_analyses = [n for n in exp.analyses if REGISTRY[n].reads_models]
    assert text.count("Skipped: it reads the trained models and 4 run(s) keep no checkpoint") == len(SETTINGS) * len(model_analyses)
    for setting in SETTINGS:
        for name in ("length_bleu", "length_diff"):
            assert read(clone / setting / name / f"{name}.csv") == read(report / setting / name / f"{name}.csv")
    assert text.split("## Across seeds")[0] == (report / "README.md").read_text(encoding="utf-8").split("## Across seeds")[0]


def _seed_folders(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


def _combined(folder: Path) -> list[str]:
    """The files beside the seed folders: an analysis's comparison over the seeds."""
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def test_model_analyses_run_on_the_seeds_that_keep_checkpoints(tmp_path: Path, experiment) -> None:
    """A grid whose seed-1 run of one method lost its checkpoints (trained elsewhere, say): the
    per-seed model analyses of that setting run on seed 2 alone and name seed 1 as left out; the
    other setting keeps both seeds; results of seed 2 equal the full grid's."""
    import shutil

    from posenc.analysis.registry import REGISTRY

    path, exp, report = experiment
    shutil.copytree(exp.root, tmp_path / "exp", ignore=shutil.ignore_patterns("report", ".posenc.lock"))
    shutil.rmtree(tmp_path / "exp" / SETTINGS[0] / METHODS[1] / "seed1" / "checkpoints")
    spec = yaml.safe_load(path.read_text())
    spec["out_dir"] = str(tmp_path / "exp")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    clone = run_experiment(str(tmp_path / "tiny.yaml"))
    text = (clone / "README.md").read_text(encoding="utf-8")
    per_seed = sorted(n for n in exp.analyses if REGISTRY[n].reads_models and not REGISTRY[n].pooled and n != "swapped")
    assert per_seed and "Skipped: it reads the trained models" not in text
    assert text.count("Seed(s) 1 left out: it reads the trained models and 1 run(s) keep no checkpoint") == len(
        [n for n in exp.analyses if REGISTRY[n].reads_models])
    for name in per_seed:
        assert _seed_folders(clone / SETTINGS[0] / name) == ["seed2"] and not _combined(clone / SETTINGS[0] / name)
        assert _seed_folders(clone / SETTINGS[1] / name) == ["seed1", "seed2"]
        assert bool(_combined(clone / SETTINGS[1] / name)) == bool(REGISTRY[name].across_seeds)  # two seeds compared
    assert read(clone / SETTINGS[0] / "shift_invariance" / "seed2" / "shift_invariance.csv") == read(
        report / SETTINGS[0] / "shift_invariance" / "seed2" / "shift_invariance.csv")


def test_a_report_rewritten_without_checkpoints_keeps_the_model_analyses_it_cannot_redo(tmp_path: Path,
                                                                                         experiment) -> None:
    """A committed grid's report regenerated in a clone (no checkpoints): the per-seed outputs of the
    analyses that read the models stay as the report that had the models wrote them, and say so,
    while their runs.json names today's runs; a seed whose run changed loses its old output; the
    seed whose models are here is computed again; outputs no analysis writes are cleared."""
    import shutil

    from posenc.analysis.registry import REGISTRY

    path, exp, report = experiment
    shutil.copytree(exp.root, tmp_path / "exp", ignore=shutil.ignore_patterns(".posenc.lock"))
    for method in METHODS:
        shutil.rmtree(tmp_path / "exp" / SETTINGS[0] / method / "seed1" / "checkpoints")
        shutil.rmtree(tmp_path / "exp" / SETTINGS[1] / method / "seed1" / "checkpoints")
    changed = tmp_path / "exp" / SETTINGS[1] / METHODS[0] / "seed1" / "results.json"
    result = json.loads(changed.read_text())
    result["summary"]["steps"] += 1  # as if retrained: the kept output no longer describes it
    changed.write_text(json.dumps(result))
    stale = tmp_path / "exp" / "report" / SETTINGS[0] / "length_bleu" / "stale.csv"
    stale.write_text("from an earlier report\n")
    spec = yaml.safe_load(path.read_text())
    spec["out_dir"] = str(tmp_path / "exp")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    clone = run_experiment(str(tmp_path / "tiny.yaml"), report_only=True)
    text = (clone / "README.md").read_text(encoding="utf-8")
    per_seed = sorted(n for n in exp.analyses if REGISTRY[n].reads_models and not REGISTRY[n].pooled and n != "swapped")
    kept_note = f"Seed 1: kept as the report that had its models wrote it (its runs.json names today's runs of {', '.join(METHODS)})"
    assert text.count(kept_note) == len(per_seed)  # vanilla's: swapped has nothing there, interpolate's run changed
    for name in per_seed:
        assert _seed_folders(clone / SETTINGS[0] / name) == ["seed1", "seed2"]  # the kept seed is compared too
        assert bool(_combined(clone / SETTINGS[0] / name)) == bool(REGISTRY[name].across_seeds)
        assert _seed_folders(clone / SETTINGS[1] / name) == ["seed2"]  # its run changed
        assert not _combined(clone / SETTINGS[1] / name)
    kept = SETTINGS[0] + "/shift_invariance/seed1/shift_invariance.csv"
    assert read(clone / kept) == read(report / kept)
    assert json.loads((clone / SETTINGS[0] / "shift_invariance" / "seed2" / "runs.json").read_text()) == {
        m: {"fingerprint": r["record"]["fingerprint"], "steps": r["summary"]["steps"],
            "best_step": r["summary"]["best_step"]}
        for m in METHODS for r in [json.loads((exp.root / SETTINGS[0] / m / "seed2" / "results.json").read_text())]}
    assert not stale.exists()  # an output the analyses no longer write is not kept


def test_runs_of_several_devices_name_them_and_skip_wall_clock_speed(tmp_path: Path, experiment) -> None:
    """A grid finished on another machine (one run's record says cuda): the BLEU table names each
    wall time's device, the speed analysis of that seed is a one-line note, the other seed's table stays."""
    import shutil

    path, exp, report = experiment
    shutil.copytree(exp.root, tmp_path / "exp", ignore=shutil.ignore_patterns("report", ".posenc.lock"))
    moved = tmp_path / "exp" / SETTINGS[0] / METHODS[1] / "seed1" / "results.json"
    result = json.loads(moved.read_text())
    assert result["record"]["extension"]["device"] == "cpu"
    assert result["summary"]["device"] == "cpu"  # where it trained, as its summary.json says
    result["record"]["extension"]["device"] = "cuda"
    result["summary"]["device"] = "cuda: NVIDIA H100 80GB HBM3"
    moved.write_text(json.dumps(result))
    spec = yaml.safe_load(path.read_text())
    spec["out_dir"] = str(tmp_path / "exp")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    clone = run_experiment(str(tmp_path / "tiny.yaml"))
    text = (clone / "README.md").read_text(encoding="utf-8")
    wall = {m: re.search(rf"^\| {m} \|.*?\| [\d.]+ \(([^)]+)\) \|", text, re.M) for m in METHODS}
    gpu = "cuda: NVIDIA H100 80GB HBM3"
    assert {m: w.group(1) for m, w in wall.items() if w} == {METHODS[0]: "cpu", METHODS[1]: gpu}
    note = f"Not compared (seed 1): its runs trained on different devices ({METHODS[0]}: cpu, {METHODS[1]}: {gpu})"
    assert text.count(note) == 1 and (clone / SETTINGS[0] / "speed" / "seed1" / "speed.md").read_text().startswith(note)
    assert not (clone / SETTINGS[0] / "speed" / "seed1" / "speed.csv").exists()
    assert read(clone / SETTINGS[0] / "speed" / "seed2" / "speed.csv") == read(report / SETTINGS[0] / "speed" / "seed2" / "speed.csv")
    assert "(cpu)" not in (report / "README.md").read_text(encoding="utf-8")  # one device: no labels
    assert f"| {gpu} | 1 | {SETTINGS[0]}/{METHODS[1]}/seed1 |" in text  # the report names each run's device


def test_a_run_brought_back_with_only_its_average_is_scored_not_retrained(tmp_path: Path, experiment) -> None:
    """A cell trained elsewhere (its resumable checkpoints left behind, its averaged one and its
    training files brought back, no results): the grid scores it, and the scores equal the
    original's; training files are untouched. Without the average it would retrain (normal path)."""
    import shutil

    path, exp, _ = experiment
    shutil.copytree(exp.root, tmp_path / "exp", ignore=shutil.ignore_patterns("report", ".posenc.lock"))
    run = tmp_path / "exp" / SETTINGS[0] / METHODS[1] / "seed2"
    original = json.loads((run / "results.json").read_text())
    (run / "results.json").unlink()
    ckpts = sorted((run / "checkpoints").glob("ckpt_*"))
    ckpts[-1].rename(run / "checkpoints" / "average")  # the weights it was scored with, under the averaged name
    for ckpt in ckpts[:-1]:
        shutil.rmtree(ckpt)
    before = {name: (run / name).read_bytes() for name in ("summary.json", "train.csv", "fingerprint.json")}
    spec = yaml.safe_load(path.read_text())
    spec["out_dir"] = str(tmp_path / "exp")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    run_experiment(str(tmp_path / "tiny.yaml"))
    scored = json.loads((run / "results.json").read_text())
    assert scored["scores"]["test"]["bleu"] == original["scores"]["test"]["bleu"]
    assert scored["scores"]["test"]["hyp"] == original["scores"]["test"]["hyp"] and scored["summary"] == original["summary"]
    assert {name: (run / name).read_bytes() for name in before} == before
    assert not list((run / "checkpoints").glob("ckpt_*"))  # nothing trained


def test_seed_test_section(experiment) -> None:
    """One Welch row per setting and non-baseline method from the per-seed BLEU (hand-made
    scores: the 3-step toy runs all score 0), equal to scipy's test; fewer than 2 seeds: no row."""
    from scipy import stats

    from posenc.tasks.translation.report import seed_test_section

    _, exp, _ = experiment
    bleu = {("vanilla", "ape"): [30.0, 31.0], ("vanilla", "shape"): [33.0, 33.5],
            ("interpolate", "ape"): [20.0, 20.4], ("interpolate", "shape"): [19.0]}
    results = [{"setting": st, "method": m, "seed": i + 1, "scores": {"test": {"bleu": b}}}
               for (st, m), scores in bleu.items() for i, b in enumerate(scores)]
    lines = seed_test_section(exp, results)
    rows = [line for line in lines if line.startswith("| vanilla") or line.startswith("| interpolate")]
    ref = stats.ttest_ind([33.0, 33.5], [30.0, 31.0], equal_var=False)
    assert rows == [f"| vanilla | shape | +2.75 | {ref.statistic:.2f} | {ref.df:.1f} | {ref.pvalue:.3f} |"]
    assert seed_test_section(exp, [r for r in results if r["seed"] == 1]) == []


def test_analyze_some_methods(capsys: pytest.CaptureFixture[str], tmp_path: Path, experiment) -> None:
    """``--methods shape``: the analysis of that method alone, rows equal to the full grid's;
    a label the grid lacks (or none) is a one-line error and nothing is written."""
    path, _, report = experiment
    code, out, _ = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--setting", "vanilla",
                       "--methods", "shape", "--out", tmp_path / "some")
    assert code == 0 and out == f"length_bleu (vanilla) -> {tmp_path / 'some' / 'vanilla'}\n"
    some = list(csv.DictReader((tmp_path / "some" / "vanilla" / "length_bleu.csv").open(encoding="utf-8")))
    full = list(csv.DictReader((report / "vanilla" / "length_bleu" / "length_bleu.csv").open(encoding="utf-8")))
    assert some and {r["model"] for r in some} == {"shape"}
    assert [r["bleu"] for r in some] == [r["bleu"] for r in full if r["model"] == "shape"]
    for bad in ("shape,nope", ",", "shape,shape"):
        code, _, err = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--methods", bad,
                           "--out", tmp_path / "bad")
        assert_one_line_error(code, err, "methods must be distinct labels of experiment")
    assert not (tmp_path / "bad").exists()
    # without --out a subset would replace the report's analysis of every method: refused, untouched
    before = (report / "vanilla" / "length_bleu" / "length_bleu.csv").read_bytes()
    code, _, err = cli(capsys, "analyze", "length_bleu", "--experiment", path, "--methods", "shape")
    assert_one_line_error(code, err, "is not every method of")
    assert (report / "vanilla" / "length_bleu" / "length_bleu.csv").read_bytes() == before


def test_with_methods_keeps_a_selection_only_with_its_method() -> None:
    exp = load_config(ExperimentConfig, find_experiment("multi30k_select"), [])
    kept = exp.with_methods(["shape-kstar", "ape"])
    assert list(kept.methods) == ["shape-kstar", "ape"] and kept.selection == exp.selection
    assert kept.baseline_label == "shape-kstar" and kept.seeds == exp.seeds and kept.settings == exp.settings
    dropped = exp.with_methods(["rnn", "ape"])
    assert not dropped.selection.enabled and list(dropped.methods) == ["rnn", "ape"]


def test_experiment_trains_only_the_cells_asked_for(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    experiment) -> None:
    """``--settings/--methods/--seeds``: only those cells train (results equal to the whole grid's
    run of the same cell), no report is written; the whole grid afterwards trains the rest only.
    A label the grid lacks, and --report-only with a subset, are one-line errors before anything runs."""
    _, exp_full, _ = experiment
    path = tiny_experiment(tmp_path)
    exp = load_config(ExperimentConfig, path)
    code, out, _ = cli(capsys, "experiment", path, "--settings", "vanilla", "--methods", "shape", "--seeds", "2")
    assert code == 0 and "1 runs of tiny up to date" in out and "--report-only" in out
    grid = grid_of_config(exp)
    done = [cell for cell in grid.cells() if results_file(grid, cell).is_file()]
    assert done == [("vanilla", "shape", 2)] and not (exp.root / "report").exists()
    ours = json.loads(results_file(grid, done[0]).read_text())
    theirs = _results(exp_full)[done[0]]
    assert ours["scores"]["test"]["bleu"] == theirs["scores"]["test"]["bleu"]
    for argv, needle in ((("--methods", "shape,rope"), "methods ['rope'] not in the grid"),
                         (("--seeds", "1,x"), "--seeds must be comma-separated integers"),
                         (("--settings", "extrapolate"), "settings ['extrapolate'] not in the grid"),
                         (("--methods", "ape", "--report-only"), "--report-only reports every fresh cell")):
        code, _, err = cli(capsys, "experiment", path, *argv)
        assert_one_line_error(code, err, needle)
    assert [cell for cell in grid.cells() if results_file(grid, cell).is_file()] == done
