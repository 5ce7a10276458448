"""The experiment side of the speech task: methods × seeds over a base :class:`SpeechConfig`
(:class:`~posenc.tasks.grid.MethodsGrid`), each cell a CTC run of :class:`SpeechTask` through
:func:`posenc.tasks.base.run_task`, run by the shared grid runner (``--jobs``, freshness,
``--rerun-stale``); the report (:mod:`posenc.tasks.speech.report`) goes to ``<root>/report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.data.speech import check_fsdd
from posenc.experiments.experiment import Experiment
from posenc.tasks.base import TaskRun
from posenc.tasks.grid import MethodsGrid
from posenc.tasks.speech.config import SpeechConfig, SpeechExperimentConfig
from posenc.tasks.speech.report import write_report, write_summary
from posenc.tasks.speech.task import SpeechTask


class SpeechExperiment(MethodsGrid):
    """:class:`posenc.experiments.tasks.ExperimentTask` of the speech task (CAPE §5.2)."""

    experiment_config = SpeechExperimentConfig
    run_config = SpeechConfig

    def new_task(self) -> SpeechTask:
        return SpeechTask()

    def data_check(self, data: Any) -> None:
        """The FSDD recordings of ``data.path`` (or ``$POSENC_FSDD``, else ../shared/data/fsdd)."""
        check_fsdd(data.path)

    def results(self, done: dict[str, Any], run: TaskRun) -> dict[str, Any]:
        """The rows per duration bucket carry the method label, seed, training time, the mean
        loss of the last 20 log rows and the parameter count."""
        train = run.result.train
        final = sum(r["loss"] for r in train[-20:]) / max(1, len(train[-20:]))
        extra = {"seed": done["seed"], "train_s": round(run.result.state.wall_s, 1), "final_loss": round(final, 4),
                 "params": done["summary"]["params"]}
        done["metrics"]["rows"] = [{**r, "method": done["method"], **extra} for r in done["metrics"]["rows"]]
        return done

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        rows = result["metrics"]["rows"]
        return (f"[{result['method']} seed {result['seed']}] {result['summary']['steps']} steps: "
                + ", ".join(f"{r['bucket']} WER {r['wer']}" for r in rows))

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """results.csv, wer_by_duration.png and README.md (mean ± sd over seeds) under ``<root>/report``."""
        out = exp.root / "report"
        longest = exp.run_config(exp.cells()[0]).data.max_train_duration
        write_report([row for r in results for row in r["metrics"]["rows"]], out, longest)
        write_summary(exp.name, results, longest, out)
        return out


TASK = SpeechExperiment()
