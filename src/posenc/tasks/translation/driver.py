"""The experiment side of the translation task (:class:`posenc.tasks.grid.GridTask`):
settings × methods × seeds over a base :class:`~posenc.tasks.translation.config.RunConfig`
(:class:`~posenc.tasks.translation.experiment.ExperimentConfig`), each cell's freshness from the record in
its ``results.json`` (the one rule, :mod:`posenc.runs.same_run`), BLEU on ``exp.splits`` and the
translation report with its analyses (:mod:`posenc.tasks.translation.report`).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc.config import to_dict
from posenc.experiments.cell import recorded_verdict
from posenc.experiments.experiment import Cell, Experiment
from posenc.experiments.selection import SelectionConfig
from posenc.runs.same_run import RunRecord, Verdict
from posenc.tasks.grid import GridTask, Trained
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.convergence import run_status
from posenc.tasks.translation.experiment import ExperimentConfig, data_root, experiment_of
from posenc.tasks.translation.spec import TOKENIZER_KEY
from posenc.tasks.translation.task import TranslationTask
from posenc.tasks.translation.tuning import alpha_key, replay, tune_length_penalty
from posenc.training.convergence import UNKNOWN

log = logging.getLogger("posenc")


def evaluation_record(cfg: RunConfig, splits: list[str], greedy: list[str] | None = None) -> dict[str, Any]:
    """How a translation cell was scored: its decoding options, splits and the splits also decoded
    greedily (the ``evaluation`` of its record, :class:`~posenc.runs.same_run.RunRecord`; no
    ``greedy_splits`` entry when there are none, so records written before the option stay fresh)."""
    record: dict[str, Any] = {"decode": to_dict(cfg.decode), "splits": list(splits)}
    return dict(record, greedy_splits=list(greedy)) if greedy else record


def with_tuning(exp: ExperimentConfig, results: dict[str, Any], verdict: Any) -> Any:
    """``verdict``, or "rescore" when a fresh cell's length-penalty sweep (``results["length_penalty"]``)
    is not the search ``experiment.tune_length_penalty`` (and ``_max``) asks for: the search replayed
    on the stored validation BLEU (:func:`~posenc.tasks.translation.tuning.replay`) decodes other α
    (the trained model is reused)."""
    sweep = results.get("length_penalty", {}).get("sweep", {})
    stored = list(sweep)
    wanted = (replay(exp.tune_length_penalty, exp.tune_length_penalty_max, sweep) if exp.tune_length_penalty else [])
    if verdict is None or verdict.kind != "fresh" or stored == wanted:
        return verdict
    asked = ([alpha_key(a) for a in exp.tune_length_penalty] + [f"search to {exp.tune_length_penalty_max:g}"]
             if exp.tune_length_penalty else "off")
    return replace(verdict, kind="rescore", detail=f"experiment.tune_length_penalty: {stored or 'off'} -> {asked}")


def expected_evaluation(exp: ExperimentConfig, cfg: RunConfig, results: dict[str, Any]) -> dict[str, Any]:
    """The evaluation record a fresh cell holds: its decoding and splits, with the α its splits
    were decoded with when ``exp`` tunes α. That α is the search's output (checked by
    :func:`with_tuning`), so the stored record's own value is taken: results.json files written
    before the tuned α was recorded there (they say ``decode.length_penalty``) stay fresh."""
    evaluation = evaluation_record(cfg, exp.splits, exp.greedy_splits)
    stored = ((results.get("record") or {}).get("evaluation") or {}).get("decode") or {}
    if exp.tune_length_penalty and "length_penalty" in stored:
        evaluation["decode"]["length_penalty"] = stored["length_penalty"]
    return evaluation


def committed_tokenizer(exp: Any, cfg: RunConfig) -> str | None:
    """Content identity of the SentencePiece model committed with the grid for ``cfg``'s data
    (``<out_dir>/tokenizers/``, :func:`~posenc.tasks.translation.prepare.tokenizer_name`); None
    when the grid has none yet."""
    from posenc.tasks.translation.prepare import TOKENIZERS_DIR, tokenizer_name

    return _identity_of_file(exp.root / TOKENIZERS_DIR / tokenizer_name(cfg.data))


@functools.lru_cache(maxsize=32)
def _file_identity(path: str, mtime_ns: int, size: int) -> str:
    from posenc.data.spm import Tokenizer

    return Tokenizer.from_file(path).identity


def _identity_of_file(path: Path) -> str | None:
    """:attr:`Tokenizer.identity` of the model file ``path`` (None when absent), parsed once per version."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _file_identity(str(path), st.st_mtime_ns, st.st_size)


def with_tokenizer(exp: Any, cfg: RunConfig, results: dict[str, Any], verdict: Any) -> Any:
    """``verdict``, or stale when the run recorded a tokenizer (``summary.json`` ``tokenizer``) that
    is not the one committed with the grid: its per-subword figures and its stopping signal are of
    other data. A run that recorded none (trained before the record) is not judged on it."""
    recorded = (results.get("summary") or {}).get(TOKENIZER_KEY)
    expected = committed_tokenizer(exp, cfg)
    if verdict is None or verdict.kind == "stale" or recorded is None or expected is None or recorded == expected:
        return verdict
    return Verdict("stale", f"tokenizer: trained with {str(recorded)[:12]}, the grid's committed tokenizer is "
                            f"{expected[:12]}", ("tokenizer",))


