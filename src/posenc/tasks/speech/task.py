"""The speech task: a CTC acoustic model on FSDD digits trained through the one Trainer, scored
by WER/CER per utterance-duration bucket (CAPE §5.2, Fig. 5).

Shape legend: B utterances, T input frames, L output frames, V characters, S target characters.

Training utterances are 1..``max_train_words`` random digit clips (≤ ``max_train_duration`` s).
One Trainer "epoch" is a pool of ``data.pool_batches`` batches drawn with a generator seeded by
(train.seed, data.seed, epoch), sorted by length and cut into batches in a random order, so every
epoch is a pure function of its number (exact resume) and a batch holds similar durations.

With ``data.valid_size > 0`` the ``valid_holdout`` lowest training indices of every (digit, speaker)
are never trained on; ``valid_size`` utterances built from them like training ones (seeded by
``data.seed`` alone, so every model seed sees the same set) give the validation loss for patience.

The task's grid (``TASK``, a :class:`SpeechTask`: the same class): methods × seeds over a base
:class:`SpeechConfig`, each cell a CTC run through :func:`posenc.tasks.base.run_task`; its report
(:mod:`posenc.tasks.speech.report`) goes to ``<root>/report``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from posenc.data import speech as sd
from posenc.data.speech import check_fsdd
from posenc.errors import DataError
from posenc.experiments.experiment import Experiment
from posenc.models.ctc import CTCModel, CTCOutput
from posenc.tasks.base import Task, TaskRun
from posenc.tasks.speech.config import SpeechConfig, SpeechDataConfig, SpeechExperimentConfig
from posenc.tasks.speech.evaluate import eval_sets, evaluate_by_duration
from posenc.tasks.speech.report import write_report, write_summary
from posenc.training.loss import LossOutput

VALID_STREAM = 0x7A11D  # second seed word of the validation utterances' generator (training uses 3 words)


def build_model(cfg: SpeechConfig) -> CTCModel:
    d = cfg.data
    return CTCModel(cfg.model, d.win // 2 + 1, sd.CharVocab().size, d.hop_ms / 1000)


def training_utterance(pool: Sequence[sd.Clip], d: SpeechDataConfig, rng: np.random.Generator) -> sd.Utterance:
    """1..``max_train_words`` random clips (uniform count), dropping clips from the end until the
    utterance fits ``max_train_duration`` (one clip always stays); lead/trail noise
    ~ U(0, gap_max), inner gaps ~ U(gap_min, gap_max)."""
    clips = [pool[int(rng.integers(len(pool)))] for _ in range(int(rng.integers(1, d.max_train_words + 1)))]
    gaps = [float(rng.uniform(0, d.gap_max))] + [float(rng.uniform(d.gap_min, d.gap_max)) for _ in clips[1:]]
    trail = float(rng.uniform(0, d.gap_max))
    while len(clips) > 1 and sum(c.samples for c in clips) / d.sample_rate + sum(gaps) + trail > d.max_train_duration:
        clips, gaps = clips[:-1], gaps[:-1]
    return sd.compose(clips, gaps, trail, d.sample_rate, d.noise_std, rng)


def ctc_sums(out: CTCOutput, targets: torch.Tensor, target_lengths: torch.Tensor, blank: int = 0) -> torch.Tensor:
    """Summed over the batch, the CTC loss of each utterance divided by its target length (the
    Trainer divides by B: the mean of ``F.ctc_loss(reduction="mean")``); infeasible rows count 0."""
    per_utt = F.ctc_loss(out.log_probs.transpose(0, 1), targets, out.lengths, target_lengths,
                         blank=blank, reduction="none", zero_infinity=True)  # (B,)
    return (per_utt / target_lengths.clamp(min=1).to(per_utt.dtype)).sum()


class SpeechTask(Task):
    """:class:`~posenc.tasks.base.Task` for CTC speech recognition by duration.

    Its grid (``TASK``): methods × seeds over a base run config (the defaults of
    :class:`~posenc.experiments.task_grid.TaskGrid`).
    """

    name = "speech"

    def __init__(self, data: sd.Fsdd | None = None) -> None:
        self._data = data
        self._valid: dict[str, list[sd.SpeechBatch]] = {}

    def data(self, cfg: SpeechConfig) -> sd.Fsdd:
        if self._data is None:
            self._data = sd.load_fsdd(cfg.data.path, cfg.data.sample_rate, cfg.data.limit)
        return self._data

    def check(self, cfg: SpeechConfig) -> None:
        """The recordings (and held-out ones when validating) are there: a one-line DataError before
        the run directory is touched."""
        self.data(cfg)
        self.pools(cfg)

    def pools(self, cfg: SpeechConfig) -> tuple[list[sd.Clip], list[sd.Clip]]:
        """(training, validation) recordings: all training recordings and none when
        ``data.valid_size`` is 0, else :func:`~posenc.data.speech.hold_out` of them."""
        train = self.data(cfg).train
        if cfg.data.valid_size == 0:
            return train, []
        kept, held = sd.hold_out(train, cfg.data.valid_holdout)
        if not kept or not held:
            raise DataError(f"data.valid_holdout {cfg.data.valid_holdout} leaves {len(kept)} training and "
                            f"{len(held)} held-out recordings; both must be non-empty")
        return kept, held

    def build_model(self, cfg: SpeechConfig) -> nn.Module:
        return build_model(cfg)

    def train_batches(self, cfg: SpeechConfig, epoch: int, rank: int, world: int) -> list[sd.SpeechBatch]:
        d, bs, vocab = cfg.data, cfg.data.batch_size, sd.CharVocab()
        rng = np.random.default_rng([cfg.train.seed, d.seed, epoch])
        pool = self.pools(cfg)[0]
        utts = sorted((training_utterance(pool, d, rng) for _ in range(bs * d.pool_batches)),
                      key=lambda u: u.wave.shape[0])
        order = [int(k) for k in rng.permutation(d.pool_batches)][rank::world]
        return [sd.collate(utts[k * bs: (k + 1) * bs], vocab, d.sample_rate, d.hop, d.win, d.padding_free,
                           d.surround_boundary)
                for k in order]

    def valid_batches(self, cfg: SpeechConfig) -> list[sd.SpeechBatch] | None:
        """``data.valid_size`` utterances of held-out recordings, built like training ones, sorted by
        length and cut into batches of ``eval_batch`` (the same for every call); None when 0."""
        d, vocab = cfg.data, sd.CharVocab()
        if d.valid_size == 0:
            return None
        key = repr(d)
        if key not in self._valid:
            rng = np.random.default_rng([d.seed, VALID_STREAM])
            held = self.pools(cfg)[1]
            utts = sorted((training_utterance(held, d, rng) for _ in range(d.valid_size)),
                          key=lambda u: u.wave.shape[0])
            self._valid[key] = [sd.collate(utts[k: k + d.eval_batch], vocab, d.sample_rate, d.hop, d.win,
                                           d.padding_free, d.surround_boundary)
                                for k in range(0, len(utts), d.eval_batch)]
        return self._valid[key]

    def width(self, cfg: SpeechConfig) -> int:
        return cfg.model.d_model

    def loss(self, model: nn.Module, batch: sd.SpeechBatch) -> LossOutput:
        loss = ctc_sums(model(batch.features, batch.times, batch.mask), batch.targets, batch.target_lengths)
        return LossOutput(loss, loss.detach(), torch.tensor(batch.targets.shape[0]))

    def evaluate(self, cfg: SpeechConfig, model: nn.Module, out_dir: Path, result: Any = None) -> dict[str, Any]:
        """``{"rows": [...]}``: WER/CER per duration bucket (see :func:`evaluate_by_duration`)."""
        return {"rows": evaluate_by_duration(model, cfg, eval_sets(cfg, self.data(cfg)))}

    experiment_config = SpeechExperimentConfig
    run_config = SpeechConfig

    def new_task(self) -> SpeechTask:
        return SpeechTask()

    def data_check(self, data: Any) -> None:
        """The FSDD recordings of ``data.path`` (or ``$POSENC_FSDD``, else ../shared/data/fsdd)."""
        check_fsdd(data.path)

    def results(self, done: dict[str, Any], run: TaskRun) -> dict[str, Any]:
        """The rows per duration bucket carry the method label, seed, training time, the mean
        loss of the last 20 log rows and the parameter count."""
        train = run.result.train
        final = sum(r["loss"] for r in train[-20:]) / max(1, len(train[-20:]))
        extra = {"seed": done["seed"], "train_s": round(run.result.state.wall_s, 1), "final_loss": round(final, 4),
                 "params": done["summary"]["params"]}
        done["metrics"]["rows"] = [{**r, "method": done["method"], **extra} for r in done["metrics"]["rows"]]
        return done

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        rows = result["metrics"]["rows"]
        return (f"[{result['method']} seed {result['seed']}] {result['summary']['steps']} steps: "
                + ", ".join(f"{r['bucket']} WER {r['wer']}" for r in rows))

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """results.csv, wer_by_duration.png and README.md (mean ± sd over seeds) under ``<root>/report``."""
        out = exp.root / "report"
        longest = exp.run_config(exp.cells()[0]).data.max_train_duration
        write_report([row for r in results for row in r["metrics"]["rows"]], out, longest)
        write_summary(exp.name, results, longest, out)
        return out


TASK = SpeechTask()
