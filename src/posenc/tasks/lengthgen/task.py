"""The length-generalization task behind :class:`posenc.tasks.base.Task`.

Shape legend: B batch, L sequence length (input + SEP + output), V vocabulary.

A sequence is ``input SEP output``; the LM predicts token t+1 from tokens ≤ t and the loss
covers only the output tokens (cross entropy, no label smoothing, as Ruoss et al. 2023). The
metric is taken with teacher forcing: per sequence, the argmax at every output token. *Sequence
accuracy* (all output tokens right) equals greedy decoding's, since greedy decoding reproduces
the target exactly when every teacher-forced argmax is right; *token accuracy* is the fraction of
right output tokens per sequence (averaged over sequences).

The task's grid (``TASK``, a :class:`LengthgenTask`: the same class): methods × algorithmic tasks × seeds,
each cell a run through :func:`posenc.tasks.base.run_task` (one way to train; the run directory
is owned, locked and fingerprinted like every run), run by the shared grid runner
(:mod:`posenc.experiments.runner`), then the report. Layout under ``exp.root``:
``<task>/<method>/seed<N>/`` (a run directory: checkpoints, logs, ``eval.json`` and
``results.json`` once done), ``report/``.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import to_dict
from posenc.data.batching import bucket_length, bucket_rows, pad_to
from posenc.errors import ConfigError
from posenc.experiments.experiment import Experiment
from posenc.files import atomic_write_text
from posenc.models.lm import DecoderLM
from posenc.tasks.base import Task, TaskRun
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, experiment_of
from posenc.tasks.lengthgen.generators import PAD, POSITION_IDS, SEP, VOCAB_SIZE, Example, example
from posenc.tasks.lengthgen.report import write_report
from posenc.training import checkpoint as ck
from posenc.training.loss import LossOutput
from posenc.training.result import TrainResult

log = logging.getLogger("posenc")


@dataclass
class Batch:
    tokens: Tensor  # (B, L) long, right-padded with PAD
    mask: Tensor  # (B, L) bool, real tokens
    out_mask: Tensor  # (B, L) bool, output tokens (after SEP)
    positions: Tensor | None = None  # (B, L) float position ids (data.position_ids); None: 0..L−1

    def to(self, device: torch.device | str) -> Batch:
        pos = None if self.positions is None else self.positions.to(device)
        return Batch(self.tokens.to(device), self.mask.to(device), self.out_mask.to(device), pos)

    def bucketed(self) -> Batch:
        """This batch padded to a static shape for a captured step (``train.compile:
        reduce-overhead``): rows to :func:`~posenc.data.batching.bucket_rows`, and the model's input
        length ``L − 1`` to :func:`~posenc.data.batching.bucket_length`. Padding is PAD under a False
        mask and out_mask (position 0 of a padded row stays unmasked, so no attention row has every
        key masked), so the loss, its token count and its gradients are unchanged (causal attention:
        no real token sees a later pad)."""
        rows, length = bucket_rows(self.tokens.shape[0]), bucket_length(self.tokens.shape[1] - 1) + 1
        mask = pad_to(self.mask, rows, length, False)
        mask[self.tokens.shape[0]:, 0] = True
        pos = None if self.positions is None else pad_to(self.positions, rows, length, 0.0)
        return Batch(pad_to(self.tokens, rows, length, PAD), mask, pad_to(self.out_mask, rows, length, False), pos)


def collate(examples: list[Example], position_ids: str = "index") -> Batch:
    """``[(input, output), ...]`` → a right-padded :class:`Batch` of ``input SEP output`` (with the
    ``position_ids`` of each sequence when they are not the default 0..L−1; padding gets 0)."""
    seqs = [inp + [SEP] + out for inp, out in examples]
    width = max(len(s) for s in seqs)
    tokens = torch.full((len(seqs), width), PAD, dtype=torch.long)
    out_mask = torch.zeros(len(seqs), width, dtype=torch.bool)
    for i, ((inp, _out), seq) in enumerate(zip(examples, seqs)):
        tokens[i, : len(seq)] = torch.tensor(seq)
        out_mask[i, len(inp) + 1: len(seq)] = True
    mask = torch.arange(width)[None, :] < torch.tensor([len(s) for s in seqs])[:, None]
    ids = POSITION_IDS[position_ids]
    positions = None if ids is None else torch.tensor([ids(t) for t in tokens.tolist()], dtype=torch.float32)
    return Batch(tokens, mask, out_mask, positions)


def predictions(model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
    """Teacher-forced logits for tokens 1..L−1 ``(B, L−1, V)`` and which of them are scored ``(B, L−1)``."""
    if batch.positions is None:  # the model's own 0..L−1
        logits = model(batch.tokens[:, :-1], batch.mask[:, :-1])
    else:
        logits = model(batch.tokens[:, :-1], batch.mask[:, :-1], batch.positions[:, :-1])
    return logits, batch.out_mask[:, 1:]


def output_loss(model: nn.Module, batch: Batch) -> LossOutput:
    """Summed cross entropy over the output tokens only."""
    logits, scored = predictions(model, batch)
    target = batch.tokens[:, 1:].masked_fill(~scored, -100)
    nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100,
                          reduction="sum")
    return LossOutput(nll, nll.detach(), scored.sum())


@torch.no_grad()
def accuracy(model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
    """Per sequence: all output tokens right ``(B,)`` bool, and the fraction right ``(B,)``."""
    logits, scored = predictions(model, batch)
    right = (logits.argmax(-1) == batch.tokens[:, 1:]) | ~scored
    frac = ((right & scored).sum(1).float() / scored.sum(1).clamp_min(1).float())
    return right.all(1), frac


def training_batch(cfg: LengthgenConfig, index: int, world: int = 1) -> Batch:
    """The ``index``-th global training batch: one length drawn uniformly from the training range
    of its update ``index // world`` (with a curriculum: :meth:`LengthgenData.train_lengths_at`, so
    the curriculum spans the same number of updates whatever the number of ranks ``world``)."""
    d = cfg.data
    low, high = d.train_lengths_at(index // world)
    length = random.Random(f"length:{cfg.train.seed}:{index}").randint(low, high)
    start = index * d.batch_size
    return collate([example(d.task, length, cfg.train.seed, start + j) for j in range(d.batch_size)], d.position_ids)


def evaluate_lengths(cfg: LengthgenConfig, model: nn.Module, device: torch.device) -> dict[str, Any]:
    """Sequence and token accuracy per test length (``eval_samples`` examples each, eval seed)."""
    d, rows = cfg.data, []
    model.eval()
    for length in d.test_lengths:
        seq, tok = [], []
        for start in range(0, d.eval_samples, d.eval_batch_size):
            count = min(d.eval_batch_size, d.eval_samples - start)
            batch = collate([example(d.task, length, d.eval_seed, start + j) for j in range(count)],
                            d.position_ids).to(device)
            s, t = accuracy(model, batch)
            seq.append(s.float().cpu())
            tok.append(t.cpu())
        rows.append({"length": length, "seq_acc": float(torch.cat(seq).mean()),
                     "token_acc": float(torch.cat(tok).mean())})
    return summarize(rows, d.train_max_length)


def summarize(rows: list[dict[str, Any]], train_max: int) -> dict[str, Any]:
    """Per-length rows + averages over seen (≤ train_max) and unseen (> train_max) lengths."""
    out: dict[str, Any] = {"by_length": rows, "train_max_length": train_max}
    for split, keep in (("seen", lambda n: n <= train_max), ("unseen", lambda n: n > train_max)):
        sel = [r for r in rows if keep(r["length"])]
        for metric in ("seq_acc", "token_acc"):
            out[f"{split}_{metric}"] = sum(r[metric] for r in sel) / len(sel) if sel else None
    return out


def restore_best(model: nn.Module, out: Path, result: TrainResult) -> int:
    """Load the weights of the best validation step (the Trainer's ``result``) when its checkpoint
    is still on disk (early stopping: evaluate the best, not the last, weights); returns the
    evaluated step."""
    summary = result.summary()
    best, last = summary.get("best_step"), int(result.state.step)
    if best is None or best == last:
        return last
    ckpt = out / "checkpoints" / ck.checkpoint_name(best)
    if not ckpt.is_dir():
        log.warning("%s: checkpoint of the best step %d is gone; evaluating step %d", out, best, last)
        return last
    ck.restore_model(model, ck.load_checkpoint(ckpt, with_optimizer=False))
    return best


def evaluation_model(cfg: LengthgenConfig, model: nn.Module) -> nn.Module:
    """``model`` itself, or with ``data.eval_position`` the same weights in the test-time position
    config (e.g. RoPE scaling); an override that adds or drops parameters is a one-line ConfigError."""
    if not cfg.data.eval_position:
        return model
    device = next(model.parameters()).device
    scaled = DecoderLM(replace(cfg.eval_model(), vocab_size=VOCAB_SIZE), pad_id=PAD).to(device).eval()
    trained, wanted = model.state_dict(), scaled.state_dict()
    odd = sorted(k for k in trained.keys() | wanted.keys()
                 if k not in trained or k not in wanted or trained[k].shape != wanted[k].shape)
    if odd:
        raise ConfigError(f"data.eval_position changes the model's parameters ({odd[0]}); "
                          "only parameter-free options can change at test time")
    scaled.load_state_dict(trained)
    return scaled


class LengthgenTask(Task):
    """:class:`posenc.tasks.base.Task` for the length-generalization suite.

    Its grid (``TASK``): methods × algorithmic tasks × seeds (the defaults of
    :class:`~posenc.experiments.task_grid.TaskGrid`).
    """

    name = "lengthgen"

    def build_model(self, cfg: LengthgenConfig) -> DecoderLM:
        return DecoderLM(replace(cfg.model, vocab_size=VOCAB_SIZE), pad_id=PAD)

    def train_batches(self, cfg: LengthgenConfig, epoch: int, rank: int, world: int) -> list[Batch]:
        """``steps_per_epoch`` batches; batch i of rank r is global batch ``(epoch·S + i)·world + r``
        (its update: ``epoch·S + i``, which sets the curriculum's range)."""
        s = cfg.data.steps_per_epoch
        return [training_batch(cfg, (epoch * s + i) * world + rank, world) for i in range(s)]

    def valid_batches(self, cfg: LengthgenConfig) -> list[Batch]:
        """One batch per validation length (training lengths that are not test lengths), drawn
        from ``data.valid_seed``: never a test example, never the training stream."""
        d = cfg.data
        return [collate([example(d.task, n, d.valid_seed, j) for j in range(d.eval_batch_size)], d.position_ids)
                for n in d.validation_lengths]

    def width(self, cfg: LengthgenConfig) -> int:
        return cfg.model.d_model

    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        return output_loss(model, batch)

    def checkpoint_sections(self, cfg: LengthgenConfig) -> dict[str, Any]:
        return {"model": to_dict(replace(cfg.model, vocab_size=VOCAB_SIZE)), "data": to_dict(cfg.data)}

    def evaluate(self, cfg: LengthgenConfig, model: nn.Module, out_dir: Path, result: TrainResult) -> dict[str, Any]:
        """Accuracy by test length of the best validation's weights (``evaluated_step``)."""
        evaluated = restore_best(model, Path(out_dir), result)
        device = next(model.parameters()).device
        metrics = {**evaluate_lengths(cfg, evaluation_model(cfg, model), device), "evaluated_step": evaluated}
        if cfg.data.eval_position:
            metrics["eval_position"] = cfg.data.eval_position
        atomic_write_text(Path(out_dir) / "eval.json", json.dumps(metrics, indent=2))
        return metrics

    experiment_config = LengthgenExperimentConfig
    run_config = LengthgenConfig

    def new_task(self) -> LengthgenTask:
        return LengthgenTask()

    def experiment(self, options: LengthgenExperimentConfig) -> Experiment:
        """The grid of ``options``, its algorithmic tasks the outer axis: the one builder,
        :func:`~posenc.tasks.lengthgen.config.experiment_of`, which the report reads too."""
        return experiment_of(options)

    def results(self, done: dict[str, Any], run: TaskRun) -> dict[str, Any]:
        """Adds the best validation loss, the warm-up, the best step, whether the validation curve
        ended flat (so the report's status is the trainer's: training/convergence.status_of) and
        the step whose weights were evaluated (the best validation's,
        :func:`~posenc.tasks.lengthgen.task.restore_best`)."""
        metrics = dict(run.metrics)
        conv = run.result.summary()
        done["summary"].update(best_valid=run.result.state.best_valid,
                               evaluated_step=metrics.pop("evaluated_step", run.result.state.step),
                               warmup=conv.get("warmup"), best_step=conv.get("best_step"), flat=conv.get("flat"))
        return {**done, "metrics": metrics}

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        s, m = result.get("summary", {}), result.get("metrics", {})
        unseen = m.get("unseen_seq_acc")
        acc = f"{unseen:.3f}" if isinstance(unseen, (int, float)) else "–"
        return (f"done {result['method']:<16} {result['task']:<12} seed {result['seed']:<3} unseen seq acc {acc:>6}  "
                f"steps {s.get('steps', '–'):>6}  {s.get('status', '–')}")

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        return write_report(exp.options, results, exp.root / "report")


TASK = LengthgenTask()
