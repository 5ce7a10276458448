"""The training loop: Adam/AdamW with a named LR schedule, gradient accumulation, mixed
precision, validation with patience, and DistributedDataParallel under ``torchrun``. Checkpoints,
exact resume and averaging live in :mod:`posenc.training.state`.

Works with any ``nn.Module`` and knows no task: the model is only touched through the loss hook
``loss_fn(model, batch) -> LossOutput`` (summed loss, summed nll, token count), which the caller
always passes (a task's ``loss``), as it passes the width ``d_model`` of the Noam schedule (a
task's ``width``) and an optional metric ``metric_fn(model) -> float`` every
``train.metric_every`` updates (translation: greedy BLEU).

Batches come from ``train_batches(epoch, rank, world_size) -> Sequence[batch]``, which must be a
pure function of its arguments (e.g. ``token_batches(..., seed=cfg.seed, epoch=epoch, rank=rank,
world_size=world_size)``); that is what makes resuming in the middle of an epoch exact.

Normalisation: the gradients of the summed losses of the ``update_freq`` micro-batches of all
ranks are divided by the global number of tokens (all-reduced), so an update equals one step on
the concatenated global batch, whatever the split over micro-batches and ranks.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from posenc.errors import CheckpointError, ConfigError, DataError, RunDirError
from posenc.training import checkpoint as ck
from posenc.training.config import TrainConfig
from posenc.training.convergence import warmup_updates
from posenc.training.distributed import (
    DistInfo,
    all_reduce_min,
    all_reduce_sum,
    broadcast_floats,
    cleanup,
    init_distributed,
)
from posenc.training.logging import RunLogger, log, progress_bar
from posenc.training.result import TrainResult, write_summary
from posenc.training.rng import isolated_rng, seed_everything
from posenc.training.runtime import (
    LossFn,
    ValidSource,
    WallClock,
    bucketed,
    build_optimizer,
    device_label,
    forward_loss,
    move_to,
    resolve_capture,
    resolve_compile,
    resolve_device,
    resolve_precision,
    total_norm,
    unwrap_compiled,
    validation_loss,
    wrap_ddp,
)
from posenc.training.schedule import build_scheduler, total_updates
from posenc.training.state import StateStore, TrainState, config_sections, patience_ran_out, record_validation

BatchesFn = Callable[[int, int, int], Sequence[Any]]
MetricFn = Callable[[nn.Module], float]


class Trainer:
    """Train ``model`` with ``cfg``, writing logs and checkpoints under ``out_dir``.

    ``config`` holds extra sections for each checkpoint's config.yaml (e.g. ``{"model": ...,
    "data": ...}``; the ``model`` section is taken from ``model.cfg`` when absent), ``record`` the
    run's record kept in every checkpoint's state (the run directory's opener judges it on resume).
    ``loss_fn`` is the task's loss hook; ``d_model`` the model width of the Noam schedule
    (None: a schedule that needs none, e.g. cosine; ``noam`` then stops with one line).
    ``summary`` holds extra entries of the run's ``summary.json`` (a task's, e.g. its stopping
    signal), written with the trainer's own once training ends: one summary, one writer.
    ``checkpoint_state`` holds extra state.json entries of every checkpoint that must match on
    resume (e.g. the vocabulary's hash).
    """

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        out_dir: str | Path,
        loss_fn: LossFn,
        d_model: int | None = None,
        config: dict[str, Any] | None = None,
        find_unused_parameters: bool = False,
        summary: dict[str, Any] | None = None,
        record: dict[str, Any] | None = None,
        checkpoint_state: dict[str, Any] | None = None,
    ) -> None:
        self.cfg, self.out_dir, self.summary_extra = cfg, Path(out_dir), dict(summary or {})
        self.ckpt_dir = self.out_dir / "checkpoints"
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        wants_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        self.dist: DistInfo = init_distributed(wants_cuda)
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        self.precision = resolve_precision(cfg.precision, self.device, d_model)  # auto on a CPU: by width
        self.model = unwrap_compiled(model).to(self.device)  # checkpoints hold its plain state_dict
        #: train.compile=reduce-overhead: the step captured whole over bucketed (static) batch shapes
        self.capture = resolve_capture(cfg.compile, self.model)
        self.compiled = resolve_compile(cfg.compile, self.device, self.capture)
        self.net = wrap_ddp(self.model, self.dist, self.device, find_unused_parameters)
        self.loss_fn = loss_fn
        self._unbucketed: set[str] = set()  # batch types logged as having no bucketed() (runtime.bucketed)
        self.forward_loss = forward_loss(self.loss_fn, self.net, self.precision, self.compiled, cfg.compile == "auto",
                                         self.device.type, self.capture)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, cfg, self.device)
        self.d_model = d_model
        self.scheduler: Any = None  # built by fit() once the number of updates is known
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.config = config_sections(model, cfg, config)
        self.store = StateStore(self.ckpt_dir, cfg, self.dist, self.device, self.config, record, checkpoint_state)
        self.state = TrainState()
        self.logger: RunLogger | None = None
        self._stop = ""
        # Device-side accumulators, read only at log rows, checkpoints and the end (no host sync
        # per step): loss, nll, tokens since the last log row; tokens not yet in state.tokens;
        # the first step whose gradient norm was not finite (0: none).
        self._interval = torch.zeros(3, dtype=torch.float64, device=self.device)
        self._new_tokens = torch.zeros((), dtype=torch.float64, device=self.device)
        self._bad_step = torch.zeros((), dtype=torch.long, device=self.device)
        self.clock = WallClock()
        self._last_log = (0.0, 0)  # (wall_s, tokens) at the last log row
        self._last_update: dict[str, Any] = {"lr": 0.0, "gnorm": torch.zeros(())}
        self._last_valid_step = self._last_save_step = -1
        self.history: list[dict[str, Any]] = []

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def wall_s(self) -> float:
        """Training wall clock in seconds (validation and checkpointing excluded)."""
        return self.clock.wall_s()

    # ------------------------------------------------------------------ public entry point
    def fit(
        self,
        train_batches: BatchesFn,
        valid_batches: ValidSource | None = None,
        metric_fn: MetricFn | None = None,
        resume: bool | str | Path = True,
        on_start: Callable[[], None] | None = None,
    ) -> TrainResult:
        """Train until ``max_steps``/``max_epochs`` (or patience) and return a summary.

        ``resume=True`` continues from the latest checkpoint in ``out_dir/checkpoints`` if any,
        a path continues from that checkpoint, False starts afresh. At the end the model is
        validated and checkpointed, the best ``average_best`` checkpoints by validation loss (else
        the last ``average_last``) are averaged into ``checkpoints/average``, rank 0 writes
        ``summary.json`` (stop reason, best step, convergence status) and the process group (if this trainer
        created it) is destroyed. ``on_start`` (where given: ``run_task`` gives it on rank 0 only) is
        called once every rank has restored the checkpoint it resumes from, before the Trainer
        writes anything: the caller writes its run files there, so a checkpoint that does not load
        leaves the run directory untouched; a failure on any rank, in either, stops every rank.
        """
        if self.cfg.metric_every > 0 and metric_fn is None:
            raise ConfigError("train.metric_every > 0 needs a validation metric (metric_fn); this task has none")
        result = TrainResult(self.state, "")
        try:
            first_epoch = lambda: all_reduce_min(len(train_batches(0, self.dist.rank, self.dist.world_size)), self.dist)  # noqa: E731
            total = total_updates(self.cfg, first_epoch)
            self.scheduler = build_scheduler(self.optimizer, self.cfg, self.d_model, total)
            result.warmup, result.max_steps = warmup_updates(self.cfg, total), self.cfg.max_steps
            self._start(resume, on_start)
            self._loop(train_batches, valid_batches, metric_fn, result)
            self._finish(valid_batches, metric_fn, result)
        finally:
            if self.logger is not None:
                self.logger.close()
            self.close()
        result.state, result.stopped, result.train = self.state, self._stop, self.history
        result.run_record = {**result.run_summary(self.model, self.out_dir), "device": device_label(self.device),
                             **self.summary_extra}
        if self.is_main and self.state.step > 0:
            write_summary(result.run_record, self.out_dir)
        return result

    def _start(self, resume: bool | str | Path, on_start: Callable[[], None] | None) -> None:
        restored = self._on_every_rank(
            lambda: self.store.resume(resume, self.model, self.optimizer, self.scheduler, self.scaler),
            CheckpointError("another rank could not restore the checkpoint it resumes from; see its error"))
        with isolated_rng(self.device):  # the caller's writes never move the restored generators
            self._on_every_rank(on_start or (lambda: None),
                         RunDirError("another rank could not write the run directory; see its error"))
        if restored is None:
            seed_everything(self.cfg.seed + self.dist.rank)
        else:
            self.state, self._last_save_step = restored, restored.step
            if restored.valid_loss_at(restored.step) is not None:  # validated before that save
                self._last_valid_step = restored.step
            if patience_ran_out(restored, self.cfg):
                self._stop = "patience"  # it had stopped on its plateau: resuming (e.g. a raised cap) keeps it stopped
        if self.is_main:
            ck.remove_stale_temporaries(self.ckpt_dir)
        self.logger = RunLogger(self.out_dir, self.is_main, resume_step=self.state.step)
        self.clock = WallClock(self.state.wall_s)
        self._last_log = (self.state.wall_s, self.state.tokens)

    def _on_every_rank(self, fn: Callable[[], Any], elsewhere: Exception) -> Any:
        """``fn()`` on this rank, then every rank learns whether it failed anywhere: a rank whose
        own ``fn`` raised re-raises that, the others raise ``elsewhere`` (so no rank waits forever
        in the first collective of the loop)."""
        try:
            value, failed = fn(), None
        except Exception as err:  # noqa: BLE001 - re-raised below, after the ranks agree
            value, failed = None, err
        if all_reduce_min(0 if failed else 1, self.dist) == 1:
            return value
        raise failed if failed is not None else elsewhere

    def close(self) -> None:
        """Destroy the process group if this trainer created it (``fit`` does this at the end)."""
        cleanup(self.dist)
        self.dist.owns_group = False

    # ------------------------------------------------------------------ loop
    def _limit_reached(self) -> str:
        """The stop reason: a cap reached wins over "patience" (set by :meth:`validate`) at the
        same step: a run that used its whole budget is capped, never converged."""
        cfg, s = self.cfg, self.state
        if cfg.max_steps and s.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and s.epoch >= cfg.max_epochs:
            return "max_epochs"
        return self._stop

    def _loop(
        self, train_batches: BatchesFn, valid: ValidSource | None, metric_fn: MetricFn | None, result: TrainResult
    ) -> None:
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
                    self._after_update(valid, metric_fn, result)
                if self.state.batch_index >= count:
                    self.state.epoch += 1
                    self.state.batch_index = 0
        finally:
            bar.close()
        self._stop = self._limit_reached()

    def _forward_backward(self, group: Sequence[Any]) -> torch.Tensor:
        """Backward of the summed losses of ``group``; returns local (loss, nll, tokens) sums."""
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        for i, batch in enumerate(group):
            if self.capture:
                batch = bucketed(batch, self._unbucketed)
            batch = move_to(batch, self.device)
            last = i == len(group) - 1
            no_sync = self.net.no_sync() if self.dist.enabled and not last else nullcontext()
            with no_sync:
                out = self.forward_loss(batch)
                loss = self.scaler.scale(out.loss) if self.scaler is not None else out.loss
                loss.backward()
            ntok = torch.as_tensor(out.ntokens, device=self.device)
            sums += torch.stack([out.loss.detach().double(), out.nll.detach().double(), ntok.double()])
        return sums

    def train_step(self, group: Sequence[Any]) -> dict[str, Any] | None:
        """One optimizer update on the micro-batches ``group``; returns a log row or None.

        Gradients are zeroed at the start (not the end), so after the call ``p.grad`` holds the
        update's normalised (and clipped) gradient. Nothing here waits for the device: token
        counts, losses and the gradient norm stay on it until a log row (:meth:`_log_row`).
        """
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = all_reduce_sum(self._forward_backward(group), self.dist)  # (3,) loss, nll, tokens
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        # DDP averaged the gradients over ranks; turn the mean of sums into sum / global tokens.
        ntokens = totals[2]
        factor = torch.where(ntokens > 0, self.dist.world_size / ntokens.clamp_min(1.0), 0.0).float()
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)
        gnorm = total_norm(self.params, self.cfg.clip_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            first_bad = (self._bad_step == 0) & ~torch.isfinite(gnorm.to(self._bad_step.device))
            self._bad_step = torch.where(first_bad, self.state.step + 1, self._bad_step)
            self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        self._interval += totals
        self._new_tokens += ntokens
        self._last_update = {"lr": lr, "gnorm": gnorm.detach()}
        return self._log_row() if self.state.step % self.cfg.log_every == 0 else None

    def _sync(self) -> None:
        """Read the device accumulators: add the new tokens to ``state.tokens`` and raise
        FloatingPointError if some step's gradient norm was not finite (called at log rows,
        before validation and checkpoints and at the end, so no checkpoint holds such a step)."""
        bad, tokens = int(self._bad_step), int(self._new_tokens)
        if bad:
            raise FloatingPointError(
                f"step {bad}: gradient norm is not finite (inf or nan); lower train.lr or set train.clip_norm"
            )
        self.state.tokens += tokens
        self._new_tokens.zero_()

    def _log_row(self) -> dict[str, Any] | None:
        self._sync()
        loss_sum, nll_sum, ntokens = self._interval.tolist()
        if ntokens <= 0:
            return None
        now, since = self.wall_s(), self._last_log
        elapsed = max(now - since[0], 1e-9)
        row = {
            "step": self.state.step, "epoch": self.state.epoch + 1,
            "loss": loss_sum / ntokens, "nll": nll_sum / ntokens, "ppl": math.exp(min(nll_sum / ntokens, 700.0)),
            "lr": self._last_update["lr"], "tokens": self.state.tokens, "wall_s": now,
            "tokens_per_s": (self.state.tokens - since[1]) / elapsed, "gnorm": float(self._last_update["gnorm"]),
        }
        self._last_log = (now, self.state.tokens)
        self._interval.zero_()
        self.logger.train(row)
        self.history.append(row)
        return row

    def _after_update(self, valid: ValidSource | None, metric_fn: MetricFn | None, result: TrainResult) -> None:
        cfg, step = self.cfg, self.state.step
        do_valid = valid is not None and cfg.validate_every > 0 and step % cfg.validate_every == 0
        do_metric = metric_fn is not None and cfg.metric_every > 0 and step % cfg.metric_every == 0
        if do_valid or do_metric:
            self._sync()  # never validate (or checkpoint) weights after a non-finite step
        with self.clock.paused():
            if do_valid or do_metric:
                self.validate(valid if do_valid else None, metric_fn if do_metric else None, result)
            if cfg.save_every > 0 and step % cfg.save_every == 0:
                result.last_checkpoint = self.save()

    # ------------------------------------------------------------------ validation
    def validate(self, valid: ValidSource | None, metric_fn: MetricFn | None, result: TrainResult) -> dict[str, Any]:
        """Validation on rank 0 (RNG-isolated, so it never changes training randomness): the loss
        and perplexity per target token on ``valid`` and the metric; updates the patience counter
        on every rank."""
        values = [math.nan, math.nan, math.nan]
        if self.is_main:
            with isolated_rng(self.device):
                if valid is not None:
                    metrics = validation_loss(self.model, self.loss_fn, valid, self.device, self.precision)
                    values[:2] = [metrics["loss"], metrics["ppl"]]
                if metric_fn is not None:
                    self.model.eval()
                    try:
                        values[2] = float(metric_fn(self.model))
                    finally:
                        self.model.train()
        loss, ppl, metric = broadcast_floats(values, self.dist)
        row = {"step": self.state.step, "loss": None if math.isnan(loss) else loss,
               "ppl": None if math.isnan(ppl) else ppl, "metric": None if math.isnan(metric) else metric,
               "wall_s": self.wall_s()}
        self.logger.valid(row)
        result.valid.append(row)
        self._last_valid_step = self.state.step
        if row["loss"] is not None and record_validation(self.state, row["loss"], self.cfg) and not self._stop:
            self._stop = "patience"  # not after a cap: the final validation of a capped run never relabels it
            log.info("early stop at step %d: no validation improvement in %d validations", self.state.step,
                     self.state.bad_validations)
        return row

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Checkpoint the current state (see :class:`~posenc.training.state.StateStore`)."""
        self._sync()
        self.state.wall_s = self.wall_s()
        path = self.store.save(self.state, self.model, self.optimizer, self.scheduler, self.scaler)
        self._last_save_step = self.state.step
        return path

    # ------------------------------------------------------------------ end of training
    def _finish(self, valid: ValidSource | None, metric_fn: MetricFn | None, result: TrainResult) -> None:
        if self.state.step == 0:
            return
        self._sync()
        if float(self._interval[2]) > 0:
            self._log_row()
        metric_fn = metric_fn if self.cfg.metric_every > 0 else None
        with self.clock.paused():
            if (valid is not None or metric_fn is not None) and self._last_valid_step != self.state.step:
                self.validate(valid, metric_fn, result)
            if self._last_save_step != self.state.step:
                result.last_checkpoint = self.save()
            else:
                result.last_checkpoint = self.ckpt_dir / ck.checkpoint_name(self.state.step)
            result.average, result.averaged_from = self.store.average(self.state)

