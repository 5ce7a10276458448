"""The experiment side of the vision task: methods × seeds over a base :class:`VisionConfig`
(:class:`~posenc.tasks.grid.MethodsGrid`), each cell a run of :class:`VisionTask` through
:func:`posenc.tasks.base.run_task`, run by the shared grid runner (``--jobs``, freshness,
``--rerun-stale``); the report (:mod:`posenc.tasks.vision.report`) goes to ``<root>/report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.data.images import check_fashion_mnist
from posenc.experiments.experiment import Experiment
from posenc.tasks.grid import MethodsGrid
from posenc.tasks.vision.config import VisionConfig, VisionExperimentConfig
from posenc.tasks.vision.report import write_report, write_summary
from posenc.tasks.vision.task import VisionTask


def run_name(exp: Experiment, result: dict[str, Any]) -> str:
    """The run's name in the report: its method label (``label/seedN`` when there are several seeds)."""
    return result["method"] if len(exp.seeds) == 1 else f"{result['method']}/seed{result['seed']}"


class VisionExperiment(MethodsGrid):
    """:class:`posenc.experiments.tasks.ExperimentTask` of the vision task (CAPE §5.1)."""

    experiment_config = VisionExperimentConfig
    run_config = VisionConfig

    def new_task(self) -> VisionTask:
        return VisionTask()

    def data_check(self, data: Any) -> None:
        """Both Fashion-MNIST splits under ``data.root`` (or ``$POSENC_FASHION_MNIST``, else Debian's)."""
        check_fashion_mnist(data.root)

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        m = result["metrics"]
        acc = " ".join(f"{r}:{a:.4f}" for r, a in m["accuracy"].items())
        return f"{run_name(exp, result)}: {result['summary']['steps']} steps; {acc} tta:{m['tta']:.4f}"

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """results.csv, accuracy.png and README.md (mean ± sd over seeds) under ``<root>/report``."""
        out = exp.root / "report"
        out.mkdir(parents=True, exist_ok=True)
        train_resolution = exp.run_config(exp.cells()[0]).model.image_size
        write_report([dict(r, run=run_name(exp, r)) for r in results], out, train_resolution)
        univit = {}
        for cell in exp.cells():
            cfg = exp.run_config(cell)
            univit[cell.method] = list(cfg.univit.resolutions) if cfg.univit.enabled else []
        write_summary(exp.name, results, train_resolution, univit, out)
        return out


TASK = VisionExperiment()
