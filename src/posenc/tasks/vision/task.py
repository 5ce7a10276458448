"""The vision task: a ViT on Fashion-MNIST trained through the one Trainer (CAPE §5.1).

Shape legend: B batch, C channels, H/W image size, R resolution, V classes.

Batches are index sets of the training images with the resolution they are shown at: the
training resolution, or with ``univit.enabled`` one drawn uniformly per batch from
``univit.resolutions`` (UniViT, CAPE §5.1.2). Every epoch's order and resolutions are a pure
function of (seed, epoch), so a resumed run sees the same batches. The loss is the summed
cross entropy over the batch's images (the Trainer divides by the image count).

The task's grid (``TASK``, a :class:`VisionTask`: the same class): methods × seeds over a base
:class:`VisionConfig`, each cell a run through :func:`posenc.tasks.base.run_task`; its report
(:mod:`posenc.tasks.vision.report`) goes to ``<root>/report``. A cell's ``eval`` section is how it
is scored, not what it is (the spec's scoring section): a change of it rescores the cell's final
model (:func:`final_model`) without training.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.data.images import ImageSet, check_fashion_mnist, load_fashion_mnist, to_model_input
from posenc.errors import DataError, RunDirError
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.task_grid import Trained
from posenc.models.vit import ViT
from posenc.runs.run import Run
from posenc.runs.same_run import Verdict
from posenc.tasks.base import Task
from posenc.tasks.vision.config import VisionConfig, VisionExperimentConfig
from posenc.tasks.vision.evaluate import evaluate_resolutions, evaluate_tta, predict_logits, tta_resolutions
from posenc.tasks.vision.report import write_report, write_summary
from posenc.training.checkpoint import checkpoint_state, load_checkpoint, restore_model
from posenc.training.device import resolve_device
from posenc.training.loss import LossOutput


@dataclass
class ImageBatch:
    """uint8 images ``(B, C, H, W)``, labels ``(B,)`` and the resolution to show them at."""

    images: Tensor
    labels: Tensor
    resolution: int

    def to(self, device: torch.device) -> ImageBatch:
        return ImageBatch(self.images.to(device), self.labels.to(device), self.resolution)


class VisionTask(Task):
    """:class:`~posenc.tasks.base.Task` for image classification by resolution.

    Its grid (``TASK``): methods × seeds over a base run config (the defaults of
    :class:`~posenc.experiments.task_grid.TaskGrid`).
    """

    name = "vision"

    def __init__(self, train_set: ImageSet | None = None, test_set: ImageSet | None = None,
                 valid_set: ImageSet | None = None) -> None:
        self._train, self._test, self._valid = train_set, test_set, valid_set

    def train_set(self, cfg: VisionConfig) -> ImageSet:
        if self._train is None:
            self._train = load_fashion_mnist("train", cfg.data.root, cfg.data.train_size)
        data = self._train
        if len(data) == 0 or int(data.labels.max()) >= cfg.model.num_classes:
            raise DataError(f"training labels must be in 0..{cfg.model.num_classes - 1} (model.num_classes) "
                            "and the set non-empty")
        return data

    def test_set(self, cfg: VisionConfig) -> ImageSet:
        if self._test is None:
            self._test = load_fashion_mnist("test", cfg.data.root, cfg.data.test_size)
        return self._test

    def build_model(self, cfg: VisionConfig) -> nn.Module:
        return ViT(cfg.model)

    def train_batches(self, cfg: VisionConfig, epoch: int, rank: int, world: int) -> list[ImageBatch]:
        """One epoch: a (seed, epoch)-seeded permutation cut into batches, this rank's share."""
        data = self.train_set(cfg)
        gen = torch.Generator().manual_seed(cfg.train.seed * 100003 + epoch)
        chunks = torch.randperm(len(data), generator=gen).split(cfg.data.batch_size)
        sizes = cfg.univit.resolutions
        res = ([sizes[int(i)] for i in torch.randint(len(sizes), (len(chunks),), generator=gen)]
               if cfg.univit.enabled else None)
        return [ImageBatch(data.images[idx], data.labels[idx], res[k] if res else cfg.model.image_size)
                for k, idx in enumerate(chunks) if k % world == rank]

    def valid_set(self, cfg: VisionConfig) -> ImageSet | None:
        """The last ``data.valid_size`` of the 60k training images (None when 0)."""
        if self._valid is None and cfg.data.valid_size > 0:
            full = load_fashion_mnist("train", cfg.data.root)
            n = len(full)
            if cfg.data.valid_size + (cfg.data.train_size or n) > n:
                raise DataError(f"data.valid_size {cfg.data.valid_size} + data.train_size overlap within the {n} "
                                "training images")
            self._valid = ImageSet(full.images[n - cfg.data.valid_size:], full.labels[n - cfg.data.valid_size:])
        return self._valid

    def valid_batches(self, cfg: VisionConfig) -> list[ImageBatch] | None:
        """Validation batches at the training resolution (loss for patience / best-N), or None."""
        data = self.valid_set(cfg)
        if data is None:
            return None
        return [ImageBatch(data.images[idx], data.labels[idx], cfg.model.image_size)
                for idx in torch.arange(len(data)).split(cfg.eval.batch_size)]

    def width(self, cfg: VisionConfig) -> int:
        return cfg.model.d_model

    def loss(self, model: nn.Module, batch: ImageBatch) -> LossOutput:
        logits = model(to_model_input(batch.images, batch.resolution))  # (B, V)
        loss = F.cross_entropy(logits.float(), batch.labels, reduction="sum")
        return LossOutput(loss, loss.detach(), torch.tensor(batch.labels.shape[0]))

    def evaluate(self, cfg: VisionConfig, model: nn.Module, out_dir: Path, result: Any = None) -> dict[str, Any]:
        """Top-1 accuracy at every ``eval.resolutions`` and with resize TTA around the training one."""
        test, bs = self.test_set(cfg), cfg.eval.batch_size
        logits = {r: predict_logits(model, test.images, r, bs) for r in cfg.eval.resolutions}
        acc = evaluate_resolutions(model, test, cfg.eval.resolutions, bs, cache=logits)
        tta_res = tta_resolutions(cfg)
        return {"accuracy": acc, "tta": evaluate_tta(model, test, tta_res, bs, cache=logits),
                "tta_resolutions": tta_res}

    experiment_config = VisionExperimentConfig
    run_config = VisionConfig

    def new_task(self) -> VisionTask:
        return VisionTask()

    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """The default verdict, but a ``rescore`` of a run that cannot be scored as stored (no
        checkpoint at the steps its results record: a committed grid's copy, a cell merged from a
        GPU window) is ``stale``: named in the plan, retrained with ``--rerun-stale``."""
        verdict = super().verdict(exp, cell, results)
        if verdict is None or verdict.kind != "rescore":
            return verdict
        path, why = final_checkpoint(exp.run_config(cell), verdict)
        return verdict if path is not None else replace(verdict, kind="stale",
                                                        detail=f"{verdict.detail}; cannot be rescored: {why}")

    def stored_metrics(self, cell: Cell, cfg: VisionConfig, trained: Trained) -> dict[str, Any]:
        """The cell's stored run scored with today's ``eval``: its :func:`final_model` evaluated by
        a fresh task, as its training evaluates it (the metrics training gives that model)."""
        return self.new_task().evaluate(cfg, final_model(cfg, trained.verdict), Path(cfg.out_dir))

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


