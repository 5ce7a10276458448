"""The one "is this the same run?" rule (runs/same_run.py): adding a method
or an option whose default reproduces the old behaviour stales nothing, and ``posenc train``,
``posenc experiment`` and the methods grids give the same verdict on the same change."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from posenc.config import to_dict
from posenc.positions.config import PositionConfig
from posenc.runs.fingerprint import fingerprint
from posenc.runs.same_run import RunRecord, read_stored, same_run
from posenc.runs.spec import RunSpec
from tests.helpers.tiny import cli, run_overrides

ROOT = Path(__file__).resolve().parents[3]

#: Run in a fresh interpreter: registers a throwaway attention method and gives RoPE a throwaway
#: option whose default (1.0) reproduces RoPE, *before* posenc builds its config classes, exactly as
#: a new method file or a new option would. Then asks every verdict the issue names.
NEW_METHOD_AND_OPTION = r'''
import dataclasses, importlib, json, sys, types
from pathlib import Path
import posenc

# posenc.positions' __init__ builds the config classes: import the registry and RoPE under a bare
# package first, register, then let the real package build PositionConfig from the registry.
bare = types.ModuleType("posenc.positions")
bare.__path__ = [str(Path(posenc.__file__).parent / "positions")]
sys.modules["posenc.positions"] = bare
from posenc.positions import registry
import posenc.positions.rope as rope

@dataclasses.dataclass
class ThrowawayParams:
    strength: float = 0.0

registry.register("attention", "throwaway", ThrowawayParams)(lambda params, **kw: None)
extended = dataclasses.make_dataclass("RopeParams", [("throwaway_scale", float, dataclasses.field(default=1.0))],
                                      bases=(rope.RopeParams,))
registry.ATTENTION["rope"] = dataclasses.replace(registry.ATTENTION["rope"], params=extended)
del sys.modules["posenc.positions"]
importlib.import_module("posenc.positions")

from posenc.positions.config import PositionConfig
assert "throwaway" in PositionConfig.__dataclass_fields__
assert "throwaway_scale" in dataclasses.fields(PositionConfig().rope)[-1].name

from posenc.cli.main import main
from posenc.config import load_config
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.experiments.runner import find_experiment
from posenc.tasks.lengthgen.config import LengthgenExperimentConfig, experiment_of, run_config
from posenc.tasks.lengthgen.task import TASK
from tests.helpers.grids import grid_of_config, verdict_now

root, run, rest = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
multi = dataclasses.replace(load_config(ExperimentConfig, find_experiment("multi30k_cpu")),
                            out_dir=str(root / "docs/results/multi30k_cpu"))
lengthgen = dataclasses.replace(load_config(LengthgenExperimentConfig, find_experiment("lengthgen_cpu")),
                                out_dir=str(root / "docs/results/lengthgen_cpu"))
multi_grid = grid_of_config(multi)
out = {"multi30k": sorted({verdict_now(multi_grid, c).kind for c in multi_grid.cells()})}
kinds = []
for path in sorted((root / "docs/results/lengthgen_cpu").glob("*/*/seed*/results.json")):
    res = json.loads(path.read_text())
    cell = (res["task"], res["method"], res["seed"])
    kinds.append(TASK.verdict(experiment_of(lengthgen), cell, res).kind)
out["lengthgen"] = {"cells": len(kinds), "kinds": sorted(set(kinds))}
out["resume"] = main(["train", *rest, "train.max_steps=4"])
out["changed"] = main(["train", *rest, "train.max_steps=6", "model.position.rope.throwaway_scale=2.0"])
print("RESULT " + json.dumps(out))
'''


def test_a_new_method_and_a_new_option_stale_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """With a method and a RoPE option registered after the run was trained: the run resumes, the
    committed multi30k_cpu and lengthgen_cpu results stay fresh, and setting the new option to a
    non-reproducing value is refused (so the check can fail)."""
    rest = run_overrides(tmp_path / "run", None, "model.position.name=rope")
    code, _, err = cli(capsys, "train", *rest, "train.max_steps=2")
    assert code == 0, err
    proc = subprocess.run([sys.executable, "-c", NEW_METHOD_AND_OPTION, str(ROOT), "run", *rest],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-2000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out["multi30k"] == ["fresh"]
    assert out["lengthgen"] == {"cells": 162, "kinds": ["fresh"]}
    assert out["resume"] == 0  # resumed from step 2 under the extended registry
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 4
    assert out["changed"] == 2 and "model.position.rope.throwaway_scale (1.0 -> 2.0)" in proc.stderr


@dataclass
class Train:
    lr: float = 0.1
    max_steps: int = 10
    patience: int = 3
    device: str = "cpu"


@dataclass
class Model:
    d_model: int = 8
    position: PositionConfig = field(default_factory=PositionConfig)


@dataclass
class Run:
    train: Train = field(default_factory=Train)
    model: Model = field(default_factory=Model)
    out_dir: str = ""


def test_only_the_active_methods_blocks_are_fingerprinted() -> None:
    cfg = Run(model=Model(position=PositionConfig(name="ape+shaw")))
    assert sorted(fingerprint(cfg)["model"]["position"]) == ["name", "shaw", "sinusoidal"]
    other = Run(model=Model(position=PositionConfig(name="ape+shaw", rope=PositionConfig().rope.__class__(base=5.0))))
    assert fingerprint(other) == fingerprint(cfg)  # an unused block never determines the run


def test_a_stored_block_of_a_method_no_longer_registered_is_ignored() -> None:
    stored = to_dict(Run())
    stored["model"]["position"]["retired_method"] = {"x": 1}  # a method since removed
    assert read_stored(Run, stored) == Run()
    record = RunRecord.of(Run())
    record.fingerprint["model"]["position"]["retired_method"] = {"x": 1}
    assert same_run(record, Run()).kind == "fresh"


@pytest.mark.parametrize(("change", "kind", "key"), [
    ({}, "fresh", None),
    ({"max_steps": 20}, "extend", "train.max_steps"),
    ({"patience": 5}, "extend", "train.patience"),
    ({"device": "cuda"}, "fresh", None),  # where a run trained is placement
    ({"lr": 0.2}, "stale", "train.lr"),
])
def test_one_verdict_for_the_same_change_in_every_caller(change: dict, kind: str, key: str | None) -> None:
    """A record as every caller stores it (fingerprint.json, a cell's results.json, a checkpoint's
    state), read back, gives one verdict naming the changed key."""
    saved, now = Run(), Run(train=Train(**{**to_dict(Train()), **change}))
    stored = json.loads(json.dumps(RunRecord.of(saved).to_dict()))
    verdict = same_run(RunRecord.read(stored, steps=10), now)
    assert verdict.kind == kind
    assert (key in verdict.keys) if key else not verdict.keys


def test_a_cap_below_the_steps_trained_is_stale() -> None:
    v = same_run(RunRecord.read(RunRecord.of(Run()).to_dict(), steps=10), Run(train=Train(max_steps=5)))
    assert v.kind == "stale" and "10 steps already trained exceed the new max_steps" in v.detail


@dataclass
class Vocab:
    vocab_size: int = 0


@dataclass
class VocabRun:
    model: Vocab = field(default_factory=Vocab)
    #: as translation's run config declares: the vocabulary size comes from the data
    run_spec: ClassVar[RunSpec] = RunSpec("vocab-test", derived_keys=frozenset({"model.vocab_size"}))


def test_a_derived_key_left_unresolved_is_no_difference() -> None:
    """vocab_size 0 in a new config means "take it from the data": the stored resolved value stands."""
    R, M = VocabRun, Vocab
    stored = RunRecord.of(R(M(400)))
    assert same_run(stored, R()).kind == "fresh"
    assert same_run(stored, R(M(300))).kind == "stale"


@dataclass
class CosineTrain(Train):
    schedule: str = "cosine"


@dataclass
class CosineRun:
    train: CosineTrain = field(default_factory=CosineTrain)
    model: Model = field(default_factory=Model)


@pytest.mark.parametrize(("change", "kind"), [({"max_steps": 20}, "stale"), ({"patience": 5}, "extend")])
def test_a_cosine_horizon_is_compared_as_the_fingerprint(change: dict, kind: str) -> None:
    """Under a cosine schedule ``max_steps`` is in the fingerprint (every update's learning rate
    depends on it): a new cap is another run, while another extension key still extends."""
    saved, now = CosineRun(), CosineRun(train=CosineTrain(**{**to_dict(CosineTrain()), **change}))
    record = {"fingerprint": fingerprint(saved), "extension": {"max_steps": 10, "patience": 3, "device": "cpu"}}
    for stored in (RunRecord.read(RunRecord.of(saved).to_dict(), steps=5), RunRecord.read(record, steps=5)):
        verdict = same_run(stored, now)
        assert verdict.kind == kind and verdict.keys == (f"train.{next(iter(change))}",)