def trained_elsewhere(cfg: RunConfig) -> tuple[dict[str, Any], Verdict] | None:
    """The summary of a run of ``cfg`` in ``cfg.out_dir`` whose training ended (patience, or this
    config's step cap) and which keeps its averaged checkpoint but no resumable one: trained on
    another machine and brought back without the optimizer states (e.g. a run trained on a GPU
    machine whose decoding was cut off), with the verdict on its record (handed to checkpoint
    loading, so the run is judged once). Such a run is scored, never retrained from scratch over its
    files; None when ``out_dir`` holds anything else (the normal resume path applies)."""
    from posenc.runs.run import Run

    out = Path(cfg.out_dir)
    if not (out / "summary.json").is_file() or not (out / "checkpoints" / "average" / "model.safetensors").is_file():
        return None
    run = Run.judged(cfg, out, load=False)
    if run.checkpoint_path is not None or run.verdict is None or run.verdict.kind not in ("fresh", "extend"):
        return None
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    if summary.get("stopped") == "patience":  # ended by its own plateau: other caps or logging change nothing
        return summary, run.verdict
    capped = summary.get("stopped") == "max_steps" and summary.get("max_steps") == cfg.train.max_steps
    return (summary, run.verdict) if capped and run.verdict.kind == "fresh" else None


class TranslationExperiment(GridTask):
    """Translation grids: data prepared once per setting, BLEU per split, the analyses' report."""

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
        from posenc.tasks.translation.prepare import check_prepared

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
        from posenc.tasks.translation.prepare import TOKENIZERS_DIR, prepare

        mark_datasets(data_root(exp))
        seen: set[str] = set()
        for cell in cells:
            cfg = exp.run_config(cell)
            if cfg.prepared_dir not in seen:
                seen.add(cfg.prepared_dir)
                prepare(cfg.data, cfg.prepared_dir, tokenizers=exp.root / TOKENIZERS_DIR, pin=pin)

    def stored_training(self, cfg: RunConfig) -> tuple[dict[str, Any], Verdict] | None:
        """A run trained elsewhere and brought back with only its averaged checkpoint
        (:func:`trained_elsewhere`): scored, never retrained over its files."""
        return trained_elsewhere(cfg)

    def score(self, exp: Experiment, cell: Cell, cfg: RunConfig, trained: Trained) -> dict[str, Any]:
        """BLEU of the run on the experiment's splits, with the run's averaged/latest checkpoint (the
        model just trained, or loaded with the cell's verdict: judged once), decoded with the α its
        validation BLEU chose where the experiment tunes α, and greedily on ``greedy_splits``."""
        from posenc.tasks.translation.load import load_run, loaded_after_training, translate_split

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

    # ------------------------------------------------------------------ selection stage hooks
    def selection_experiment(self, exp: ExperimentConfig, sel: SelectionConfig) -> ExperimentConfig:
        """The validation sweep of ``sel`` (experiments/selection.py): one method per value (the
        selected method's overrides plus ``key: value``) on ``sel.setting`` and ``sel.seeds``, scored
        on the validation split only (``splits: [valid]``, no greedy decoding, no analyses, no selection
        of its own). Its runs live beside the grid's (``<root>/<setting>/<method>-<key><value>/``),
        sharing its data."""
        methods = {sel.label(v): {**exp.methods[sel.method], sel.key: v} for v in sel.values}
        return replace(exp, methods=methods, settings={sel.setting: exp.settings[sel.setting]}, seeds=list(sel.seeds),
                       splits=["valid"], greedy_splits=[], analyses=[], baseline="", selection=SelectionConfig())

    def selection_score(self, result: dict[str, Any], metric: str) -> float:
        """A sweep cell's validation ``metric`` (``bleu``: sacreBLEU of the validation split)."""
        return float(result["scores"]["valid"][metric])

    def with_selection(self, exp: ExperimentConfig, value: Any) -> ExperimentConfig:
        """The test grid: the selected method with ``selection.key: value``."""
        sel = exp.selection
        return replace(exp, methods={**exp.methods, sel.method: {**exp.methods[sel.method], sel.key: value}})

    def report(self, exp: Experiment, results: list[dict[str, Any]]) -> Path:
        """The translation report of ``results`` (:func:`~posenc.tasks.translation.report.write_translation_report`)."""
        from posenc.tasks.translation.report import write_translation_report

        done = {(r.get("setting"), r.get("method"), r.get("seed")) for r in results}
        # a committed grid in a fresh clone keeps no prepared data (.gitignore); only settings with runs
        self.prepare_data(exp, [c for c in exp.cells() if c in done], pin=False)
        return write_translation_report(exp.options, results)


TASK = TranslationExperiment()
