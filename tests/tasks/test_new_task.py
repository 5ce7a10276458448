"""A new task is four files: a config, a spec, a task and a report (docs/architecture.md, "A
task"). A throwaway task written here, in a package of exactly those four files outside posenc,
is found by its ``task:`` key, trained by ``posenc train`` and run as a grid by ``posenc experiment``
(its cells listed, trained through run_task, reported), with no other file of posenc changed; the
same four files as a folder under ``posenc.tasks`` (no ``__init__.py``) are a task known by name."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers.tiny import cli

REF = "throwaway.task"

FILES = {
    "config.py": '''
        """The throwaway task's run config and experiment schema."""
        from dataclasses import dataclass, field
        from typing import ClassVar

        from posenc.runs.spec import RunSpec
        from posenc.experiments.task_grid import MethodsExperimentConfig
        from posenc.training.config import TrainConfig
        from throwaway.spec import SPEC


        @dataclass
        class Model:
            dim: int = 3
            bias: bool = False


        @dataclass
        class Data:
            seed: int = 0  # the true weights and inputs
            size: int = 32  # training examples


        @dataclass
        class Train(TrainConfig):
            max_steps: int = 3
            schedule: str = "cosine"
            lr: float = 0.05
            warmup: int = 1
            validate_every: int = 3
            save_every: int = 3
            device: str = "cpu"
            precision: str = "fp32"


        @dataclass
        class Config:
            run_spec: ClassVar[RunSpec] = SPEC
            model: Model = field(default_factory=Model)
            data: Data = field(default_factory=Data)
            train: Train = field(default_factory=Train)
            out_dir: str = "runs/throwaway"


        @dataclass
        class Experiment(MethodsExperimentConfig):
            task: str = "throwaway.task"
        ''',
    "spec.py": '''
        """What the throwaway task declares about its runs: its own file in a run directory."""
        from posenc.runs.spec import RunSpec, declare

        SPEC = declare(RunSpec("throwaway.task", run_files=("mse.json",)))
        ''',
    "task.py": '''
        """The throwaway task: y = x . w by a linear model; the same class is its grid, methods x seeds."""
        import json
        from pathlib import Path

        import torch
        from torch import nn

        from posenc.tasks.base import Task
        from posenc.training.loss import LossOutput
        from throwaway.config import Config, Experiment
        from throwaway.report import write_report


        def examples(cfg, offset, count):
            g = torch.Generator().manual_seed(cfg.data.seed)
            w = torch.randn(cfg.model.dim, generator=g)
            x = torch.randn(offset + count, cfg.model.dim, generator=g)[offset:]
            return x, x @ w


        class Throwaway(Task):
            name = "throwaway.task"
            experiment_config = Experiment
            run_config = Config

            def build_model(self, cfg):
                return nn.Linear(cfg.model.dim, 1, bias=cfg.model.bias)

            def train_batches(self, cfg, epoch, rank, world):
                x, y = examples(cfg, 0, cfg.data.size)
                return [(x[i:i + 8], y[i:i + 8]) for i in range(rank * 8, cfg.data.size, 8 * world)]

            def valid_batches(self, cfg):
                return [examples(cfg, cfg.data.size, 16)]

            def loss(self, model, batch):
                x, y = batch
                err = ((model(x).squeeze(-1) - y) ** 2).sum()
                return LossOutput(err, err.detach(), torch.tensor(x.shape[0]))

            def width(self, cfg):
                return cfg.model.dim

            def evaluate(self, cfg, model, out_dir, result):
                x, y = examples(cfg, cfg.data.size + 16, 16)
                with torch.no_grad():
                    mse = float(((model(x).squeeze(-1) - y) ** 2).mean())
                (Path(out_dir) / "mse.json").write_text(json.dumps({"mse": mse}))
                return {"mse": mse}

            def new_task(self):
                return Throwaway()

            def summary_line(self, exp, result):
                return f"done {result['method']} seed {result['seed']} mse {result['metrics']['mse']:.4f}"

            def report(self, exp, results):
                return write_report(exp, results)


        TASK = Throwaway()
        ''',
    "report.py": '''
        """The throwaway grid's report: one Markdown table."""
        def write_report(exp, results):
            out = exp.root / "report"
            out.mkdir(parents=True, exist_ok=True)
            rows = [f"| {r['method']} | {r['seed']} | {r['metrics']['mse']:.4f} |" for r in results]
            text = "# throwaway\\n\\n## Results\\n\\n| method | seed | mse |\\n|---|---|---|\\n" + "\\n".join(rows) + "\\n"
            (out / "README.md").write_text(text, encoding="utf-8")
            return out
        ''',
}


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package ``throwaway`` (its four files, nothing else) importable for this test only
    (its modules and its declared spec forgotten afterwards)."""
    from posenc.runs import spec

    monkeypatch.setattr(spec, "_DECLARED", dict(spec._DECLARED))
    package = tmp_path / "src" / "throwaway"
    package.mkdir(parents=True)
    for name, text in FILES.items():
        (package / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    yield package
    for name in [m for m in sys.modules if m == "throwaway" or m.startswith("throwaway.")]:
        del sys.modules[name]


def test_a_task_of_four_files_is_found_trained_and_run_as_a_grid(
        throwaway: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from posenc.experiments.runner import load_grid
    from posenc.experiments.tasks import find_task
    from posenc.tasks.base import Task

    assert sorted(p.name for p in throwaway.iterdir()) == ["config.py", "report.py", "spec.py", "task.py"]
    task = find_task(REF)
    assert isinstance(task, Task) and type(task).__bases__ == (Task,) and task.run_config.__name__ == "Config"

    run = tmp_path / "one"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"task": REF, "out_dir": str(run), "model": {"dim": 4}}), encoding="utf-8")
    code, out, err = cli(capsys, "train", "--config", config)
    assert code == 0, err
    assert json.loads(out)["steps"] == 3
    assert (run / "mse.json").is_file() and (run / "fingerprint.json").is_file()  # run_task owned the directory

    exp = tmp_path / "grid.yaml"
    exp.write_text(yaml.safe_dump({"task": REF, "name": "throwaway", "out_dir": str(tmp_path / "grid"),
                                   "methods": {"plain": {}, "bias": {"model.bias": True}}, "seeds": [1, 2]},
                                  sort_keys=False),
                   encoding="utf-8")
    cells = load_grid(str(exp)).cells()
    assert [(method, seed) for _, method, seed in cells] == [("plain", 1), ("plain", 2), ("bias", 1), ("bias", 2)]
    code, out, err = cli(capsys, "experiment", exp)
    assert code == 0, err
    table = (tmp_path / "grid" / "report" / "README.md").read_text(encoding="utf-8")
    assert all(f"| {method} | {seed} |" in table for _, method, seed in cells)
    results = json.loads((tmp_path / "grid" / "bias" / "seed2" / "results.json").read_text(encoding="utf-8"))
    assert results["summary"]["steps"] == 3 and results["metrics"]["mse"] >= 0


@pytest.fixture
def quartet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The same four files as ``posenc.tasks.quartet``: a folder beside posenc's tasks with no
    ``__init__.py`` (its spec, task folders and modules forgotten afterwards)."""
    import posenc.tasks
    from posenc.runs import spec

    monkeypatch.setattr(spec, "_DECLARED", dict(spec._DECLARED))
    package = tmp_path / "tasks" / "quartet"
    package.mkdir(parents=True)
    for name, text in FILES.items():
        text = textwrap.dedent(text).lstrip().replace('"throwaway.task"', '"quartet"')
        (package / name).write_text(text.replace("throwaway.", "posenc.tasks.quartet."), encoding="utf-8")
    where = [*posenc.tasks.__path__, str(package.parent)]
    monkeypatch.setattr(posenc.tasks, "__path__", where)  # where its modules are imported from
    monkeypatch.setattr(posenc.tasks.__spec__, "submodule_search_locations", where)  # where task folders are found
    spec.task_packages.cache_clear()
    yield package
    spec.task_packages.cache_clear()
    for name in [m for m in sys.modules if m.startswith("posenc.tasks.quartet")]:
        del sys.modules[name]


def test_a_task_folder_of_four_files_is_a_known_task(quartet: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A task under ``posenc.tasks`` needs no ``__init__.py``: its folder is found by its files and
    ``task: NAME`` is its task module's ``TASK``."""
    from posenc.experiments.tasks import find_task, known_tasks

    assert sorted(p.name for p in quartet.iterdir()) == ["config.py", "report.py", "spec.py", "task.py"]
    assert "quartet" in known_tasks()
    assert find_task("quartet").run_config.__module__ == "posenc.tasks.quartet.config"
    exp = tmp_path / "grid.yaml"
    exp.write_text(yaml.safe_dump({"task": "quartet", "name": "quartet", "out_dir": str(tmp_path / "grid"),
                                   "methods": {"plain": {}}, "seeds": [1]}), encoding="utf-8")
    code, out, err = cli(capsys, "experiment", exp)
    assert code == 0, err
    assert "| plain | 1 |" in (tmp_path / "grid" / "report" / "README.md").read_text(encoding="utf-8")
