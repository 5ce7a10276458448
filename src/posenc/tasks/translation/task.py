"""The translation task: its Seq2Seq model, token batches, label-smoothed loss and
BLEU/chrF scoring behind the :class:`~posenc.tasks.base.Task` interface.

It puts together the package's pieces (data preparation in :mod:`~posenc.tasks.translation.prepare`,
model building and batching in :mod:`~posenc.tasks.translation.train`, decoding in
:mod:`~posenc.tasks.translation.load`) instead of re-implementing them. ``posenc train`` is
:func:`train_run`: :func:`posenc.tasks.base.run_task` of this task without test splits, so a run
trained alone and one of an experiment grid are the same.

The task's grid (``TASK``, a :class:`TranslationTask`: the same class): settings × methods × seeds over a base
:class:`~posenc.tasks.translation.config.RunConfig` (:func:`~posenc.tasks.translation.experiment.experiment_of`),
each cell's freshness from the record in its ``results.json`` (the one rule, with what
:mod:`~posenc.tasks.translation.freshness` adds), BLEU on the experiment's splits and the
translation report with its analyses (:mod:`posenc.tasks.translation.report`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from torch import nn

from posenc.config import to_dict
from posenc.data.batching import Batch
from posenc.data.spm import Tokenizer
from posenc.decoding.loaded import LoadedRun, source_bos
from posenc.errors import ConfigError
from posenc.experiments.cell import recorded_verdict
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.task_grid import Trained
from posenc.files import atomic_write_bytes
from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.runs.same_run import RunRecord, Verdict
from posenc.tasks.base import Task, run_task
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.convergence import run_status
from posenc.tasks.translation.experiment import ExperimentConfig, data_root, experiment_of
from posenc.tasks.translation.freshness import (
    evaluation_record,
    expected_evaluation,
    trained_elsewhere,
    with_tokenizer,
    with_tuning,
)
from posenc.tasks.translation.load import load_run, loaded_after_training, translate_split
from posenc.tasks.translation.prepare import TOKENIZERS_DIR, check_prepared, load_meta, prepare
from posenc.tasks.translation.spec import TOKENIZER_KEY, VOCAB_FILE, VOCAB_KEY
from posenc.tasks.translation.train import (
    ARCHS,
    EncodedSplit,
    build_model,
    resolve_model_config,
    stopping_split,
    train_split,
    validation_bleu,
)
from posenc.tasks.translation.tuning import tune_length_penalty
from posenc.training import checkpoint as ck
from posenc.training.convergence import UNKNOWN
from posenc.training.loss import LossOutput

log = logging.getLogger("posenc")

#: Tokens of the shortest pair worth training on: one target subword and EOS.
MIN_PAIR_TOKENS = 2


@dataclass
class _Prepared:
    cfg: RunConfig  # with the data-dependent values (vocabulary size, CAPE α) filled in
    tokenizer: Tokenizer
    data_dir: Path


@dataclass
class _Splits:
    train: EncodedSplit  # without pairs longer than data.max_train_len / train.max_tokens
    valid: EncodedSplit  # the pairs whose loss drives patience (train.stopping_split)
    signal: str  # which validation pairs those are, for the summary


class TranslationTask(Task):
    """:class:`~posenc.tasks.base.Task` for sentence-level translation scored by BLEU/chrF.
    ``posenc train`` is ``run_task(TranslationTask(splits=()), cfg)``.

    Its grid (``TASK``): settings × methods × seeds, its cells scored by BLEU on the
    experiment's splits (its own schema, freshness and scoring over the grid side of
    :class:`~posenc.experiments.task_grid.TaskGrid`).
    """

    name = "translation"

    def __init__(self, splits: tuple[str, ...] = ("test",)) -> None:
        self.splits = splits
        self._prepared: dict[str, _Prepared] = {}
        self._encoded: dict[tuple[str, bool], _Splits] = {}
        self._loss: Seq2SeqLoss | None = None
        self._bos: bool | None = None  # the built model's source-BOS flag (set by build_model)

    def check(self, cfg: RunConfig) -> None:
        """Budgets no training pair can meet, refused before the data are prepared (nothing is
        written): the shortest pair takes 2 tokens (one target subword and EOS)."""
        for key, value in (("train.max_tokens", cfg.train.max_tokens), ("data.max_train_len", cfg.data.max_train_len)):
            if value < MIN_PAIR_TOKENS:
                raise ConfigError(f"{key} must be >= {MIN_PAIR_TOKENS} (one target subword and EOS), got {value}")

    def setup(self, cfg: RunConfig, restart: bool) -> RunConfig:
        """Prepare the data (rebuilt when a restarted run owns its data directory) and resolve
        the model config from it (vocabulary size, CAPE's α)."""
        owned = not cfg.data_dir or Path(cfg.data_dir).resolve() == (Path(cfg.out_dir) / "data").resolve()
        return self._prepare(cfg, rebuild=restart and owned).cfg

    def prepared(self, cfg: RunConfig) -> _Prepared:
        """The data of ``cfg``, prepared once (:meth:`_prepare`)."""
        return self._prepared.get(str(cfg.prepared_dir)) or self._prepare(cfg)

    def _prepare(self, cfg: RunConfig, rebuild: bool = False) -> _Prepared:
        """Prepare the data (prepare.py; ``rebuild``: afresh), load its vocabulary and resolve the
        model config from it; kept for the task's later calls."""
        data_dir = prepare(cfg.data, cfg.prepared_dir, replace=rebuild)
        tok = Tokenizer.from_file(data_dir / VOCAB_FILE)
        self._prepared[str(cfg.prepared_dir)] = _Prepared(resolve_model_config(cfg, load_meta(data_dir)), tok, data_dir)
        return self._prepared[str(cfg.prepared_dir)]

    def resolved(self, cfg: RunConfig) -> RunConfig:
        return self.prepared(cfg).cfg

    def build_model(self, cfg: RunConfig) -> nn.Module:
        p = self.prepared(cfg)
        model = build_model(p.cfg, p.tokenizer.pad_id)
        self._loss = Seq2SeqLoss(cfg.train.label_smoothing, p.tokenizer.pad_id)
        self._bos = source_bos(p.cfg)
        return model

    def width(self, cfg: RunConfig) -> int:
        """d_model of the Noam schedule (the RNN-NMT's hidden size)."""
        arch = ARCHS[cfg.arch]
        return arch.width(arch.section(self.resolved(cfg)))

    def checkpoint_sections(self, cfg: RunConfig) -> dict[str, Any]:
        """``arch``, ``data`` and the active model section: what ``load_run`` rebuilds from."""
        c = self.resolved(cfg)
        return {"arch": c.arch, "data": to_dict(c.data), "model": to_dict(ARCHS[c.arch].section(c))}

    def checkpoint_state(self, cfg: RunConfig) -> dict[str, Any]:
        """The vocabulary's sha256, stored with every checkpoint: loading checks it against spm.model."""
        return {VOCAB_KEY: self.prepared(cfg).tokenizer.sha256}

    def write_files(self, cfg: RunConfig, out_dir: Path) -> None:
        """The run's vocabulary (``spm.model``), so a moved run directory translates on its own."""
        atomic_write_bytes(Path(out_dir) / VOCAB_FILE, (self.prepared(cfg).data_dir / VOCAB_FILE).read_bytes())

    def _splits(self, cfg: RunConfig) -> _Splits:
        p = self.prepared(cfg)
        if self._bos is None:
            raise RuntimeError("TranslationTask: build_model first (batches depend on the model's source BOS)")
        key = (str(p.data_dir), self._bos)
        if key not in self._encoded:
            train = train_split(p.cfg, p.tokenizer, p.data_dir, self._bos)
            valid, signal = stopping_split(p.cfg, p.tokenizer, p.data_dir, self._bos, train)
            self._encoded[key] = _Splits(train, valid, signal)
        return self._encoded[key]

    def train_batches(self, cfg: RunConfig, epoch: int, rank: int, world: int) -> list[Batch]:
        tc = cfg.train
        return self._splits(cfg).train.batches(tc.max_tokens, True, tc.seed, epoch, rank, world)

    def valid_batches(self, cfg: RunConfig) -> list[Batch] | None:
        return self._splits(cfg).valid.batches(cfg.train.max_tokens, False, 0, 0) or None

    def validation_metric(self, cfg: RunConfig) -> Callable[[nn.Module], float] | None:
        """Greedy validation BLEU every ``train.metric_every`` updates (None when off)."""
        p = self.prepared(cfg)
        return validation_bleu(p.cfg, p.tokenizer, p.data_dir, bool(self._bos))

    def summary(self, cfg: RunConfig) -> dict[str, Any]:
        """What the run's summary records of its data: the stopping signal, the training pairs
        dropped as too long, its vocabulary file's sha256 (:meth:`checkpoint_state`) and the
        tokenizer's content identity (``tokenizer``: per-subword figures compare only between runs
        of one tokenizer, which a run's config alone does not pin, as SentencePiece training may
        differ between machines)."""
        s = self._splits(cfg)
        return {"stopping_signal": s.signal, "dropped_train_pairs": s.train.dropped, **self.checkpoint_state(cfg),
                TOKENIZER_KEY: self.prepared(cfg).tokenizer.identity}

    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        if self._loss is None:
            raise RuntimeError("TranslationTask.loss before build_model")
        return self._loss(model, batch)

    def evaluate(self, cfg: RunConfig, model: nn.Module, out_dir: Path, result: Any = None) -> dict[str, Any]:
        """BLEU/chrF of ``model`` on ``self.splits`` (load.py's decoding and scoring)."""
        if not self.splits:
            return {}

        p = self.prepared(cfg)
        run_cfg = p.cfg if Path(p.cfg.out_dir) == Path(out_dir) else replace(p.cfg, out_dir=str(out_dir))
        latest = ck.latest_checkpoint(Path(out_dir) / "checkpoints") or Path(out_dir)
        loaded = LoadedRun(run_cfg, model.eval(), p.tokenizer, latest)
        return {split: translate_split(loaded, split) for split in self.splits}

    experiment_config = ExperimentConfig
    run_config = RunConfig

    def new_task(self) -> TranslationTask:
        """The run side without test splits (``posenc train``; a cell's splits are scored by :meth:`run_cell`)."""
        return TranslationTask(splits=())

    def experiment(self, options: ExperimentConfig) -> Experiment:
        """Settings × methods × seeds (:func:`~posenc.tasks.translation.experiment.experiment_of`)."""
        return experiment_of(options)

    def verdict(self, exp: Experiment, cell: Cell, results: dict[str, Any] | None) -> Verdict | None:
        """fresh / rescore / extend / stale by the one rule on the stored record
        (:func:`~posenc.experiments.cell.recorded_verdict`, scored as the grid scores now), then
        the α search and the tokenizer its results hold (None: no results yet, nothing stale)."""
        cfg, options = exp.run_config(cell), exp.options
        if results is None:
            return recorded_verdict(cfg, None)
        verdict = recorded_verdict(cfg, results, expected_evaluation(options, cfg, results))
        return with_tokenizer(exp, cfg, results, with_tuning(options, results, verdict))

    def prepare(self, exp: Experiment, cells: list[Cell]) -> None:
        """Note the analyses the report will skip; prepare every data directory the cells need,
        once each, before any run starts."""
        for name in exp.options.analyses:
            if exp.options.skip_reason(name):
                log.info("note: %s; it will be skipped in the report", exp.options.skip_reason(name))
        self.prepare_data(exp, cells)

    def check_data(self, exp: Experiment, cells: list[Cell]) -> None:
        """The corpus of every setting ``cells`` need whose data directory is not prepared yet,
        checked once each before any run or worker starts (:func:`posenc.data.corpora.check_corpus`):
        a missing corpus stops the grid in one line naming it and how to get it."""
        from posenc.data.corpora import check_corpus

        seen: set[str] = set()
        for cell in cells:
            cfg = exp.run_config(cell)
            if cfg.prepared_dir not in seen:
                seen.add(cfg.prepared_dir)
                if not check_prepared(cfg.data, cfg.prepared_dir):
                    check_corpus(cfg.data.corpus, cfg.data.options)

    def prepare_data(self, exp: Experiment, cells: list[Cell], pin: bool = True) -> None:
        """Every data directory ``cells`` need, prepared once each (idempotent: a prepared one is kept),
        in the experiment's ``data/``, which is posenc's (marked ``datasets``: no output goes into it),
        tokenized with the grid's committed SentencePiece model (``<out_dir>/tokenizers/``); with
        ``pin``, a model trained where the grid has none yet is committed there for its later runs."""
        from posenc.runs.ownership import mark_datasets

        mark_datasets(data_root(exp))
        seen: set[str] = set()
        for cell in cells:
            cfg = exp.run_config(cell)
            if cfg.prepared_dir not in seen:
                seen.add(cfg.prepared_dir)
                prepare(cfg.data, cfg.prepared_dir, tokenizers=exp.root / TOKENIZERS_DIR, pin=pin)

    def stored_training(self, cfg: RunConfig, verdict: Verdict | None = None) -> tuple[dict[str, Any], Verdict] | None:
        """A run trained elsewhere and brought back with only its averaged checkpoint
        (:func:`trained_elsewhere`, judged with ``verdict`` where given): scored, never retrained
        over its files."""
        return trained_elsewhere(cfg, verdict)

    def score(self, exp: Experiment, cell: Cell, cfg: RunConfig, trained: Trained) -> dict[str, Any]:
        """BLEU of the run on the experiment's splits, with the run's averaged/latest checkpoint (the
        model just trained, or loaded with the cell's verdict: judged once), decoded with the α its
        validation BLEU chose where the experiment tunes α, and greedily on ``greedy_splits``."""

        options = exp.options
        loaded = (load_run(cfg.out_dir, verdict=trained.verdict) if trained.run is None or trained.run.run is None
                  else loaded_after_training(trained.run.run))
        decode, tuning = cfg.decode, None
        if options.tune_length_penalty:  # α chosen on validation BLEU; the splits decoded with it
            tuning = tune_length_penalty(loaded, options.tune_length_penalty, cfg.decode,
                                         options.tune_length_penalty_max)
            decode = replace(cfg.decode, length_penalty=tuning["chosen"])
        at_bound = tuning["at_bound"] if tuning else None  # recorded with each split decoded at the chosen α
        scores = {split: translate_split(loaded, split, decode, at_bound=at_bound) for split in options.splits}
        greedy = replace(cfg.decode, beam=1, length_penalty=0.0)  # Neishi & Yoshinaga's decoding, beside the beam
        summary = dict(trained.summary, status=run_status(cfg.out_dir, trained.summary, cfg.train.max_steps))
        # the α decoded with
        record = evaluation_record(replace(cfg, decode=decode), options.splits, options.greedy_splits)
        result = {"setting": cell.group, "method": cell.method, "seed": cell.seed, "summary": summary,
                  "scores": scores, "record": RunRecord.of(cfg, record).to_dict()}
        if options.greedy_splits:
            result["greedy"] = {split: translate_split(loaded, split, greedy) for split in options.greedy_splits}
        return dict(result, length_penalty=tuning) if tuning else result

    def check_carried(self, exp: Experiment, cell: Cell, results: dict[str, Any],
                      run_dir: Path) -> tuple[str, str | None]:
        """A cell trained elsewhere and brought back (``--merge``; its files in ``run_dir``): every
        score recomputed here against this grid's data, prepared first, and why its stored scores
        do not hold (one line), or None (:func:`~posenc.tasks.translation.carried.check_carried`)."""
        from posenc.tasks.translation.carried import check_carried

        self.prepare_data(exp, [cell], pin=False)  # a merge trains nothing: it commits no tokenizer
        return "scores recomputed here", check_carried(exp.run_config(cell), exp.options.splits, results,
                                                       Path(run_dir))

    def summary_line(self, exp: Experiment, result: dict[str, Any]) -> str:
        """Method, setting, seed, BLEU of the first split, steps, convergence status."""
        split = exp.options.splits[0]
        summary = result.get("summary", {})
        bleu = result.get("scores", {}).get(split, {}).get("bleu")
        bleu_s = f"{bleu:.2f}" if isinstance(bleu, (int, float)) else "–"
        return (f"done {result['method']:<10} {result['setting']:<12} seed {result['seed']:<3} "
                f"{split} BLEU {bleu_s:>6}  steps {summary.get('steps', '–'):>6}  {summary.get('status', UNKNOWN)}")

    # ------------------------------------------------------------------ selection stage
    def selection_score(self, result: dict[str, Any], metric: str) -> float:
        """A sweep cell's validation ``metric`` (``bleu``: sacreBLEU of the validation split)."""
        return float(result["scores"]["valid"][metric])

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """The translation report of ``results`` (:func:`~posenc.tasks.translation.report.write_translation_report`)."""
        from posenc.tasks.translation.report import write_translation_report

        done = {(r.get("setting"), r.get("method"), r.get("seed")) for r in results}
        # a committed grid in a fresh clone keeps no prepared data (.gitignore); only settings with runs
        self.prepare_data(exp, [c for c in exp.cells() if c in done], pin=False)
        return write_translation_report(exp.options, results)


def train_run(cfg: RunConfig, resume: bool = True) -> dict[str, Any]:
    """``posenc train``: prepare data if needed, train, and return the summary (``summary.json``).

    Everything is validated before the run directory is written (held under an exclusive lock):
    a run of another data/model config in ``out_dir`` is an error unless ``resume`` is False,
    which replaces it."""
    return run_task(TranslationTask(splits=()), cfg, resume=resume).summary


TASK = TranslationTask()
