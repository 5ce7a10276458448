"""Image-classification experiments for CAPE §5.1 at small scale: train ViTs with 2-D position
methods on Fashion-MNIST and evaluate them at resolutions not seen in training.

Shape legend: B batch, C channels, H/W image size, R resolution, V classes.

* :func:`train_vit` trains one model (AdamW, linear warmup then cosine decay); with
  ``train.univit`` every batch is resized to a resolution drawn uniformly from
  ``train.univit_resolutions`` (UniViT, CAPE §5.1.2).
* :func:`evaluate_resolutions` gives top-1 accuracy per test resolution (test images resized,
  CAPE §5.1 "Evaluation"); :func:`evaluate_tta` averages the logits over several resolutions
  (CAPE Table 1: r and r ± 32 px at 224 px, i.e. ± 2 patches; here ± ``eval.tta_offset``).
* :func:`run_experiment` trains every method of ``experiment.methods`` (and the UniViT variants
  of ``experiment.univit_methods``) and writes ``results.csv`` and ``accuracy.png``.

Command line: ``python -m posenc.vision CONFIG.yaml [key=value ...] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import copy
import csv
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.config import load_config, require, save_yaml
from posenc.data.images import ImageSet, load_fashion_mnist, to_model_input
from posenc.errors import DataError, PosencError
from posenc.models.vit import ViT, ViTConfig

#: Default test resolutions: all divisible by the default patch size 4 (7×7 grid at 28 px).
DEFAULT_RESOLUTIONS = (16, 20, 28, 36, 44)


@dataclass
class VisionDataConfig:
    root: str | None = None  # Fashion-MNIST directory (None: $POSENC_FASHION_MNIST or Debian's)
    train_size: int | None = None  # first examples of the 60k training split (None: all)
    test_size: int | None = None  # first examples of the 10k test split

    def __post_init__(self) -> None:
        for name in ("train_size", "test_size"):
            value = getattr(self, name)
            require(value is None or value >= 1, f"data.{name} must be >= 1, got {value}")


@dataclass
class VisionTrainConfig:
    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1  # of all steps, linear warmup before the cosine decay
    seed: int = 0
    threads: int = 2
    univit: bool = False
    univit_resolutions: list[int] = field(default_factory=lambda: [16, 20, 24, 28, 32, 36, 40])

    def __post_init__(self) -> None:
        require(self.epochs >= 1 and self.batch_size >= 1, "train.epochs and train.batch_size must be >= 1")
        require(self.lr > 0 and self.weight_decay >= 0, "train.lr must be > 0 and train.weight_decay >= 0")
        require(0 <= self.warmup_fraction < 1, f"train.warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        require(self.threads >= 1, f"train.threads must be >= 1, got {self.threads}")
        require(not self.univit or len(self.univit_resolutions) > 0, "train.univit needs train.univit_resolutions")


@dataclass
class VisionEvalConfig:
    resolutions: list[int] = field(default_factory=lambda: list(DEFAULT_RESOLUTIONS))
    tta_offset: int = 8  # TTA averages resolutions r - offset, r, r + offset at r = model.image_size
    batch_size: int = 500

    def __post_init__(self) -> None:
        require(len(self.resolutions) > 0, "eval.resolutions must not be empty")
        require(self.tta_offset >= 0 and self.batch_size >= 1, "eval.tta_offset must be >= 0, eval.batch_size >= 1")


@dataclass
class VisionExperimentConfig:
    methods: list[str] = field(default_factory=lambda: ["learned", "sinusoidal-2d", "cape-2d", "none"])
    univit_methods: list[str] = field(default_factory=list)
    # CAPE §5.1.2 trains UniViT with CAPE without global scaling (λ = 1).
    univit_max_global_scaling: float = 1.0


@dataclass
class VisionConfig:
    model: ViTConfig = field(default_factory=ViTConfig)
    data: VisionDataConfig = field(default_factory=VisionDataConfig)
    train: VisionTrainConfig = field(default_factory=VisionTrainConfig)
    eval: VisionEvalConfig = field(default_factory=VisionEvalConfig)
    experiment: VisionExperimentConfig = field(default_factory=VisionExperimentConfig)
    task: str = "vision"  # lets `posenc experiment` pick this schema
    out_dir: str = "runs/vision"

    def __post_init__(self) -> None:
        require(self.task == "vision", f"task must be 'vision' for a VisionConfig, got {self.task!r}")
        p = self.model.patch
        for where, sizes in (("train.univit_resolutions", self.train.univit_resolutions), ("eval.resolutions", self.eval.resolutions)):
            bad = [r for r in sizes if r < p or r % p]
            require(not bad, f"{where}: {bad[0] if bad else ''} is not a positive multiple of model.patch {p}")
        from posenc.positions.vision import VISION_POSITIONS

        for name in self.experiment.methods + self.experiment.univit_methods:
            require(name in VISION_POSITIONS, f"experiment method {name!r} unknown (known: {', '.join(VISION_POSITIONS)})")


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warmup to 1 over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    return list(torch.randperm(n, generator=generator).split(batch_size))


def train_vit(cfg: VisionConfig, train_set: ImageSet | None = None) -> tuple[ViT, dict[str, Any]]:
    """Train a ViT on Fashion-MNIST (or ``train_set``); returns the model (eval mode) and metrics.

    Metrics: ``losses`` (per step), ``first_loss``/``last_loss`` (mean of the first/last 10
    steps), ``steps``, ``seconds``, ``train_accuracy`` (running, last epoch). Sets torch's
    (process-wide) thread count to ``train.threads``.
    """
    torch.set_num_threads(cfg.train.threads)
    torch.manual_seed(cfg.train.seed)
    data = train_set if train_set is not None else load_fashion_mnist("train", cfg.data.root, cfg.data.train_size)
    if len(data) == 0 or int(data.labels.max()) >= cfg.model.num_classes:
        raise DataError(f"training labels must be in 0..{cfg.model.num_classes - 1} (model.num_classes) and the set non-empty")
    model = ViT(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    gen = torch.Generator().manual_seed(cfg.train.seed)
    steps_per_epoch = math.ceil(len(data) / cfg.train.batch_size)
    total = steps_per_epoch * cfg.train.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, int(cfg.train.warmup_fraction * total)))
    losses: list[float] = []
    start, correct = time.perf_counter(), 0
    model.train()
    for _ in range(cfg.train.epochs):
        correct = 0
        for idx in _batches(len(data), cfg.train.batch_size, gen):
            res = cfg.model.image_size
            if cfg.train.univit:  # UniViT: one random resolution per batch (CAPE §5.1.2)
                res = cfg.train.univit_resolutions[int(torch.randint(len(cfg.train.univit_resolutions), (1,), generator=gen))]
            logits = model(to_model_input(data.images[idx], res))
            loss = F.cross_entropy(logits, data.labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            correct += int((logits.argmax(-1) == data.labels[idx]).sum())
    model.eval()
    k = min(10, len(losses))
    metrics = {
        "losses": losses, "steps": len(losses), "seconds": time.perf_counter() - start,
        "first_loss": sum(losses[:k]) / k, "last_loss": sum(losses[-k:]) / k,
        "train_accuracy": correct / len(data),
    }
    return model, metrics


@torch.no_grad()
def predict_logits(model: ViT, images: Tensor, resolution: int, batch_size: int = 500) -> Tensor:
    """uint8 images ``(B, C, H, W)`` resized to ``resolution`` → logits ``(B, V)`` (eval mode)."""
    was_training = model.training
    model.eval()
    out = torch.cat([model(to_model_input(chunk, resolution)) for chunk in images.split(batch_size)])
    model.train(was_training)
    return out


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Top-1 accuracy of logits ``(B, V)`` against labels ``(B,)``."""
    return float((logits.argmax(-1) == labels).float().mean())


