"""Typed config of the speech task (CAPE §5.2 at small scale): CTC on FSDD digits.

``train`` is the shared :class:`~posenc.training.config.TrainConfig` with the CTC recipe as
defaults: AdamW (β = 0.9, 0.999, ε = 1e-8, weight decay 0.01), gradient clipping at 1, linear
warm-up over ``warmup`` updates then cosine decay to 5 % of ``lr`` at ``max_steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from posenc.config import require, to_dict, with_defaults
from posenc.data import speech as sd
from posenc.experiments.task_grid import MethodsExperimentConfig
from posenc.models.ctc import CTCModelConfig
from posenc.runs.spec import RunSpec
from posenc.tasks.speech.spec import SPEC
from posenc.training.config import AdamWCosineConfig


@dataclass
class SpeechDataConfig:
    path: str = ""  # "" → $POSENC_FSDD, else ../shared/data/fsdd
    sample_rate: int = 8000
    window_ms: float = 25.0
    hop_ms: float = 10.0
    padding_free: bool = False
    max_train_words: int = 3
    surround_boundary: bool = True
    max_train_duration: float = 2.0
    gap_min: float = 0.1
    gap_max: float = 0.3
    noise_std: float = 0.002
    eval_durations: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    eval_count: int = 40
    eval_clips: bool = True
    limit: int = 0  # > 0: first N recordings of each split only (tests)
    seed: int = 1234
    batch_size: int = 32  # utterances per training batch
    pool_batches: int = 8  # batches drawn (and sorted by length) at a time: one Trainer "epoch"
    eval_batch: int = 16  # utterances per evaluation batch
    # > 0: that many validation utterances (the patience signal), built like training ones from
    # held-out training recordings (indices 5 .. 4 + valid_holdout of every digit and speaker).
    valid_size: int = 0
    valid_holdout: int = 2  # training recordings per (digit, speaker) held out when valid_size > 0

    def __post_init__(self) -> None:
        require(self.sample_rate > 0, f"data.sample_rate must be > 0, got {self.sample_rate}")
        require(0 < self.hop_ms <= self.window_ms, f"data.hop_ms must be in (0, window_ms], got {self.hop_ms}")
        require(self.max_train_words >= 1, f"data.max_train_words must be >= 1, got {self.max_train_words}")
        require(0.0 <= self.gap_min <= self.gap_max,
                f"data: need 0 <= gap_min <= gap_max, got {self.gap_min}, {self.gap_max}")
        require(self.max_train_duration > 0 and self.noise_std >= 0,
                "data.max_train_duration must be > 0 and data.noise_std >= 0")
        require(all(d > 0 for d in self.eval_durations), f"data.eval_durations must be > 0, got {self.eval_durations}")
        require(self.eval_count >= 1 and self.limit >= 0, "data.eval_count must be >= 1 and data.limit >= 0")
        require(min(self.batch_size, self.pool_batches, self.eval_batch) >= 1,
                "data.batch_size, pool_batches and eval_batch must be >= 1")
        require(self.valid_size >= 0 and self.valid_holdout >= 1,
                f"data.valid_size must be >= 0 and data.valid_holdout >= 1, got {self.valid_size}, "
                f"{self.valid_holdout}")

    def determining_dict(self) -> dict[str, Any]:
        """This section's part of a run fingerprint (:mod:`posenc.runs.fingerprint`): every field, but
        without a validation split (``valid_size`` 0) neither validation option, which then changes
        nothing about the run (runs from before the options existed stay fresh)."""
        out = {f.name: to_dict(getattr(self, f.name)) for f in fields(self) if f.init}
        if self.valid_size == 0:
            del out["valid_size"], out["valid_holdout"]
        return out

    @property
    def hop(self) -> float:
        """Hop in samples (may be fractional)."""
        return self.hop_ms * self.sample_rate / 1000

    @property
    def win(self) -> int:
        return sd.window_samples(self.window_ms, self.sample_rate)


SpeechTrainConfig = with_defaults(
    AdamWCosineConfig, "SpeechTrainConfig", "The shared TrainConfig with the CTC recipe as defaults.", __name__,
    max_steps=600, warmup=60, weight_decay=0.01, clip_norm=1.0, lr_floor=0.05, log_every=50)


@dataclass
class SpeechConfig:
    data: SpeechDataConfig = field(default_factory=SpeechDataConfig)
    model: CTCModelConfig = field(default_factory=CTCModelConfig)
    train: SpeechTrainConfig = field(default_factory=SpeechTrainConfig)
    out_dir: str = "runs/speech"

    #: What the task declares about its runs (runs/spec.py).
    run_spec: ClassVar[RunSpec] = SPEC

    def __post_init__(self) -> None:
        p = self.model.position
        half = self.data.hop_ms / 1000 * self.model.downsample / 2
        augment = p.methods.augment
        shift = getattr(p.params(augment), "max_local_shift", None) if augment else None
        # CAPE §5.2: a local shift (in seconds) at most half the frame spacing keeps the frame order.
        require(shift is None or shift <= half + 1e-12,
                f"model.position.{augment}.max_local_shift {shift} s exceeds half the output frame spacing "
                f"({half:g} s) and could reorder frames")


@dataclass
class SpeechExperimentConfig(MethodsExperimentConfig):
    """``posenc experiment`` of ``task: speech``: methods × seeds over a ``base`` SpeechConfig."""

    name: str = "speech"
    task: str = "speech"

    def __post_init__(self) -> None:
        require(self.task == "speech", f"task must be 'speech' for this schema, got {self.task!r}")
        super().__post_init__()

