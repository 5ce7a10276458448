"""Training and decoding throughput of the position methods, interleaved and paired with APE.

Shape legend: B batch, S source length, T target length, V vocabulary.

Every timed figure is taken in rounds: one round runs one step of every method, in a rotated
order, so that slow drifts of the machine (other processes, clocks) hit all methods alike. The
ratio to APE is the median over rounds of the paired ratio ``time(ape) / time(method)``, so
APE's own ratio is exactly 1.0.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor, nn

from posenc.errors import ConfigError
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import resolve
from posenc.positions.shaw import set_backend as set_shaw_backend
from posenc.positions.shaw_flex import REGIONS
from posenc.training.compiled import resolve_compile
from posenc.training.precision import autocast as training_autocast
from posenc.training.precision import resolve_precision

#: The methods benchmarked by default, by position config name (``gru``: the RNN-Transformer,
#: ``shaw``: RPE); any registered method or combination (``rope``, ``ape+shaw``, ...) is accepted.
DEFAULT_METHODS = ("ape", "shape", "cape", "gru", "shaw")
BOS, EOS = 2, 3
#: Shaw attention backends the bench can force (``--shaw-backend``; see ``ShawHook.backend``).
SHAW_BACKENDS = ("auto", "explicit", *REGIONS)
PRECISIONS = ("auto", "fp32", "bf16")  # auto: training/precision.resolve_precision (fp32 on CPU below d_model 256)
#: auto: torch.compile on CUDA, eager on CPU; reduce-overhead: the training loop's step captured whole
#: (``train.compile: reduce-overhead``; the per-method steps are compiled as with ``on``)
COMPILE_MODES = ("auto", "on", "off", "reduce-overhead")


@dataclass
class BenchConfig:
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    lengths: list[int] = field(default_factory=lambda: [32, 128, 512, 1024, 2048])
    reps: int = 5
    warmup: int = 1
    batch_tokens: int = 2048  # per side; the batch is max(1, batch_tokens // L) sentences of length L
    preset: str = "transformer-small"
    vocab: int = 8000
    model: dict[str, Any] = field(default_factory=dict)  # extra ModelConfig overrides
    device: str = "cpu"
    decode_batch: int = 16
    decode_len: int = 32
    decode_reps: int = 3
    beam: int = 4
    memory: bool = True
    seed: int = 0
    threads: int = 0  # torch.set_num_threads in every process of the run (0: leave torch's default)
    shaw_backend: str = "auto"  # ShawHook.backend: auto (FlexAttention on CUDA), explicit, flex, dense
    precision: str = "auto"  # training autocast (PRECISIONS)
    compile: str = "off"  # torch.compile of the training step's forward+loss (COMPILE_MODES)
    loop_steps: int = 0  # timed Trainer steps of the training-loop benchmark (bench/train_loop.py); 0 = off
    loop_tokens: int = 8192  # its train.max_tokens (padded tokens per batch)
    loop_preset: str = "transformer-small"
    loop_model: dict[str, Any] = field(default_factory=dict)  # ModelConfig overrides of that loop's model

    def __post_init__(self) -> None:
        self.methods = list(dict.fromkeys(self.methods))
        if not self.methods:
            raise ConfigError("bench: give at least one method")
        for method in self.methods:
            try:
                resolve(method)  # the position registry decides what a method name is
            except ConfigError as err:
                raise ConfigError(f"bench: {err}") from None
        if "ape" not in self.methods:
            self.methods = ["ape", *self.methods]  # every ratio is to APE measured in the same run
        if not self.lengths or min(self.lengths) < 2:
            raise ConfigError(f"bench: lengths must be >= 2, got {self.lengths}")
        if self.reps < 1 or self.warmup < 0 or self.batch_tokens < 1:
            raise ConfigError("bench: reps >= 1, warmup >= 0 and batch_tokens >= 1 are required")
        if self.shaw_backend not in SHAW_BACKENDS:
            raise ConfigError(f"bench: shaw_backend must be one of {', '.join(SHAW_BACKENDS)}, "
                              f"got {self.shaw_backend!r}")
        if self.loop_steps < 0 or self.loop_tokens < 1:
            raise ConfigError("bench: loop_steps >= 0 and loop_tokens >= 1 are required")
        if self.precision not in PRECISIONS or self.compile not in COMPILE_MODES:
            raise ConfigError(f"bench: precision must be one of {'|'.join(PRECISIONS)} and compile one of "
                              f"{'|'.join(COMPILE_MODES)}, got {self.precision!r}, {self.compile!r}")

    def width(self) -> int:
        """d_model of the benchmark model (the preset with the ``model`` overrides)."""
        return ModelConfig.from_preset(self.preset, vocab_size=self.vocab, **self.model).d_model

    def train_precision(self) -> str:
        """The resolved training precision, fp32 or bf16, as the trainer resolves it for this
        model's width (training/precision.resolve_precision)."""
        return resolve_precision(self.precision, torch.device(self.device), self.width())

    def fp32_reference(self) -> bool:
        """Time fp32 steps in the same rounds (the ``×fp32`` ratio)? With an explicit ``bf16``."""
        return self.precision == "bf16" and self.train_precision() == "bf16"

    def compiled(self) -> bool:
        """Whether the training step is compiled (``auto``: on CUDA only; training/compiled.resolve_compile)."""
        return resolve_compile(self.compile, torch.device(self.device))

    def loop_width(self) -> int:
        """d_model of the training loop's model (``loop_preset`` with the ``loop_model`` overrides),
        which may differ from the per-method steps' model."""
        return ModelConfig.from_preset(self.loop_preset, vocab_size=self.vocab, **self.loop_model).d_model

    def loop_label(self) -> str:
        """The training loop's configuration as its records name it: ``captured-``, ``compiled-`` or
        ``eager-`` and the precision resolved for the loop's own model width, as the trainer would
        resolve it for that model (``auto`` on a native-bf16 CPU depends on the width)."""
        how = "captured" if self.compile == "reduce-overhead" else "compiled" if self.compiled() else "eager"
        return f"{how}-{resolve_precision(self.precision, torch.device(self.device), self.loop_width())}"