def evaluate_resolutions(
    model: ViT, test_set: ImageSet, resolutions: list[int] | tuple[int, ...] = DEFAULT_RESOLUTIONS, batch_size: int = 500
) -> dict[int, float]:
    """Top-1 accuracy of ``model`` on ``test_set`` resized to each resolution: ``{R: accuracy}``."""
    return {int(r): accuracy(predict_logits(model, test_set.images, r, batch_size), test_set.labels) for r in resolutions}


def evaluate_tta(
    model: ViT, test_set: ImageSet, resolutions: list[int], batch_size: int = 500, cache: dict[int, Tensor] | None = None
) -> float:
    """Top-1 accuracy of the logits averaged over ``resolutions`` (resize TTA, CAPE Table 1).

    ``cache`` maps resolution → logits already computed for ``test_set``; missing ones are added.
    """
    cache = {} if cache is None else cache
    for r in resolutions:
        if r not in cache:
            cache[r] = predict_logits(model, test_set.images, r, batch_size)
    return accuracy(torch.stack([cache[r] for r in resolutions]).mean(0), test_set.labels)


def run_configs(cfg: VisionConfig) -> list[tuple[str, VisionConfig]]:
    """(run name, config) for every method, then every UniViT variant, of ``cfg.experiment``."""
    runs = []
    for name in cfg.experiment.methods:
        run = copy.deepcopy(cfg)
        run.model.position.name, run.train.univit = name, False
        runs.append((name, run))
    for name in cfg.experiment.univit_methods:
        run = copy.deepcopy(cfg)
        run.model.position.name, run.train.univit = name, True
        run.model.position.max_global_scaling = cfg.experiment.univit_max_global_scaling
        runs.append((f"univit/{name}", run))
    return runs


