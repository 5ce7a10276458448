"""Every committed run whose experiment tuned the length penalty says what was done: its record's
``decode.length_penalty`` is the α chosen on validation, its ``length_penalty`` block says whether
that α sat at the search's bound (``at_bound``, as the package's search replayed on the stored
sweep decides it), and every translations json says the α it was decoded with (the scored splits
also ``at_bound``). A split scored on validation is the sweep's decode at the chosen α."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from posenc.config import load_config, load_yaml
from posenc.errors import ConfigError
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.tuning import alpha_key, replay, search_alphas

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _tuning_experiments() -> list[ExperimentConfig]:
    """The shipped translation experiments that tune α and have committed runs (a grid's directory
    may hold only its .gitignore until its first cells land)."""
    out = []
    for grid in sorted(p for p in RESULTS.iterdir() if p.is_dir() and any(p.rglob("results.json"))):
        try:
            path = find_experiment(grid.name)
        except ConfigError:  # a committed directory without a shipped config of its name
            continue
        if load_yaml(path).get("task", "translation") == "translation":
            exp = load_config(ExperimentConfig, path)
            if exp.tune_length_penalty:
                out.append(exp)
    return out


EXPERIMENTS = _tuning_experiments()


def _runs(exp: ExperimentConfig) -> Iterator[tuple[Path, dict]]:
    for path in sorted((RESULTS / exp.name).rglob("results.json")):
        yield path.parent, json.loads(path.read_text(encoding="utf-8"))


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_tuned_grids_are_found() -> None:
    assert {"multi30k_select", "quickstart_select"} <= {exp.name for exp in EXPERIMENTS}


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_records_name_the_alpha_used_and_whether_it_sat_at_the_bound(exp: ExperimentConfig) -> None:
    runs = list(_runs(exp))
    assert runs
    for run, result in runs:
        tuning, sweep = result["length_penalty"], result["length_penalty"]["sweep"]
        assert replay(exp.tune_length_penalty, exp.tune_length_penalty_max, sweep) == list(sweep), run
        search = search_alphas(exp.tune_length_penalty, exp.tune_length_penalty_max, lambda a: sweep[alpha_key(a)])
        assert (tuning["chosen"], tuning["at_bound"]) == (search["chosen"], search["at_bound"]), run
        assert result["record"]["evaluation"]["decode"]["length_penalty"] == tuning["chosen"], run
        for scored in result["scores"].values():
            written = _read((run / scored["hyp"]).with_suffix(".json"))
            for record in (scored, written):
                assert (record["length_penalty"], record["at_bound"]) == (tuning["chosen"], tuning["at_bound"]), run
            assert written["bleu"] == scored["bleu"], run


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_sweep_translations_name_their_alpha(exp: ExperimentConfig) -> None:
    """Each candidate's translations json says its α and holds the sweep's BLEU; a validation split
    scored with the chosen α is that candidate's decode, byte for byte."""
    for run, result in _runs(exp):
        tuning = result["length_penalty"]
        for key, bleu in tuning["sweep"].items():
            (path,) = (run / "translations").glob(f"valid.lp{key}.beam*.json")
            swept = _read(path)
            assert (swept["length_penalty"], swept["bleu"]) == (float(key), bleu) and "at_bound" not in swept, path
        if "valid" in result["scores"]:
            scored = result["scores"]["valid"]
            chosen = (run / "translations" / f"valid.lp{alpha_key(tuning['chosen'])}.beam{scored['beam']}.hyp")
            assert (run / scored["hyp"]).read_bytes() == chosen.read_bytes(), run
