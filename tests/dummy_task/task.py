"""The dummy task's run config, model, batches and loss (shapes: B batch, D features), and its grid:
settings × methods × seeds over a base DummyConfig; a cell is fresh while its record (the run
fingerprint) matches; the report is one Markdown table. A cell of a grid without settings records
the grid's task as its setting, as a methods grid's results do."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc.experiments.experiment import Cell, Experiment
from posenc.runs.fingerprint import describe_diff, fingerprint
from posenc.runs.same_run import Verdict
from posenc.runs.spec import RunSpec
from posenc.tasks.base import Task, run_task
from posenc.training.config import TrainConfig
from posenc.training.loss import LossOutput
from tests.dummy_task.experiment import DummyExperimentConfig


@dataclass
class DummyModelConfig:
    dim: int = 4  # D
    bias: bool = False


@dataclass
class DummyData:
    size: int = 64  # training examples
    batch_size: int = 16
    noise: float = 0.0
    data_seed: int = 0  # the true weights and inputs


@dataclass
class DummyTrain(TrainConfig):
    """The shared TrainConfig with defaults for a few quick steps on a CPU."""

    max_steps: int = 4
    schedule: str = "cosine"
    lr: float = 0.05
    warmup: int = 1
    validate_every: int = 2
    save_every: int = 2
    log_every: int = 1
    device: str = "cpu"
    precision: str = "fp32"
    label_smoothing: float = 0.0


@dataclass
class DummyConfig:
    #: Its run directory's own file: the metrics ``evaluate`` writes (it travels in a session's archive).
    run_spec: ClassVar[RunSpec] = RunSpec("tests.dummy_task", run_files=("eval.json",))

    model: DummyModelConfig = field(default_factory=DummyModelConfig)
    data: DummyData = field(default_factory=DummyData)
    train: DummyTrain = field(default_factory=DummyTrain)
    out_dir: str = "runs/dummy"


def examples(cfg: DummyConfig, offset: int, count: int) -> tuple[Tensor, Tensor]:
    """Inputs ``(count, D)`` and targets ``(count,)`` from the data seed (a pure function)."""
    g = torch.Generator().manual_seed(cfg.data.data_seed)
    w = torch.randn(cfg.model.dim, generator=g)
    x = torch.randn(offset + count, cfg.model.dim, generator=g)[offset:]
    return x, x @ w + cfg.data.noise * torch.randn(count, generator=g)


class DummyTask(Task):
    """:class:`posenc.tasks.base.Task` of the dummy regression: a run and its grid."""

    name = "tests.dummy_task"
    experiment_config = DummyExperimentConfig
    run_config = DummyConfig

    def build_model(self, cfg: DummyConfig) -> nn.Module:
        return nn.Linear(cfg.model.dim, 1, bias=cfg.model.bias)

    def width(self, cfg: DummyConfig) -> int:
        return cfg.model.dim

    def train_batches(self, cfg: DummyConfig, epoch: int, rank: int, world: int) -> list[tuple[Tensor, Tensor]]:
        x, y = examples(cfg, 0, cfg.data.size)
        order = torch.randperm(cfg.data.size, generator=torch.Generator().manual_seed(cfg.train.seed * 1000 + epoch))
        b = cfg.data.batch_size
        return [(x[order[i:i + b]], y[order[i:i + b]]) for i in range(rank * b, cfg.data.size, b * world)]

    def valid_batches(self, cfg: DummyConfig) -> list[tuple[Tensor, Tensor]]:
        return [examples(cfg, cfg.data.size, 32)]

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> LossOutput:
        x, y = batch
        err = ((model(x).squeeze(-1) - y) ** 2).sum()
        return LossOutput(err, err.detach(), torch.tensor(x.shape[0]))

    def evaluate(self, cfg: DummyConfig, model: nn.Module, out_dir: Path, result: Any = None) -> dict[str, Any]:
        x, y = examples(cfg, cfg.data.size + 32, 64)
        with torch.no_grad():
            mse = float(((model(x).squeeze(-1) - y) ** 2).mean())
        (Path(out_dir) / "eval.json").write_text(json.dumps({"mse": mse}), encoding="utf-8")
        return {"mse": mse}

    def new_task(self) -> DummyTask:
        return DummyTask()

    def experiment(self, options: DummyExperimentConfig) -> Experiment:
        return Experiment(options.name, options.task, options.root, DummyConfig, options.base, options.methods,
                          tuple(options.seeds), groups=options.settings, options=options)

    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        if results is None:
            return None
        now = fingerprint(exp.run_config(cell))
        return Verdict("fresh") if results.get("record") == now else Verdict("stale", describe_diff(results.get("record") or {}, now))

    def run_cell(self, exp: Experiment, cell: Cell, verdict: Verdict | None, old: dict[str, Any] | None) -> dict[str, Any]:
        cfg = exp.run_config(cell)
        run = run_task(self.new_task(), cfg)
        return {"setting": cell[0] or exp.task, "method": cell[1], "seed": cell[2], "summary": run.summary, "metrics": run.metrics,
                "record": fingerprint(cfg)}

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        return f"done {result['method']} {result['setting']} seed {result['seed']} mse {result['metrics']['mse']:.4f}"

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        out = exp.root / "report"
        out.mkdir(parents=True, exist_ok=True)
        rows = [f"| {r['setting']} | {r['method']} | {r['seed']} | {r['metrics']['mse']:.4f} |" for r in results]
        text = "# dummy\n\n## Results\n\n| setting | method | seed | mse |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
        (out / "README.md").write_text(text, encoding="utf-8")
        return out


TASK = DummyTask()
