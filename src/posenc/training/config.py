"""``TrainConfig``: optimiser, schedule, precision, logging and checkpointing options.

``precision: auto`` trains in bf16 autocast where that is measured faster (training/precision.py);
``compile`` (default ``off``; ``auto`` = on CUDA only, ``on``) runs the forward and loss through
``torch.compile`` (training/compiled.py). Off by default: its gain is small and its warm-up long
for methods with graph breaks (Shaw's Toeplitz check, learned-range checks, the GRU;
docs/performance.md). ``reduce-overhead`` captures the step whole (``fullgraph``; on CUDA
``mode="reduce-overhead"``, CUDA graphs) over batches padded into a few static shapes
(data/batching.Batch.bucketed): for small models whose steps are bound by kernel launches.

Defaults follow SHAPE (Kiyono et al. 2021, App. Table 4): Adam(0.9, 0.98), Noam schedule with
8,000 warm-up steps and scaling factor 2, label smoothing 0.1, no gradient clipping; ε = 1e-9 as
in Shaw et al. (2018, §4.1) and Vaswani et al. (2017).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posenc.config import require, require_finite, require_seeds

PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # auto: bf16 on CUDA with bf16 support, else fp32
#: auto: torch.compile on CUDA, eager on CPU; reduce-overhead: the whole forward+loss+backward as one
#: graph (CUDA graphs on CUDA), batches padded to static shapes (training/compiled.forward_loss)
COMPILE_MODES = ("auto", "on", "off", "reduce-overhead")
DEVICES = ("auto", "cpu", "cuda")
SCHEDULE_NAMES = ("noam", "cosine", "constant")  # builders in training/optimization.py
#: Schedules whose learning rate at every update depends on the run's total updates (cosine decays
#: over ``max_steps``/``max_epochs``): for them those caps are part of what is trained.
HORIZON_SCHEDULES = ("cosine",)
OPTIMIZERS = ("adam", "adamw")


@dataclass
class TrainConfig:
    """The ``train`` section of a run config: how a model is trained, stopped, logged and kept.

    Args:
        seed: seeds the initial weights, the batch order and dropout.
        max_steps: optimizer updates to train; 0 = no step limit (at least one limit is set).
        max_epochs: epochs to train; 0 = no epoch limit.
        max_tokens: tokens per batch per GPU (read by whoever builds the batches).
        update_freq: batches per optimizer update (gradient accumulation).
        lr: the Noam scaling factor (``noam``), else the peak learning rate.
        warmup: warm-up updates (linear warm-up; Noam's ``warmup``).
        schedule: the learning-rate schedule, one of :data:`SCHEDULE_NAMES`
            (training/optimization.py).
        warmup_fraction: for ``cosine`` and ``constant``, warm-up as a fraction of all updates;
            0 uses ``warmup``.
        lr_floor: for ``cosine``, the final learning rate as a fraction of ``lr``.
        optimizer: ``adam`` (L2 ``weight_decay`` in the gradient) or ``adamw`` (decoupled).
        betas: Adam's two decay rates, each in [0, 1).
        eps: Adam's ε.
        weight_decay: the weight decay (>= 0).
        label_smoothing: the label smoothing ε of the loss, in [0, 1).
        clip_norm: clip the gradients' global norm to this; 0 = no clipping.
        precision: one of :data:`PRECISIONS`; ``auto`` is resolved where the run trains
            (training/precision.resolve_precision), so a config that says ``auto`` answers a
            stored run whatever precision it trained in.
        compile: one of :data:`COMPILE_MODES` (YAML ``on``/``off`` read as booleans are taken
            as those): whether the forward and loss go through ``torch.compile``.
        validate_every: updates between validations; 0 = only at the end.
        save_every: updates between checkpoints; 0 = only at the end.
        keep_last: checkpoints kept on disk; 0 = keep all.
        average_last: average the last N checkpoints at the end; 0 or 1 = off.
        average_best: average the N checkpoints of lowest validation loss at the end (needs a
            validation at every checkpoint); 0 or 1 = off.
        patience: stop after this many validations in a row without an improvement; None = off.
        min_delta: an improvement lowers the best validation loss by more than this fraction of
            it (0.001: a 0.1 % gain), so noise-level gains never postpone the stop; a run stopped
            by patience after warm-up is converged (training/convergence.py).
        min_delta_abs: ... and by more than this many nats, so a loss near zero (a solved task,
            falling by large relative steps for ever) reaches its plateau; 0 = off.
        smooth_window: patience compares the moving average of this many last validation losses;
            1 = the raw loss.
        require_flat: patience stops only once the validation curve is flat
            (training/stopping.is_flat); False = as soon as patience runs out.
        log_every: updates between training log lines.
        device: one of :data:`DEVICES`; ``auto`` = CUDA where available.
        num_threads: ``torch.set_num_threads``; 0 = torch's default.
        metric_every: updates between evaluations of the task's validation metric (e.g. greedy
            BLEU); 0 = off.
    """

    seed: int = 1
    max_steps: int = 100000  # optimizer updates; 0 = no step limit
    max_epochs: int = 0  # 0 = no epoch limit (at least one limit must be set)
    max_tokens: int = 4096  # tokens per batch per GPU (used by whoever builds the batches)
    update_freq: int = 1  # gradient accumulation: batches per optimizer update
    lr: float = 2.0  # Noam scaling factor; peak lr for cosine
    warmup: int = 8000
    schedule: str = "noam"  # noam | cosine | constant (training/optimization.py)
    warmup_fraction: float = 0.0  # cosine: warm-up as a fraction of all updates (0: use warmup)
    lr_floor: float = 0.0  # cosine: final lr as a fraction of lr
    optimizer: str = "adam"  # adam | adamw (decoupled weight decay)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0  # 0 = no clipping
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (training/precision.resolve_precision)
    # off | auto | on | reduce-overhead: torch.compile the forward+loss (YAML on/off are booleans)
    compile: str | bool = "off"
    validate_every: int = 1000  # steps; 0 = only at the end
    save_every: int = 5000  # steps; 0 = only at the end
    keep_last: int = 10  # checkpoints kept on disk; 0 = keep all
    average_last: int = 0  # average the last N checkpoints at the end; 0/1 = off
    average_best: int = 0  # average the N checkpoints of lowest validation loss at the end; 0/1 = off
    patience: int | None = None  # stop after this many validations without improvement
    # Patience counts validations that do not lower the best validation loss by more than this
    # fraction of it (0.001: a 0.1 % gain); > 0 so that noise-level gains never postpone the stop.
    # A run stopped this way after warm-up is "converged" (training/convergence.py).
    min_delta: float = 0.001
    # ... and by more than this many nats: a validation loss near zero (a solved algorithmic task)
    # keeps falling by large *relative* steps for ever (1e-3 → 1e-4 → ...), so a relative rule
    # alone never sees its plateau. 0 = off (relative rule only).
    min_delta_abs: float = 0.0
    # Stopping that does not fire on noise: patience compares the moving average of the
    # last ``smooth_window`` validation losses (1 = the raw loss), and with
    # ``require_flat`` it stops only once the last 8 validations no longer fall significantly
    # (training/convergence.is_flat; False = stop as soon as patience runs out).
    smooth_window: int = 1
    require_flat: bool = False
    log_every: int = 100
    device: str = "auto"
    num_threads: int = 0  # torch.set_num_threads; 0 = leave torch's default
    metric_every: int = 0  # steps; 0 = off. The task's validation metric (e.g. greedy BLEU)

    def __post_init__(self) -> None:
        require_finite(self, "train")
        require_seeds([self.seed], "train.seed")
        require(self.max_steps >= 0 and self.max_epochs >= 0, "train: max_steps and max_epochs must be >= 0")
        require(self.max_steps > 0 or self.max_epochs > 0, "train: set max_steps or max_epochs (both are 0)")
        require(self.max_tokens > 0, f"train.max_tokens must be > 0, got {self.max_tokens}")
        require(self.update_freq >= 1, f"train.update_freq must be >= 1, got {self.update_freq}")
        require(self.lr > 0, f"train.lr must be > 0, got {self.lr}")
        require(self.warmup >= 1, f"train.warmup must be >= 1, got {self.warmup}")
        require(
            len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            f"train.betas must be two numbers in [0, 1), got {self.betas}",
        )
        self.betas = [float(b) for b in self.betas]
        require(self.eps > 0, f"train.eps must be > 0, got {self.eps}")
        require(self.weight_decay >= 0, f"train.weight_decay must be >= 0, got {self.weight_decay}")
        require(0.0 <= self.label_smoothing < 1.0,
                f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        require(self.clip_norm >= 0, f"train.clip_norm must be >= 0, got {self.clip_norm}")
        if isinstance(self.compile, bool):
            self.compile = "on" if self.compile else "off"
        require(self.compile in COMPILE_MODES,
                f"train.compile must be one of {'|'.join(COMPILE_MODES)}, got {self.compile!r}")
        require(self.precision in PRECISIONS,
                f"train.precision must be one of {'|'.join(PRECISIONS)}, got {self.precision!r}")
        for name in ("validate_every", "save_every", "keep_last", "average_last", "num_threads", "metric_every"):
            require(getattr(self, name) >= 0, f"train.{name} must be >= 0, got {getattr(self, name)}")
        require(self.log_every >= 1, f"train.log_every must be >= 1, got {self.log_every}")
        require(self.patience is None or self.patience >= 1,
                f"train.patience must be >= 1 or null, got {self.patience}")
        require(self.schedule in SCHEDULE_NAMES,
                f"train.schedule must be one of {'|'.join(SCHEDULE_NAMES)}, got {self.schedule!r}")
        require(self.optimizer in OPTIMIZERS,
                f"train.optimizer must be one of {'|'.join(OPTIMIZERS)}, got {self.optimizer!r}")
        require(0.0 <= self.warmup_fraction < 1.0 and 0.0 <= self.lr_floor <= 1.0,
                f"train.warmup_fraction must be in [0, 1) and train.lr_floor in [0, 1], "
                f"got {self.warmup_fraction}, {self.lr_floor}")
        require(self.average_best >= 0 and 0.0 <= self.min_delta < 1.0,
                f"train.average_best must be >= 0 and train.min_delta in [0, 1), "
                f"got {self.average_best}, {self.min_delta}")
        require(self.min_delta_abs >= 0, f"train.min_delta_abs must be >= 0, got {self.min_delta_abs}")
        require(self.smooth_window >= 1, f"train.smooth_window must be >= 1, got {self.smooth_window}")
        require(self.average_best <= 1 or (self.validate_every > 0 and self.save_every % self.validate_every == 0),
                "train.average_best needs validation at every checkpoint: "
                "save_every must be a multiple of validate_every (> 0)")
        require(self.device in DEVICES, f"train.device must be one of {'|'.join(DEVICES)}, got {self.device!r}")
        require(
            self.keep_last == 0 or self.average_last <= self.keep_last,
            f"train.average_last ({self.average_last}) needs keep_last >= it (got {self.keep_last})",
        )


@dataclass
class AdamWCosineConfig(TrainConfig):
    """The recipe the ViT and CTC tasks share (CAPE §5.1/§5.2 style): AdamW (0.9, 0.999, ε 1e-8),
    peak lr 1e-3 on a cosine schedule, no label smoothing, no periodic validation or checkpoints.
    Each task's train config subclasses it with its own remaining defaults. The options it sets
    are listed below; the others are :class:`TrainConfig`'s.

    Args:
        seed: as in :class:`TrainConfig` (default 0).
        lr: the peak learning rate of the cosine schedule.
        optimizer: ``adamw``.
        betas: AdamW's decay rates (0.9, 0.999).
        eps: AdamW's ε (1e-8).
        schedule: ``cosine``.
        label_smoothing: none (0).
        validate_every: 0: validation only at the end.
        save_every: 0: a checkpoint only at the end.
        keep_last: 0: keep all.
    """

    seed: int = 0
    lr: float = 1e-3  # peak lr of the cosine schedule
    optimizer: str = "adamw"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    schedule: str = "cosine"
    label_smoothing: float = 0.0
    validate_every: int = 0
    save_every: int = 0
    keep_last: int = 0
