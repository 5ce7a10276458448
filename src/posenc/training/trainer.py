"""The training loop: optimizer updates with gradient accumulation, validation with patience,
checkpoints and the average at the end, on one process or under ``torchrun`` (DDP).

The loop knows no task: the model is only touched through the loss hook ``loss_fn(model, batch) ->
LossOutput`` (summed loss, summed nll, token count), which the caller always passes (a task's
``loss``), as it passes the width ``d_model`` of the Noam schedule (a task's ``width``) and an
optional metric ``metric_fn(model) -> float`` every ``train.metric_every`` updates. What the run
keeps with every checkpoint (its config sections, record, checked entries and summary entries) is
the caller's :class:`~posenc.training.state.RunContents`.

Batches come from ``train_batches(epoch, rank, world_size) -> Sequence[batch]``, which must be a
pure function of its arguments (e.g. ``token_batches(..., seed=cfg.seed, epoch=epoch, rank=rank,
world_size=world_size)``); that is what makes resuming in the middle of an epoch exact.

Normalisation: the gradients of the summed losses of the ``update_freq`` micro-batches of all
ranks are divided by the global number of tokens (all-reduced), so an update equals one step on
the concatenated global batch, whatever the split over micro-batches and ranks.
"""

from __future__ import annotations

import gc
import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from posenc.errors import CheckpointError, ConfigError, DataError, RunDirError
from posenc.training import checkpoint as ck
from posenc.training.compiled import bucketed, forward_loss, resolve_capture, resolve_compile, unwrap_compiled
from posenc.training.config import TrainConfig
from posenc.training.convergence import warmup_updates
from posenc.training.device import device_label, move_to, resolve_device, wrap_ddp
from posenc.training.distributed import (
    DistInfo,
    all_reduce_min,
    all_reduce_sum,
    barrier,
    broadcast_floats,
    cleanup,
    init_distributed,
)
from posenc.training.logging import RunLogger, WallClock, log, progress_bar
from posenc.training.loss import LossFn, ValidSource, validation_loss
from posenc.training.optimization import build_optimizer, build_scheduler, total_norm, total_updates
from posenc.training.precision import resolve_precision
from posenc.training.result import TrainResult, run_summary, session_summary, write_summary
from posenc.training.rng import isolated_rng, seed_everything
from posenc.training.state import RunContents, StateStore, TrainState, config_sections
from posenc.training.stopping import cap_reached, patience_ran_out, record_validation

BatchesFn = Callable[[int, int, int], Sequence[Any]]
MetricFn = Callable[[nn.Module], float]


class StepTotals:
    """The loop's device-side sums, read only at log rows, checkpoints and the end (no host sync
    per step): loss, nll and tokens since the last log row, tokens not yet in the state, the first
    step whose gradient norm was not finite (0: none), and the last update's lr and gradient norm.

    Args:
        device: the device the sums live on (the run's).
    """

    def __init__(self, device: torch.device) -> None:
        self.interval = torch.zeros(3, dtype=torch.float64, device=device)
        self.new_tokens = torch.zeros((), dtype=torch.float64, device=device)
        self.bad_step = torch.zeros((), dtype=torch.long, device=device)
        self.lr, self.gnorm = 0.0, torch.zeros(())

    def note_norm(self, gnorm: torch.Tensor, step: int) -> None:
        """Remember ``step`` when it is the first whose gradient norm is not finite (no host sync).

        Args:
            gnorm: the update's gradient norm, a scalar tensor.
            step: the update, 1-based.
        """
        first_bad = (self.bad_step == 0) & ~torch.isfinite(gnorm.to(self.bad_step.device))
        self.bad_step = torch.where(first_bad, step, self.bad_step)

    def add(self, sums: torch.Tensor, lr: float, gnorm: torch.Tensor) -> None:
        """Add one update to the sums.

        Args:
            sums: the update's all-reduced ``(loss, nll, tokens)``, a float64 tensor on the device.
            lr: the learning rate the update used.
            gnorm: the update's gradient norm, a scalar tensor.
        """
        self.interval += sums
        self.new_tokens += sums[2]
        self.lr, self.gnorm = lr, gnorm.detach()

    def take_tokens(self) -> int:
        """The tokens trained on since the last call (a host sync), which it resets.

        Returns:
            Their number.

        Raises:
            FloatingPointError: a step's gradient norm was not finite (so no checkpoint ever holds
                such a step).
        """
        bad, tokens = int(self.bad_step), int(self.new_tokens)
        if bad:
            raise FloatingPointError(
                f"step {bad}: gradient norm is not finite (inf or nan); lower train.lr or set train.clip_norm"
            )
        self.new_tokens.zero_()
        return tokens


