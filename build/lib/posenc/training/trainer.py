"""The training loop: Adam + Noam, gradient accumulation, mixed precision, validation,
checkpoints with exact resume, and DistributedDataParallel under ``torchrun``.

Works with any ``nn.Module``: the model is only touched through a loss hook
``loss_fn(model, batch) -> LossOutput`` (summed loss, summed nll, token count); the default hook
trains :class:`~posenc.models.seq2seq.Seq2SeqTransformer` on data ``Batch`` objects.

Batches come from ``train_batches(epoch, rank, world_size) -> Sequence[batch]``, which must be a
pure function of its arguments (e.g. ``token_batches(..., seed=cfg.seed, epoch=epoch, rank=rank,
world_size=world_size)``); that is what makes resuming in the middle of an epoch exact.

Normalisation: the gradients of the summed losses of the ``update_freq`` micro-batches of all
ranks are divided by the global number of tokens (all-reduced), so an update equals one step on
the concatenated global batch, whatever the split over micro-batches and ranks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from posenc.config import to_dict
from posenc.errors import CheckpointError, ConfigError, DataError
from posenc.training import checkpoint as ck
from posenc.training.config import TrainConfig
from posenc.training.distributed import (
    DistInfo, all_reduce_min, all_reduce_sum, barrier, broadcast_floats, cleanup, gather_bytes, init_distributed,
)
from posenc.training.logging import RunLogger, log, progress_bar
from posenc.training.loss import LossOutput, Seq2SeqLoss
from posenc.training.rng import host_state, isolated_rng, seed_everything, set_host_state, set_torch_states, torch_states
from posenc.training.schedule import noam_scheduler

BatchesFn = Callable[[int, int, int], Sequence[Any]]
LossFn = Callable[[nn.Module, Any], LossOutput]
ValidSource = Sequence[Any] | Callable[[], Iterable[Any]]
BleuFn = Callable[[nn.Module], float]


@dataclass
class TrainState:
    """Everything about the loop's position that a checkpoint must restore."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # completed epochs
    batch_index: int = 0  # micro-batches of the current epoch already consumed
    tokens: int = 0  # target tokens trained on, all ranks
    wall_s: float = 0.0  # training wall clock (seconds) up to the last save
    best_valid: float | None = None
    bad_validations: int = 0


@dataclass
class TrainResult:
    state: TrainState
    stopped: str  # "max_steps" | "max_epochs" | "patience"
    last_checkpoint: Path | None = None
    average: Path | None = None
    train: list[dict[str, Any]] = field(default_factory=list)  # train.csv rows of this session
    valid: list[dict[str, Any]] = field(default_factory=list)  # valid.csv rows of this session


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is a ConfigError."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device is 'cuda' but no CUDA device is available")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(precision: str, device: torch.device) -> str:
    """bf16/fp16 autocast only on CUDA; on CPU fall back to fp32 with a warning."""
    if precision != "fp32" and device.type != "cuda":
        warnings.warn(f"train.precision={precision} needs CUDA; training in fp32 on {device}", stacklevel=2)
        return "fp32"
    return precision


def move_to(batch: Any, device: torch.device) -> Any:
    """Move a batch (object with ``.to``, tensor, dict, list or tuple of those) to ``device``."""
    if hasattr(batch, "to") and callable(batch.to):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(v, device) for v in batch)
    return batch


def _total_norm(params: list[nn.Parameter], clip_norm: float) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip_norm > 0:
        return nn.utils.clip_grad_norm_(params, clip_norm)
    if hasattr(nn.utils, "get_total_norm"):
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