def final_model(cfg: VisionConfig, verdict: Verdict | None = None) -> nn.Module:
    """The model a finished run of ``cfg`` ends its training with, the one its training evaluates:
    the weights of its latest checkpoint (never an average), once :func:`final_checkpoint` finds it.

    Args:
        cfg: the run config.
        verdict: the caller's verdict on the run (a grid cell's), so it is not judged again.

    Returns:
        The ViT with those weights, in eval mode, on the run's device (``train.device``).

    Raises:
        RunDirError: the run cannot be scored as stored (one line: why).
    """
    path, why = final_checkpoint(cfg, verdict)
    if path is None:
        raise RunDirError(f"{cfg.out_dir}: cannot score its run as stored ({why}); retrain it with --rerun-stale")
    model = ViT(cfg.model)
    restore_model(model, load_checkpoint(path, with_optimizer=False))
    return model.to(resolve_device(cfg.train.device)).eval()


def final_checkpoint(cfg: VisionConfig, verdict: Verdict | None = None) -> tuple[Path | None, str]:
    """The latest checkpoint of the run in ``cfg.out_dir``, when the run and that checkpoint are
    judged to be ``cfg``'s (:meth:`~posenc.runs.run.Run.judged`) and it is at the steps the
    verdict's record trained (the model its results scored).

    Args:
        cfg: the run config.
        verdict: the caller's verdict on the run (a grid cell's: its record's steps), judged once.

    Returns:
        The checkpoint directory and ``""``; or None and why there is none to score.
    """
    run = Run.judged(cfg, Path(cfg.out_dir), load=False, verdict=verdict)
    if run.verdict is None:
        return None, "its directory records no run"
    if run.verdict.kind == "stale":
        return None, run.verdict.detail
    if run.checkpoint_path is None:
        return None, "no checkpoint of the trained run"
    step = checkpoint_state(run.checkpoint_path).get("step")
    steps = verdict.record.steps if verdict is not None and verdict.record is not None else None
    if steps is not None and step != steps:
        return None, f"its latest checkpoint is at step {step}, its results at {steps}"
    return run.checkpoint_path, ""


def run_name(exp: Experiment, result: dict[str, Any]) -> str:
    """The run's name in the report: its method label (``label/seedN`` when there are several seeds)."""
    return result["method"] if len(exp.seeds) == 1 else f"{result['method']}/seed{result['seed']}"


TASK = VisionTask()
