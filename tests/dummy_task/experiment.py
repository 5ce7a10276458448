"""The dummy task's experiment side: settings × methods × seeds over a base DummyConfig; a cell
is fresh while its record (the run fingerprint) matches; the report is one Markdown table. A cell
of a grid without settings records the grid's task as its setting, as a methods grid's results do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.tasks import ExperimentTask
from posenc.runs.fingerprint import describe_diff, fingerprint
from posenc.runs.same_run import Verdict
from posenc.tasks.base import run_task
from tests.dummy_task.task import DummyConfig, DummyTask


@dataclass
class DummyExperimentConfig:
    name: str = "dummy"
    task: str = "tests.dummy_task"
    out_dir: str = ""
    base: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=lambda: {"plain": {}})
    methods: dict[str, dict[str, Any]] = field(default_factory=lambda: {"nobias": {}})
    seeds: list[int] = field(default_factory=lambda: [1])

    @property
    def root(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")


class DummyExperiment(ExperimentTask):
    experiment_config = DummyExperimentConfig
    run_config = DummyConfig

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


TASK = DummyExperiment()