class Trainer:
    """Train ``model`` with ``cfg``, writing logs and checkpoints under ``out_dir``.

    ``config`` holds extra sections for each checkpoint's config.yaml (e.g. ``{"model": ...,
    "data": ...}``); the ``model`` section (taken from ``model.cfg`` when absent) must match on
    resume. ``d_model`` for the Noam schedule defaults to ``model.cfg.d_model``.
    """

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        out_dir: str | Path,
        loss_fn: LossFn | None = None,
        d_model: int | None = None,
        config: dict[str, Any] | None = None,
        find_unused_parameters: bool = False,
    ) -> None:
        self.cfg, self.out_dir = cfg, Path(out_dir)
        self.ckpt_dir = self.out_dir / "checkpoints"
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        wants_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        self.dist: DistInfo = init_distributed(wants_cuda)
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        self.precision = resolve_precision(cfg.precision, self.device)
        self.model = model.to(self.device)
        self.net = self._wrap(find_unused_parameters)
        self.loss_fn = loss_fn or Seq2SeqLoss(cfg.label_smoothing, getattr(model, "pad_id", 0))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(
            self.params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
        self.scheduler = noam_scheduler(self.optimizer, self._d_model(d_model), cfg.warmup)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.config = self._config_sections(config)
        self.state = TrainState()
        self.logger: RunLogger | None = None
        self._stop = ""
        self._interval = [0.0, 0.0, 0.0]  # loss, nll, tokens since the last log row
        self._clock = (time.perf_counter(), 0.0)  # (start of this session, wall_s at that start)
        self._overhead_s = 0.0  # validation/checkpoint time of this session
        self._pause_start: float | None = None
        self._last_log = (0.0, 0)  # (wall_s, tokens) at the last log row
        self._last_update = {"lr": 0.0, "gnorm": 0.0}
        self._last_valid_step = self._last_save_step = -1
        self.history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ setup
    def _wrap(self, find_unused: bool) -> nn.Module:
        if not self.dist.enabled:
            return self.model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(self.model, device_ids=ids, find_unused_parameters=find_unused)

    def _d_model(self, d_model: int | None) -> int:
        if d_model is None:
            d_model = getattr(getattr(self.model, "cfg", None), "d_model", None)
        if not isinstance(d_model, int) or d_model < 1:
            raise ConfigError("Trainer needs d_model for the Noam schedule (pass d_model= or give the model a .cfg)")
        return d_model

    def _config_sections(self, config: dict[str, Any] | None) -> dict[str, Any]:
        sections = dict(config or {})
        model_cfg = getattr(self.model, "cfg", None)
        if "model" not in sections and dataclasses.is_dataclass(model_cfg):
            sections["model"] = to_dict(model_cfg)
        sections["train"] = to_dict(self.cfg)
        return json.loads(json.dumps(sections))  # plain, YAML-safe types

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def wall_s(self) -> float:
        """Training wall clock in seconds: this session's time plus the resumed run's, minus the
        time spent validating and checkpointing (so curves vs wall clock compare training speed)."""
        start, before = self._clock
        now = time.perf_counter()
        paused = now - self._pause_start if self._pause_start is not None else 0.0
        return before + now - start - self._overhead_s - paused

    @contextmanager
    def _not_training(self) -> Iterator[None]:
        """Exclude the block's duration (validation, checkpointing) from :meth:`wall_s`."""
        if self._pause_start is not None:  # nested
            yield
            return
        self._pause_start = time.perf_counter()
        try:
            yield
        finally:
            self._overhead_s += time.perf_counter() - self._pause_start
            self._pause_start = None

    # ------------------------------------------------------------------ public entry point
    def fit(
        self,
        train_batches: BatchesFn,
        valid_batches: ValidSource | None = None,
        bleu_fn: BleuFn | None = None,
        resume: bool | str | Path = True,
    ) -> TrainResult:
        """Train until ``max_steps``/``max_epochs`` (or patience) and return a summary.

        ``resume=True`` continues from the latest checkpoint in ``out_dir/checkpoints`` if any,
        a path continues from that checkpoint, False starts afresh. At the end the model is
        validated and checkpointed, the last ``average_last`` checkpoints are averaged into
        ``checkpoints/average`` and the process group (if this trainer created it) is destroyed.
        """
        if self.cfg.bleu_every > 0 and bleu_fn is None:
            raise ConfigError("train.bleu_every > 0 needs a BLEU callback (bleu_fn)")
        result = TrainResult(self.state, "")
        try:
            resumed = self._resume(resume)
            if not resumed:
                seed_everything(self.cfg.seed + self.dist.rank)
            if self.is_main:
                ck.remove_stale_temporaries(self.ckpt_dir)
            self.logger = RunLogger(self.out_dir, self.is_main, resume_step=self.state.step)
            self._clock, self._overhead_s = (time.perf_counter(), self.state.wall_s), 0.0
            self._last_log = (self.state.wall_s, self.state.tokens)
            self._loop(train_batches, valid_batches, bleu_fn, result)
            self._finish(valid_batches, bleu_fn, result)
        finally:
            if self.logger is not None:
                self.logger.close()
            self.close()
        result.state, result.stopped, result.train = self.state, self._stop, self.history
        return result

    def close(self) -> None:
        """Destroy the process group if this trainer created it (``fit`` does this at the end)."""
        cleanup(self.dist)
        self.dist.owns_group = False

    # ------------------------------------------------------------------ loop
    def _limit_reached(self) -> str:
        cfg, s = self.cfg, self.state
        if cfg.max_steps and s.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and s.epoch >= cfg.max_epochs:
            return "max_epochs"
        return self._stop

    def _loop(self, train_batches: BatchesFn, valid: ValidSource | None, bleu_fn: BleuFn | None, result: TrainResult) -> None:
        bar = progress_bar(self.cfg.max_steps or None, self.state.step, self.is_main)
        try:
            while not self._limit_reached():
                batches = train_batches(self.state.epoch, self.dist.rank, self.dist.world_size)
                count = all_reduce_min(len(batches), self.dist)  # ranks must agree on the update count
                if count == 0:
                    raise DataError(f"train_batches returned no batches for epoch {self.state.epoch} on some rank")
                while self.state.batch_index < count and not self._limit_reached():
                    start = self.state.batch_index
                    group = batches[start: min(start + self.cfg.update_freq, count)]
                    row = self.train_step(group)
                    self.state.batch_index += len(group)
                    bar.update(1)
                    if row is not None:
                        bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}")
                    self._after_update(valid, bleu_fn, result)
                if self.state.batch_index >= count:
                    self.state.epoch += 1
                    self.state.batch_index = 0
        finally:
            bar.close()
        self._stop = self._limit_reached()

    def _forward_backward(self, group: Sequence[Any]) -> torch.Tensor:
        """Backward of the summed losses of ``group``; returns local (loss, nll, tokens) sums."""
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16 if self.precision == "bf16" else torch.float16)
            if self.precision != "fp32" else nullcontext()
        )
        for i, batch in enumerate(group):
            batch = move_to(batch, self.device)
            last = i == len(group) - 1
            no_sync = self.net.no_sync() if self.dist.enabled and not last else nullcontext()
            with no_sync:
                with autocast:
                    out = self.loss_fn(self.net, batch)
                loss = self.scaler.scale(out.loss) if self.scaler is not None else out.loss
                loss.backward()
            ntok = torch.as_tensor(out.ntokens, device=self.device)
            sums += torch.stack([out.loss.detach().double(), out.nll.detach().double(), ntok.double()])
        return sums

    def train_step(self, group: Sequence[Any]) -> dict[str, Any] | None:
        """One optimizer update on the micro-batches ``group``; returns a log row or None.

        Gradients are zeroed at the start (not the end), so after the call ``p.grad`` holds the
        update's normalised (and clipped) gradient.
        """
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = all_reduce_sum(self._forward_backward(group), self.dist).tolist()
        loss_sum, nll_sum, ntokens = totals
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        # DDP averaged the gradients over ranks; turn the mean of sums into sum / global tokens.
        factor = self.dist.world_size / ntokens if ntokens > 0 else 0.0
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(factor)
        gnorm = _total_norm(self.params, self.cfg.clip_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif not math.isfinite(float(gnorm)):
            raise FloatingPointError(
                f"step {self.state.step + 1}: gradient norm is {float(gnorm)} (loss/token "
                f"{loss_sum / max(ntokens, 1):.4g}); lower train.lr or set train.clip_norm"
            )
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        self.state.tokens += int(ntokens)
        self._interval = [a + b for a, b in zip(self._interval, totals)]
        self._last_update = {"lr": lr, "gnorm": float(gnorm)}
        return self._log_row() if self.state.step % self.cfg.log_every == 0 else None

    def _log_row(self) -> dict[str, Any] | None:
        loss_sum, nll_sum, ntokens = self._interval
        if ntokens <= 0:
            return None
        now, since = self.wall_s(), self._last_log
        elapsed = max(now - since[0], 1e-9)
        row = {
            "step": self.state.step, "epoch": self.state.epoch + 1,
            "loss": loss_sum / ntokens, "nll": nll_sum / ntokens, "ppl": math.exp(min(nll_sum / ntokens, 700.0)),
            "lr": self._last_update["lr"], "tokens": self.state.tokens, "wall_s": now,
            "tokens_per_s": (self.state.tokens - since[1]) / elapsed, "gnorm": self._last_update["gnorm"],
        }
        self._last_log = (now, self.state.tokens)
        self._interval = [0.0, 0.0, 0.0]
        self.logger.train(row)
        self.history.append(row)
        return row

    def _after_update(self, valid: ValidSource | None, bleu_fn: BleuFn | None, result: TrainResult) -> None:
        cfg, step = self.cfg, self.state.step
        do_valid = valid is not None and cfg.validate_every > 0 and step % cfg.validate_every == 0
        do_bleu = bleu_fn is not None and cfg.bleu_every > 0 and step % cfg.bleu_every == 0
        with self._not_training():
            if do_valid or do_bleu:
                self.validate(valid if do_valid else None, bleu_fn if do_bleu else None, result)
            if cfg.save_every > 0 and step % cfg.save_every == 0:
                result.last_checkpoint = self.save()

    # ------------------------------------------------------------------ validation
    def evaluate(self, batches: ValidSource) -> dict[str, float]:
        """Loss and perplexity per target token on ``batches`` (eval mode, no grad)."""
        source = batches() if callable(batches) else batches
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        self.model.eval()
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16 if self.precision == "bf16" else torch.float16)
            if self.precision != "fp32" else nullcontext()
        )
        try:
            with torch.no_grad(), autocast:
                for batch in source:
                    out = self.loss_fn(self.model, move_to(batch, self.device))
                    ntok = torch.as_tensor(out.ntokens, device=self.device).double()
                    sums += torch.stack([out.loss.double(), out.nll.double(), ntok])
        finally:
            self.model.train()
        loss, nll, ntokens = sums.tolist()
        if ntokens <= 0:
            raise DataError("validation batches contain no target tokens")
        return {"loss": loss / ntokens, "nll": nll / ntokens, "ppl": math.exp(min(nll / ntokens, 700.0)), "ntokens": ntokens}

    def validate(self, valid: ValidSource | None, bleu_fn: BleuFn | None, result: TrainResult) -> dict[str, Any]:
        """Validation on rank 0 (RNG-isolated, so it never changes training randomness);
        updates the patience counter on every rank."""
        values = [math.nan, math.nan, math.nan]
        if self.is_main:
            with isolated_rng(self.device):
                if valid is not None:
                    metrics = self.evaluate(valid)
                    values[:2] = [metrics["loss"], metrics["ppl"]]
                if bleu_fn is not None:
                    self.model.eval()
                    try:
                        values[2] = float(bleu_fn(self.model))
                    finally:
                        self.model.train()
        loss, ppl, bleu = broadcast_floats(values, self.dist)
        row = {"step": self.state.step, "loss": None if math.isnan(loss) else loss,
               "ppl": None if math.isnan(ppl) else ppl, "bleu": None if math.isnan(bleu) else bleu,
               "wall_s": self.wall_s()}
        self.logger.valid(row)
        result.valid.append(row)
        self._last_valid_step = self.state.step
        if row["loss"] is not None:
            self._update_patience(row["loss"])
        return row

    def _update_patience(self, loss: float) -> None:
        s = self.state
        if s.best_valid is None or loss < s.best_valid:
            s.best_valid, s.bad_validations = loss, 0
        else:
            s.bad_validations += 1
        if self.cfg.patience is not None and s.bad_validations >= self.cfg.patience:
            self._stop = "patience"
            log.info("early stop at step %d: no validation improvement in %d validations", s.step, s.bad_validations)

    # ------------------------------------------------------------------ checkpoints
    def _rng_payload(self) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
        """Every rank's generator states: torch ones as tensors, host ones as JSON."""
        tensors: dict[str, torch.Tensor] = {}
        for name, state in torch_states(self.device).items():
            for rank, t in enumerate(gather_bytes(state, self.dist)):
                tensors[f"rng.{name}.{rank}"] = t
        host = torch.frombuffer(bytearray(json.dumps(host_state()).encode()), dtype=torch.uint8)
        hosts = [json.loads(bytes(t.tolist()).decode()) for t in gather_bytes(host, self.dist)]
        return tensors, hosts

    def save(self) -> Path | None:
        """Checkpoint the current state (rank 0 writes; all ranks synchronise)."""
        rng_tensors, hosts = self._rng_payload()
        self.state.wall_s = self.wall_s()
        path = self.ckpt_dir / ck.checkpoint_name(self.state.step)
        barrier(self.dist)
        if self.is_main:
            state = {
                "kind": "train", "step": self.state.step, "train": dataclasses.asdict(self.state),
                "world_size": self.dist.world_size, "rng": {"host": hosts},
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            }
            ck.save_checkpoint(path, self.model.state_dict(), state=state, config=self.config,
                               optim_state=self.optimizer.state_dict(), tensors=rng_tensors)
            ck.prune_checkpoints(self.ckpt_dir, self.cfg.keep_last)
        barrier(self.dist)
        self._last_save_step = self.state.step
        return path

    def _resume(self, resume: bool | str | Path) -> bool:
        if resume is False or resume is None:
            return False
        path = ck.latest_checkpoint(self.ckpt_dir) if resume is True else Path(resume)
        if path is None:
            return False
        ckpt = ck.load_checkpoint(path)
        if ckpt.state.get("kind") != "train" or ckpt.state.get("optimizer") is None:
            raise CheckpointError(f"{path}: model-only checkpoint (no optimizer state); cannot resume training from it")
        if "model" in self.config:
            ck.check_config(ckpt, "model", self.config["model"])
        ck.restore_model(self.model, ckpt)
        try:
            self.optimizer.load_state_dict(ckpt.optimizer_state())
            self.scheduler.load_state_dict(ckpt.state["scheduler"])
            if self.scaler is not None and ckpt.state.get("scaler"):
                self.scaler.load_state_dict(ckpt.state["scaler"])
            self.state = TrainState(**ckpt.state["train"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{path}: optimizer/training state does not fit this run ({err})") from None
        self._restore_rng(ckpt)
        self._last_save_step = self.state.step
        log.info("resumed from %s at step %d", path, self.state.step)
        return True

    def _restore_rng(self, ckpt: ck.Checkpoint) -> None:
        rank, hosts = self.dist.rank, ckpt.state.get("rng", {}).get("host", [])
        if ckpt.state.get("world_size") != self.dist.world_size or rank >= len(hosts):
            warnings.warn(
                f"{ckpt.path.name}: saved with world size {ckpt.state.get('world_size')}, now "
                f"{self.dist.world_size}; reseeding instead of restoring the exact RNG states", stacklevel=2
            )
            seed_everything(self.cfg.seed + 7919 * self.state.step + rank)
            return
        set_host_state(hosts[rank])
        states = {name: ckpt.tensors[f"rng.{name}.{rank}"] for name in ("torch", "cuda") if f"rng.{name}.{rank}" in ckpt.tensors}
        if "torch" not in states:
            raise CheckpointError(f"{ckpt.path}: optim.safetensors lacks the torch RNG state of rank {rank}")
        set_torch_states(states, self.device)

    # ------------------------------------------------------------------ end of training
    def _finish(self, valid: ValidSource | None, bleu_fn: BleuFn | None, result: TrainResult) -> None:
        if self.state.step == 0:
            return
        if self._interval[2] > 0:
            self._log_row()
        bleu_fn = bleu_fn if self.cfg.bleu_every > 0 else None
        with self._not_training():
            if (valid is not None or bleu_fn is not None) and self._last_valid_step != self.state.step:
                self.validate(valid, bleu_fn, result)
            if self._last_save_step != self.state.step:
                result.last_checkpoint = self.save()
            else:
                result.last_checkpoint = self.ckpt_dir / ck.checkpoint_name(self.state.step)
            result.average = self._average()

    def _average(self) -> Path | None:
        n = self.cfg.average_last
        if n <= 1:
            return None
        out = self.ckpt_dir / "average"
        if self.is_main:
            paths = ck.list_checkpoints(self.ckpt_dir)[-n:]
            if len(paths) < n:
                warnings.warn(f"train.average_last={n} but only {len(paths)} checkpoints exist; averaging those", stacklevel=2)
            ck.save_average(paths, out)
        barrier(self.dist)
        return out


def train(
    model: nn.Module,
    train_batches: BatchesFn,
    cfg: TrainConfig,
    out_dir: str | Path,
    valid_batches: ValidSource | None = None,
    loss_fn: LossFn | None = None,
    bleu_fn: BleuFn | None = None,
    resume: bool | str | Path = True,
    **trainer_kwargs: Any,
) -> TrainResult:
    """Functional wrapper: ``Trainer(model, cfg, out_dir, loss_fn, ...).fit(...)``."""
    trainer = Trainer(model, cfg, out_dir, loss_fn=loss_fn, **trainer_kwargs)
    return trainer.fit(train_batches, valid_batches, bleu_fn, resume=resume)