def build_model(method: str, cfg: BenchConfig) -> Seq2SeqTransformer:
    """The benchmark model for a method; dropout as in the preset (training cost includes it)."""
    torch.manual_seed(cfg.seed)
    mcfg = ModelConfig.from_preset(cfg.preset, vocab_size=cfg.vocab, position={"name": method}, **cfg.model)
    model = Seq2SeqTransformer(mcfg).to(cfg.device)
    set_shaw_backend(model, cfg.shaw_backend)  # no-op for models without Shaw hooks
    return model


def batch_size(length: int, batch_tokens: int) -> int:
    return max(1, batch_tokens // length)


def synthetic_batch(batch: int, length: int, vocab: int, device: str, seed: int = 0) -> dict[str, Tensor]:
    """Random tokens in [4, V) without padding: src/tgt_in/tgt_out ``(B, L)``, masks all True."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=gen)
    tgt = torch.randint(4, vocab, (batch, length + 1), generator=gen)
    tgt[:, 0] = BOS
    mask = torch.ones(batch, length, dtype=torch.bool)
    out = {"src": src, "src_mask": mask, "tgt_in": tgt[:, :-1], "tgt_mask": mask, "tgt_out": tgt[:, 1:]}
    return {k: v.to(device) for k, v in out.items()}


def autocast(device: str, precision: str = "auto", width: int | None = None) -> Any:
    """The trainer's autocast for ``precision`` on ``device``, resolved as the trainer does
    (``auto``: bf16 on a CUDA device with bf16 support, on a CPU by native bf16 and ``width``;
    nothing for fp32)."""
    dev = torch.device(device)
    return training_autocast(resolve_precision(precision, dev, width), dev.type)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class TrainStep:
    """One Adam step (forward, cross-entropy, backward, update) of a model on a fixed batch.

    On CUDA: Adam's fused kernel, and ``precision``/``compiled`` as given (``make_step`` takes
    them from the BenchConfig). On CPU: torch's default Adam, eager unless ``compiled``, fp32
    (the step the CPU tables were measured with) unless ``precision`` resolves to bf16 (CPU
    autocast, fp32 master weights and Adam state). The compiled step traces the
    forward and the loss once per fixed batch shape (``dynamic=False``: every call has the same
    shapes); its backward is compiled by AOTAutograd."""

    def __init__(self, model: Seq2SeqTransformer, batch: dict[str, Tensor], device: str,
                 precision: str = "auto", compiled: bool = False) -> None:
        self.model, self.batch, self.device = model.train(), batch, device
        width = model.cfg.d_model if hasattr(model, "cfg") else getattr(model, "width", None)
        self.precision = resolve_precision(precision, torch.device(device), width)  # resolved once
        fused = {"fused": True} if device.startswith("cuda") else {}
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **fused)
        self.tokens = int(batch["src_mask"].sum() + batch["tgt_mask"].sum())
        self.loss = torch.compile(self._loss, dynamic=False) if compiled else self._loss

    def _loss(self) -> Tensor:
        b = self.batch
        with training_autocast(self.precision, torch.device(self.device).type):
            logits = self.model(b["src"], b["src_mask"], b["tgt_in"], b["tgt_mask"])
            return nn.functional.cross_entropy(logits.flatten(0, 1).float(), b["tgt_out"].flatten())

    def forward_backward(self) -> None:
        self.loss().backward()

    def __call__(self) -> float:
        """Run one step; returns its wall-clock seconds."""
        sync(self.device)
        start = time.perf_counter()
        self.forward_backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync(self.device)
        return time.perf_counter() - start


def fresh_compile_cache(cfg: BenchConfig) -> None:
    """Drop the compiled graphs of earlier models before compiling new ones: torch.compile keeps
    its graphs per code object, and every TrainStep shares ``_loss``'s, which holds at most
    ``torch._dynamo.config.recompile_limit`` (8) of them before falling back to eager."""
    if cfg.compiled():
        torch._dynamo.reset()


def make_step(model: Seq2SeqTransformer, batch: dict[str, Tensor], cfg: BenchConfig) -> TrainStep:
    """The training step with the config's precision, compile mode and device."""
    return TrainStep(model, batch, cfg.device, cfg.train_precision(), cfg.compiled())


def interleaved(runs: dict[str, Callable[[], float]], reps: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each runner: ``warmup`` untimed rounds, then ``reps`` rotated rounds."""
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            times[name].append(runs[name]())
    return times


def paired_ratio(times: dict[str, list[float]], name: str, ref: str = "ape") -> float:
    """Median over rounds of ``time(ref) / time(name)`` (throughput relative to ``ref``)."""
    return statistics.median(r / t for r, t in zip(times[ref], times[name]))
