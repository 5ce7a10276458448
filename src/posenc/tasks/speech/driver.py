"""The speech experiment: one CTC model per entry of ``methods`` trained through the one
Trainer, then the report (:mod:`posenc.tasks.speech.report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from posenc.config import from_dict, merge_overrides
from posenc.tasks.base import run_task, single_process_only
from posenc.tasks.speech.config import SpeechConfig, with_method
from posenc.tasks.speech.report import write_csv, write_report
from posenc.tasks.speech.task import SpeechTask


def run_experiment(cfg: SpeechConfig, task: Any = None, echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Train and evaluate one model per method (``cfg.methods``, or the configured position) in
    ``out_dir/runs/<method>`` (resumable); write results.csv and wer_by_duration.png."""
    task = task or SpeechTask()
    echo = echo or (lambda text: print(text, flush=True))
    out, rows = Path(cfg.out_dir), []
    for method in cfg.methods or [cfg.model.position.name]:
        mcfg = with_method(cfg, method)
        done = run_task(task, mcfg, out / "runs" / method)
        train = done.result.train
        final = sum(r["loss"] for r in train[-20:]) / max(1, len(train[-20:]))
        params = sum(p.numel() for p in done.model.parameters())
        for r in done.metrics["rows"]:
            r.update(train_s=round(done.result.state.wall_s, 1), final_loss=round(final, 4), params=params)
        rows += done.metrics["rows"]
        echo(f"[{method}] {done.result.state.step} steps: " + ", ".join(f"{r['bucket']} WER {r['wer']}" for r in done.metrics["rows"]))
        write_csv(rows, out / "results.csv")
    write_report(cfg, rows, out)
    return rows


def experiment(data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    """``posenc experiment`` entry for ``task: speech`` (CTC on FSDD by duration, CAPE §5.2)."""
    single_process_only("speech", options)
    cfg = from_dict(SpeechConfig, merge_overrides(data, overrides, SpeechConfig))
    run_experiment(cfg)
    return Path(cfg.out_dir)
