"""Translation task: run_task through the Task interface trains exactly what ``posenc train``
(train_run) trains, and evaluates with load.py's BLEU scoring."""

from __future__ import annotations

from pathlib import Path

import torch

from posenc.config import from_dict, merge_overrides
from posenc.tasks.base import Task, run_task
from posenc.tasks.translation import TranslationTask, train_run
from posenc.tasks.translation.config import RunConfig
from posenc.training import load_checkpoint
from tests.helpers.tiny import run_overrides


def _cfg(out: Path, data: Path) -> RunConfig:
    return from_dict(RunConfig, merge_overrides({}, run_overrides(out, data, "model.position.name=shape", "model.position.max_shift=20"), RunConfig))


def test_run_task_equals_posenc_train(tmp_path: Path, toy_prepared: Path) -> None:
    task = TranslationTask(splits=("valid",))
    assert isinstance(task, Task)
    run = run_task(task, _cfg(tmp_path / "task", toy_prepared), tmp_path / "task")
    train_run(_cfg(tmp_path / "pipe", toy_prepared))
    ours = load_checkpoint(tmp_path / "task" / "checkpoints" / "ckpt_00000003").model
    theirs = load_checkpoint(tmp_path / "pipe" / "checkpoints" / "ckpt_00000003").model
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    scores = run.metrics["valid"]
    assert scores["split"] == "valid" and scores["lines"] == 8 and 0.0 <= scores["bleu"] <= 100.0
    assert (tmp_path / "task" / "translations" / "valid.beam2.hyp").is_file()
