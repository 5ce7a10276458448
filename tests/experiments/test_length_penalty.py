"""The length penalty chosen on validation per run: the search
decodes only the validation split and extends the grid until validation BLEU peaks (or the bound),
the chosen α is the validation peak, the test BLEU is decoded with it and recorded, and a changed
search rescores without retraining."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.config import load_config
from posenc.tasks.translation.experiment import ExperimentConfig, run_config
from posenc.tasks.translation.load import load_run, translate_split
from posenc.tasks.translation.tuning import replay, search_alphas, tune_length_penalty
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.grids import grid_of_config, verdict_now
from tests.helpers.tiny import cli

ALPHAS = [0.0, 0.6, 2.0]


def _experiment(tmp_path: Path, alphas: list[float], bound: float | None = None) -> Path:
    path = write_experiment(tmp_path, train={"max_steps": 6})
    text = path.read_text(encoding="utf-8") + f"tune_length_penalty: {alphas}\n"
    path.write_text(text + (f"tune_length_penalty_max: {bound}\n" if bound is not None else ""), encoding="utf-8")
    return path


GRID = [0.6, 0.8, 1.0, 1.2, 1.4]


def _search(bleu, bound: float = 5.0, grid: list[float] = GRID) -> tuple[list[str], float, bool]:  # noqa: ANN001
    decoded: list[float] = []
    out = search_alphas(grid, bound, lambda a: decoded.append(a) or bleu(a))
    assert [f"{a:g}" for a in decoded] == list(out["sweep"])  # each α decoded once, in the sweep's order
    return list(out["sweep"]), out["chosen"], out["at_bound"]


def test_search_stops_at_a_peak_inside_the_grid() -> None:
    assert _search(lambda a: -(a - 1.0) ** 2) == (["0.6", "0.8", "1", "1.2", "1.4"], 1.0, False)


def test_search_extends_upward_past_the_top_until_bleu_falls() -> None:
    keys, chosen, at_bound = _search(lambda a: -(a - 2.05) ** 2)
    assert keys == ["0.6", "0.8", "1", "1.2", "1.4", "1.6", "1.8", "2", "2.2"] and chosen == 2.0 and not at_bound


def test_search_monotone_to_the_bound_stops_there_and_says_so() -> None:
    keys, chosen, at_bound = _search(lambda a: a, bound=2.0)
    assert keys[-3:] == ["1.6", "1.8", "2"] and chosen == 2.0 and at_bound
    assert _search(lambda a: a, bound=1.4) == (["0.6", "0.8", "1", "1.2", "1.4"], 1.4, True)  # the grid only
    assert _search(lambda a: a, bound=2.1)[0][-1] == "2"  # a step past 2.1 is never decoded


def test_search_extends_downward_to_zero() -> None:
    assert _search(lambda a: -a)[0][5:] == ["0.4", "0.2", "0"] and _search(lambda a: -a)[1] == 0.0
    assert _search(lambda a: -(a - 0.35) ** 2)[0][5:] == ["0.4", "0.2"]  # 0.4 beats 0.2: bracketed
    # a step past 0 tries 0 itself (grid 0.3, 1.0: the next step down would be -0.4)
    assert _search(lambda a: -a, grid=[0.3, 1.0]) == (["0.3", "1", "0"], 0.0, False)


def test_a_grid_finer_than_the_rounding_ends_the_search() -> None:
    """Grid values closer than 1e-6 round to an α already decoded: the search stops, never loops."""
    decoded: list[float] = []
    out = search_alphas([0.6, 0.6000001], 5.0, lambda a: decoded.append(a) or a)
    assert decoded == [0.6, 0.6000001] and out["chosen"] == 0.6000001  # the step up rounds to 0.6000001 again


def test_plateau_ties_go_to_the_smallest_alpha_and_stop_the_search() -> None:
    # level from 1.0 up: the top is not the strict best, so nothing is added; ties -> 1.0
    assert _search(lambda a: min(a, 1.0)) == (["0.6", "0.8", "1", "1.2", "1.4"], 1.0, False)
    assert _search(lambda a: 7.0) == (["0.6", "0.8", "1", "1.2", "1.4"], 0.6, False)
    keys, chosen, _ = _search(lambda a: min(a, 1.6))  # rises past the top, then level: stops at the first tie
    assert keys[-2:] == ["1.6", "1.8"] and chosen == 1.6
    assert _search(lambda a: 1.0, grid=[0.6])[0:2] == (["0.6"], 0.6)  # one α: no step, no search


def test_replay_checks_a_stored_sweep() -> None:
    stored = {"0.6": 1.0, "0.8": 2.0, "1": 3.0, "1.2": 4.0, "1.4": 5.0}  # the committed runs' shape
    assert replay(GRID, 1.4, stored) == list(stored)
    assert replay(GRID, 5.0, stored) is None  # the search would decode 1.6
    assert replay(GRID, 5.0, {**stored, "1.6": 4.5}) == [*stored, "1.6"]


def test_sweep_is_the_validation_argmax_and_test_uses_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _experiment(tmp_path, ALPHAS)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    cfg = run_config(exp, "vanilla", "ape", 1)
    result = json.loads((Path(cfg.out_dir) / "results.json").read_text(encoding="utf-8"))
    tuning = result["length_penalty"]
    assert tuning["split"] == "valid" and list(tuning["sweep"])[:3] == ["0", "0.6", "2"]
    loaded = load_run(cfg.out_dir)
    again = {k: translate_split(loaded, "valid", replace(cfg.decode, length_penalty=float(k)), stem="check")["bleu"]
             for k in tuning["sweep"]}
    assert again == tuning["sweep"]  # the recorded sweep is validation BLEU per α
    assert replay(ALPHAS, exp.tune_length_penalty_max, again) == list(again)  # the search's own candidates
    assert tuning["chosen"] == float(max(sorted(again, key=float), key=again.get))  # the peak; ties: smallest α
    test = translate_split(loaded, "test", replace(cfg.decode, length_penalty=tuning["chosen"]), stem="check")
    assert result["scores"]["test"]["bleu"] == test["bleu"]  # test decoded with the chosen α
    # the α used and whether it sat at the bound are recorded: in the record, in the scores and in
    # translations/test.beam<K>.json
    assert result["record"]["evaluation"]["decode"]["length_penalty"] == tuning["chosen"]
    assert tuning["at_bound"] == search_alphas(ALPHAS, exp.tune_length_penalty_max, lambda a: again[f"{a:g}"])["at_bound"]
    written = json.loads((Path(cfg.out_dir) / result["scores"]["test"]["hyp"]).with_suffix(".json").read_text())
    for scored in (result["scores"]["test"], written):
        assert (scored["length_penalty"], scored["at_bound"]) == (tuning["chosen"], tuning["at_bound"])
    for name in tuning["sweep"]:
        (path,) = (Path(cfg.out_dir) / "translations").glob(f"valid.lp{name}.beam*.json")
        swept = json.loads(path.read_text())
        assert swept["length_penalty"] == float(name) and "at_bound" not in swept  # a candidate, not the choice
    report = (exp.root / "report" / "README.md").read_text(encoding="utf-8")
    assert "## Length penalty chosen on validation" in report
    assert "chosen per run on validation BLEU from {0, 0.6, 2}, searched on to the validation peak, α <= 5" in report


def test_tuning_never_reads_the_test_split(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    cfg = run_config(load_config(ExperimentConfig, path), "vanilla", "ape", 1)
    assert "length_penalty" not in json.loads((Path(cfg.out_dir) / "results.json").read_text())  # off by default
    loaded = load_run(cfg.out_dir)
    data = Path(cfg.prepared_dir)
    for name in ("test.src", "test.tgt"):  # gone: reading them would stop with "no such file"
        (data / name).rename(tmp_path / name)
    import posenc.tasks.translation.load as run_module

    read, real = [], run_module.split_files
    monkeypatch.setattr(run_module, "split_files", lambda run, split, data_dir=None: read.append(split) or real(run, split, data_dir))
    tuning = tune_length_penalty(loaded, ALPHAS, cfg.decode)
    assert read == ["valid"] * len(ALPHAS) and set(tuning["sweep"]) == {"0", "0.6", "2"}


def test_changed_sweep_rescores_without_training(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _experiment(tmp_path, ALPHAS)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    assert verdict_now(grid_of_config(exp), ("vanilla", "ape", 1)).kind == "fresh"
    assert verdict_now(grid_of_config(replace(exp, tune_length_penalty=[0.6, 1.0])), ("vanilla", "ape", 1)).kind == "rescore"
    assert verdict_now(grid_of_config(replace(exp, tune_length_penalty=[])), ("vanilla", "ape", 1)).kind == "rescore"


def test_records_written_before_the_tuned_alpha_was_recorded_stay_fresh(capsys: pytest.CaptureFixture[str],
                                                                          tmp_path: Path) -> None:
    """A results.json whose record says ``decode.length_penalty`` 0.6 (the config's) while its test
    was decoded at the tuned α (every committed run before issue 39) reads fresh, as does the new
    record; a grid that only listed α (bound = its top) is fresh, asking for the search rescores."""
    path = _experiment(tmp_path, ALPHAS, bound=2.0)
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    out = Path(run_config(exp, "vanilla", "ape", 1).out_dir) / "results.json"
    result = json.loads(out.read_text(encoding="utf-8"))
    assert list(result["length_penalty"]["sweep"]) == ["0", "0.6", "2"]
    assert verdict_now(grid_of_config(exp), ("vanilla", "ape", 1)).kind == "fresh"
    result["record"]["evaluation"]["decode"]["length_penalty"] = 0.6
    out.write_text(json.dumps(result), encoding="utf-8")
    assert verdict_now(grid_of_config(exp), ("vanilla", "ape", 1)).kind == "fresh"
    chosen_top = result["length_penalty"]["chosen"] == 2.0 and result["length_penalty"]["sweep"]["2"] > max(
        v for k, v in result["length_penalty"]["sweep"].items() if k != "2")
    wider = verdict_now(grid_of_config(replace(exp, tune_length_penalty_max=5.0)), ("vanilla", "ape", 1)).kind
    assert wider == ("rescore" if chosen_top else "fresh")  # more α only where the top was the strict best