def _log(message: str) -> None:
    print(message, flush=True)


def run_experiment(cfg: VisionConfig, out_dir: str | Path, log: Any = _log) -> list[dict[str, Any]]:
    """Train and evaluate every run of ``cfg.experiment``; writes results.csv, accuracy.png and
    config.yaml under ``out_dir``. Returns the CSV rows (run, eval, resolution, accuracy)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_yaml(cfg, out / "config.yaml")
    train_set = load_fashion_mnist("train", cfg.data.root, cfg.data.train_size)
    test_set = load_fashion_mnist("test", cfg.data.root, cfg.data.test_size)
    r0, off = cfg.model.image_size, cfg.eval.tta_offset
    tta_res = sorted({r for r in (r0 - off, r0, r0 + off) if r >= cfg.model.patch and r % cfg.model.patch == 0})
    rows: list[dict[str, Any]] = []
    for name, run in run_configs(cfg):
        model, metrics = train_vit(run, train_set)
        logits = {r: predict_logits(model, test_set.images, r, run.eval.batch_size) for r in run.eval.resolutions}
        acc = {r: accuracy(out, test_set.labels) for r, out in logits.items()}
        rows += [{"run": name, "eval": "single", "resolution": r, "accuracy": a} for r, a in acc.items()]
        tta = evaluate_tta(model, test_set, tta_res, run.eval.batch_size, cache=logits)
        rows.append({"run": name, "eval": "tta:" + "/".join(map(str, tta_res)), "resolution": r0, "accuracy": tta})
        log(f"{name}: {metrics['steps']} steps in {metrics['seconds']:.0f}s, loss {metrics['first_loss']:.3f}->"
            f"{metrics['last_loss']:.3f}; " + " ".join(f"{r}:{a:.4f}" for r, a in acc.items()) + f" tta:{tta:.4f}")
    write_csv(rows, out / "results.csv")
    plot_accuracy(rows, out / "accuracy.png", train_resolution=r0)
    return rows


def write_csv(rows: list[dict[str, Any]], path: str | Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["run", "eval", "resolution", "accuracy"])
        writer.writeheader()
        writer.writerows(rows)


def plot_accuracy(rows: list[dict[str, Any]], path: str | Path, train_resolution: int) -> None:
    """Accuracy vs test resolution, one line per run (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name in dict.fromkeys(r["run"] for r in rows):
        pts = sorted((r["resolution"], r["accuracy"]) for r in rows if r["run"] == name and r["eval"] == "single")
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", linestyle="--" if "univit" in name else "-", label=name)
    ax.axvline(train_resolution, color="grey", linewidth=0.8)
    ax.set_xlabel("test resolution (px)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m posenc.vision", description="ViT position-method experiment (CAPE §5.1)")
    parser.add_argument("config", help="YAML config (e.g. configs/vision/fashion_mnist_small.yaml)")
    parser.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides, e.g. train.epochs=1")
    parser.add_argument("--out", help="output directory (default: the config's out_dir)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(VisionConfig, args.config, args.overrides)
        run_experiment(cfg, args.out or cfg.out_dir)
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