class Trainer:
    """Train ``model`` with ``cfg``, writing logs and checkpoints under ``out_dir``.

    Args:
        model: any ``nn.Module`` (a compiled one is unwrapped: checkpoints hold its plain state_dict).
        cfg: the run's TrainConfig.
        out_dir: the run directory (``checkpoints/``, ``train.csv``, ``valid.csv``, ``summary.json``).
        loss_fn: the task's loss hook.
        d_model: the model width of the Noam schedule (None: a schedule that needs none, e.g.
            cosine; ``noam`` then stops with one line).
        contents: what the run keeps with every checkpoint and in its summary (default: nothing
            but the ``model``/``train`` sections).
        find_unused_parameters: DDP's option, for models with branches a batch may skip.
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, out_dir: str | Path, loss_fn: LossFn,
                 d_model: int | None = None, contents: RunContents | None = None,
                 find_unused_parameters: bool = False) -> None:
        self.cfg, self.out_dir, self.loss_fn, self.d_model = cfg, Path(out_dir), loss_fn, d_model
        self.contents = contents or RunContents()
        self.ckpt_dir = self.out_dir / "checkpoints"
        if cfg.num_threads > 0:
            torch.set_num_threads(cfg.num_threads)
        wants_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        self.dist: DistInfo = init_distributed(wants_cuda)
        self.device = resolve_device(cfg.device, self.dist.local_rank)
        self.precision = resolve_precision(cfg.precision, self.device, d_model)  # auto on a CPU: by width
        self.model = unwrap_compiled(model).to(self.device)
        self.capture = resolve_capture(cfg.compile, self.model)  # reduce-overhead: the step captured whole
        self.compiled = resolve_compile(cfg.compile, self.device, self.capture)
        self.net = wrap_ddp(self.model, self.dist, self.device, find_unused_parameters)
        self.forward_loss = forward_loss(loss_fn, self.net, self.precision, self.compiled, cfg.compile == "auto",
                                         self.device.type, self.capture)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, cfg, self.device)
        self.scheduler: Any = None  # built by fit() once the number of updates is known
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        sections = config_sections(model, cfg, self.contents.sections)
        self.store = StateStore(self.ckpt_dir, cfg, self.dist, self.device, sections, self.contents)
        self.state, self.totals, self.clock = TrainState(), StepTotals(self.device), WallClock()
        self.logger: RunLogger | None = None
        self.stop = ""  # "patience" once patience ran out (a cap reached is checked where it matters)
        self.train_rows: list[dict[str, Any]] = []
        self.valid_rows: list[dict[str, Any]] = []
        self.last_checkpoint: Path | None = None
        self._unbucketed: set[str] = set()  # batch types logged as having no bucketed()
        self._last_log = (0.0, 0)  # (wall_s, tokens) at the last log row
        self._last_valid_step = self._last_save_step = -1

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0, the one that writes the run's files."""
        return self.dist.is_main

    def wall_s(self) -> float:
        """The run's training wall clock.

        Returns:
            Its seconds so far, earlier sessions included, validation and checkpointing excluded.
        """
        return self.clock.wall_s()

    # ------------------------------------------------------------------ public entry point
    def fit(self, train_batches: BatchesFn, valid_batches: ValidSource | None = None, metric_fn: MetricFn | None = None,
            resume: ck.Checkpoint | None = None, on_start: Callable[[], None] | None = None) -> TrainResult:
        """Train until ``max_steps``/``max_epochs`` (or patience); validate and checkpoint the last
        step, average the chosen checkpoints, and write ``summary.json`` on rank 0.

        Args:
            train_batches: the batches of one epoch, ``(epoch, rank, world_size) -> batches``.
            valid_batches: the validation loss's batches (patience), or None.
            metric_fn: the task's metric every ``train.metric_every`` updates, or None.
            resume: the checkpoint to resume from, loaded by the caller (the run directory's opener,
                :class:`posenc.runs.run.Run`, loads the one its run continues), or None: step 0.
            on_start: called once every rank has restored that checkpoint, before the Trainer
                writes anything: the caller writes its run files there, so a checkpoint that does
                not load leaves the run directory untouched; a failure on any rank stops every rank.

        Returns:
            The session's :class:`TrainResult`. The process group, if this trainer created it, is
            destroyed.

        Raises:
            ConfigError: ``train.metric_every`` > 0 without a ``metric_fn``, or a schedule that
                needs what the Trainer was not given.
            TypeError: ``resume`` is neither a :class:`~posenc.training.checkpoint.Checkpoint` nor None.
            CheckpointError: ``resume`` does not fit this run, or a checkpoint cannot be written.
            FloatingPointError: an update's gradient norm was not finite.
        """
        if self.cfg.metric_every > 0 and metric_fn is None:
            raise ConfigError("train.metric_every > 0 needs a validation metric (metric_fn); this task has none")
        if resume is not None and not isinstance(resume, ck.Checkpoint):
            raise TypeError(f"Trainer.fit(resume=...) takes a loaded Checkpoint or None, got {type(resume).__name__}")
        averaged: tuple[Path | None, list[str]] = (None, [])
        try:
            first_epoch = lambda: all_reduce_min(len(train_batches(0, self.dist.rank, self.dist.world_size)), self.dist)  # noqa: E731
            total = total_updates(self.cfg, first_epoch)
            self.scheduler = build_scheduler(self.optimizer, self.cfg, self.d_model, total)
            self._start(resume, on_start)
            self._loop(train_batches, valid_batches, metric_fn)
            averaged = self._finish(valid_batches, metric_fn)
            barrier(self.dist)  # every rank is past its last collective before any rank tears the group down
        finally:
            if self.logger is not None:
                self.logger.close()
            self.close()
        return self._result(warmup_updates(self.cfg, total), *averaged)

    def _result(self, warmup: int, average: Path | None, averaged_from: list[str]) -> TrainResult:
        """The session's result, and its summary.json on rank 0 (when it trained at all)."""
        summary = session_summary(self.state, self.stop, warmup, self.cfg.max_steps, averaged_from)
        params = sum(p.numel() for p in self.model.parameters())
        record = {**run_summary(self.state, summary, average or self.last_checkpoint, params, self.out_dir),
                  "device": device_label(self.device), "precision": self.precision, **self.contents.summary}
        if self.is_main and self.state.step > 0:
            write_summary(record, self.out_dir)
        return TrainResult(self.state, self.stop, self.last_checkpoint, average, averaged_from, self.train_rows,
                           self.valid_rows, warmup, self.cfg.max_steps, record)

    def _start(self, resume: ck.Checkpoint | None, on_start: Callable[[], None] | None) -> None:
        """Restore the checkpoint resumed from (or seed a fresh run), let the caller write its run
        files, then open the logs and the wall clock where the restored state left them."""
        restored = self._on_every_rank(
            lambda: self._restore(resume),
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
                self.stop = "patience"  # it had stopped on its plateau: resuming (e.g. a raised cap) keeps it stopped
        if self.is_main:
            ck.remove_stale_temporaries(self.ckpt_dir)
        self.logger = RunLogger(self.out_dir, self.is_main, resume_step=self.state.step)
        self.clock = WallClock(self.state.wall_s)
        self._last_log = (self.state.wall_s, self.state.tokens)

    def _restore(self, resume: ck.Checkpoint | None) -> TrainState | None:
        """The state restored from the loaded checkpoint ``resume``, or None (nothing to resume)."""
        if resume is None:
            return None
        return self.store.resume(resume, self.model, self.optimizer, self.scheduler, self.scaler)

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
        """Destroy the process group if this trainer created it (``fit`` does this at the end).

        The DDP wrapper goes first: its reducer holds the group, and a Gloo group whose last
        holder is freed only at interpreter exit joins its worker threads during finalization,
        which can abort the process after a finished run. Released here, it is freed while the
        interpreter is whole, and the trainer goes on with the bare model."""
        if self.net is not self.model:
            self.net = self.model
            self.forward_loss = forward_loss(self.loss_fn, self.model, self.precision, False,
                                             device_type=self.device.type)
            gc.collect()  # the wrapper, if caught in a reference cycle, is freed now rather than at exit
        cleanup(self.dist)
        self.dist.owns_group = False

    # ------------------------------------------------------------------ loop
    def _stop_reason(self) -> str:
        """A cap reached wins over "patience" at the same step: a run that used its whole budget
        is capped, never converged."""
        return cap_reached(self.cfg, self.state) or self.stop

    def _loop(self, train_batches: BatchesFn, valid: ValidSource | None, metric_fn: MetricFn | None) -> None:
        bar = progress_bar(self.cfg.max_steps or None, self.state.step, self.is_main)
        try:
            while not self._stop_reason():
                batches = train_batches(self.state.epoch, self.dist.rank, self.dist.world_size)
                count = all_reduce_min(len(batches), self.dist)  # ranks must agree on the update count
                if count == 0:
                    raise DataError(f"train_batches returned no batches for epoch {self.state.epoch} on some rank")
                while self.state.batch_index < count and not self._stop_reason():
                    start = self.state.batch_index
                    group = batches[start: min(start + self.cfg.update_freq, count)]
                    row = self.train_step(group)
                    self.state.batch_index += len(group)
                    bar.update(1)
                    if row is not None:
                        bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}")
                    self._after_update(valid, metric_fn)
                if self.state.batch_index >= count:
                    self.state.epoch += 1
                    self.state.batch_index = 0
        finally:
            bar.close()
        self.stop = self._stop_reason()

    def train_step(self, group: Sequence[Any]) -> dict[str, Any] | None:
        """One optimizer update on the micro-batches ``group``.

        Gradients are zeroed at the start (not the end), so after the call ``p.grad`` holds the
        update's normalised (and clipped) gradient. Nothing here waits for the device: token
        counts, losses and the gradient norm stay on it until a log row (:meth:`_log_row`).

        Args:
            group: this rank's micro-batches of the update (``train.update_freq`` of them, fewer
                at the end of an epoch).

        Returns:
            The log row (``train.csv``'s columns and ``gnorm``) when the update is a multiple of
            ``train.log_every``, else None.
        """
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = all_reduce_sum(self._forward_backward(group), self.dist)  # (3,) loss, nll, tokens of all ranks
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        self._divide_gradients(sums[2])
        gnorm = total_norm(self.params, self.cfg.clip_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.totals.note_norm(gnorm, self.state.step + 1)
            self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        self.totals.add(sums, lr, gnorm)
        return self._log_row() if self.state.step % self.cfg.log_every == 0 else None

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

    def _divide_gradients(self, ntokens: torch.Tensor) -> None:
        """DDP averaged the gradients over ranks: turn that mean of sums into sum / global tokens."""
        factor = torch.where(ntokens > 0, self.dist.world_size / ntokens.clamp_min(1.0), 0.0).float()
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)

    def _sync(self) -> None:
        """Read the device accumulators into the state (at log rows, before validation and
        checkpoints and at the end; :meth:`StepTotals.take_tokens`)."""
        self.state.tokens += self.totals.take_tokens()

    def _log_row(self) -> dict[str, Any] | None:
        self._sync()
        loss_sum, nll_sum, ntokens = self.totals.interval.tolist()
        if ntokens <= 0:
            return None
        now, since = self.wall_s(), self._last_log
        elapsed = max(now - since[0], 1e-9)
        row = {
            "step": self.state.step, "epoch": self.state.epoch + 1,
            "loss": loss_sum / ntokens, "nll": nll_sum / ntokens, "ppl": math.exp(min(nll_sum / ntokens, 700.0)),
            "lr": self.totals.lr, "tokens": self.state.tokens, "wall_s": now,
            "tokens_per_s": (self.state.tokens - since[1]) / elapsed, "gnorm": float(self.totals.gnorm),
        }
        self._last_log = (now, self.state.tokens)
        self.totals.interval.zero_()
        self.logger.train(row)
        self.train_rows.append(row)
        return row

    def _after_update(self, valid: ValidSource | None, metric_fn: MetricFn | None) -> None:
        cfg, step = self.cfg, self.state.step
        do_valid = valid is not None and cfg.validate_every > 0 and step % cfg.validate_every == 0
        do_metric = metric_fn is not None and cfg.metric_every > 0 and step % cfg.metric_every == 0
        if do_valid or do_metric:
            self._sync()  # never validate (or checkpoint) weights after a non-finite step
        with self.clock.paused():
            if do_valid or do_metric:
                self.validate(valid if do_valid else None, metric_fn if do_metric else None)
            if cfg.save_every > 0 and step % cfg.save_every == 0:
                self.last_checkpoint = self.save()

    # ------------------------------------------------------------------ validation
    def validate(self, valid: ValidSource | None, metric_fn: MetricFn | None) -> dict[str, Any]:
        """Validation on rank 0 (RNG-isolated, so it never changes training randomness): the loss
        and perplexity per target token on ``valid`` and the metric; updates the patience counter
        on every rank. A collective: every rank calls it.

        Args:
            valid: the validation batches, or None to compute the metric only.
            metric_fn: the task's metric, ``metric_fn(model) -> float``, or None.

        Returns:
            The ``valid.csv`` row: ``step``, ``loss``, ``ppl``, ``metric`` (None where not
            computed) and ``wall_s``.
        """
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
        self.valid_rows.append(row)
        self._last_valid_step = self.state.step
        if row["loss"] is not None and record_validation(self.state, row["loss"], self.cfg) and not self.stop:
            self.stop = "patience"  # not after a cap: the final validation of a capped run never relabels it
            log.info("early stop at step %d: no validation improvement in %d validations", self.state.step,
                     self.state.bad_validations)
        return row

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Checkpoint the current state (see :class:`~posenc.training.state.StateStore`). A
        collective: every rank calls it, rank 0 writes.

        Returns:
            The checkpoint directory.
        """
        self._sync()
        self.state.wall_s = self.wall_s()
        path = self.store.save(self.state, self.model, self.optimizer, self.scheduler, self.scaler)
        self._last_save_step = self.state.step
        return path

    # ------------------------------------------------------------------ end of training
    def _finish(self, valid: ValidSource | None, metric_fn: MetricFn | None) -> tuple[Path | None, list[str]]:
        """Log, validate and checkpoint the last step where that has not happened yet, then
        average; returns the average and the names averaged (None, [] when none)."""
        if self.state.step == 0:
            return None, []
        self._sync()
        if float(self.totals.interval[2]) > 0:
            self._log_row()
        metric_fn = metric_fn if self.cfg.metric_every > 0 else None
        with self.clock.paused():
            if (valid is not None or metric_fn is not None) and self._last_valid_step != self.state.step:
                self.validate(valid, metric_fn)
            if self._last_save_step != self.state.step:
                self.last_checkpoint = self.save()
            else:
                self.last_checkpoint = self.ckpt_dir / ck.checkpoint_name(self.state.step)
            return self.store.average(self.state)
