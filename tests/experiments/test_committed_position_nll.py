"""multi30k_position_nll (CAPE Fig. 8 on the Multi30k protocol): its runs are multi30k_select's
EXTRAPOLATE cells of the same methods, so every cell's run config is multi30k_select's but for
where it lives."""

from __future__ import annotations

from posenc.config import load_config, to_dict
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.experiment import ExperimentConfig, run_config

PLACEMENT = ("out_dir", "data_dir")


def _config(name: str, method: str, seed: int) -> dict:
    exp = load_config(ExperimentConfig, find_experiment(name))
    cfg = to_dict(run_config(exp, "extrapolate", method, seed))
    return {k: v for k, v in cfg.items() if k not in PLACEMENT}


def test_every_cell_is_a_multi30k_select_cell() -> None:
    twin = load_config(ExperimentConfig, find_experiment("multi30k_position_nll"))
    select = load_config(ExperimentConfig, find_experiment("multi30k_select"))
    assert list(twin.settings) == ["extrapolate"] and twin.settings["extrapolate"] == select.settings["extrapolate"]
    assert set(twin.methods) == {"ape", "rpe", "cape", "learned"} and twin.seeds == select.seeds
    assert (twin.tune_length_penalty, twin.tune_length_penalty_max, twin.splits) == (
        select.tune_length_penalty, select.tune_length_penalty_max, select.splits)
    for method in twin.methods:
        for seed in twin.seeds:
            assert _config("multi30k_position_nll", method, seed) == _config("multi30k_select", method, seed)
