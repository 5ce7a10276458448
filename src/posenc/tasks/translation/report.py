"""Experiment report: a results table like SHAPE Table 2 (mean ± std over seeds) and the
papers' analyses for each setting, all under ``root/report``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from posenc.analysis import learning_curves
from posenc.analysis.grid_part import GridPart, clear_analysis_output, run_analysis
from posenc.data.corpora import Pair
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.errors import ConfigError
from posenc.evaluation.seeds import mean_std
from posenc.experiments.cell import run_identity, trained_on
from posenc.experiments.selection import SelectionConfig, selection_lines
from posenc.tasks.translation.convergence import judge_run, read_valid
from posenc.tasks.translation.experiment import ExperimentConfig, experiment_of, run_config
from posenc.tasks.translation.load import LoadedRun, decode_options, load_run
from posenc.tasks.translation.prepare import load_meta
from posenc.tasks.translation.spec import SPEC, TOKENIZER_KEY
from posenc.training.convergence import CONVERGED, status_of


def _cap(r: dict[str, Any]) -> int | None:
    """The run's ``max_steps`` as its results.json records it (the freshness record's extension keys)."""
    cap = r.get("record", {}).get("extension", {}).get("max_steps")
    return int(cap) if cap is not None else None


def judged(exp: ExperimentConfig, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with ``judged``: each run's status and end slope read now from its run directory
    (summary, cap, valid.csv; :func:`posenc.tasks.translation.convergence.judge_run`), never from the
    stored ``status`` (results.json files are not rewritten)."""
    out = []
    for r in results:
        run_dir = run_config(exp, r["setting"], r["method"], r["seed"]).out_dir
        out.append(dict(r, judged=judge_run(run_dir, r.get("summary"), _cap(r))))
    return out


def devices_section(results: list[dict[str, Any]]) -> list[str]:
    """Which runs trained on which device (:func:`~posenc.experiments.cell.trained_on`), one row per device."""
    runs: dict[str, list[str]] = {}
    for r in results:
        runs.setdefault(trained_on(r), []).append(f"{r['setting']}/{r['method']}/seed{r['seed']}")
    if not runs:
        return []
    rows = [f"| {device} | {len(names)} | {', '.join(names)} |" for device, names in runs.items()]
    return ["## Where each run trained", "",
            "The device of each run's last training session (its summary.json; older runs: the `train.device` "
            "of their record). Wall-clock times compare only runs of one device.", "",
            "| device | runs | which |", "|---|---|---|", *rows, ""]


def _status(r: dict[str, Any]) -> str:
    """The run's status by the one rule (training/convergence.py): the report's reading
    (:func:`judged`), else recomputed from the recorded stop reason, best step, warm-up and cap; a
    stored ``status`` from an older rule is not trusted."""
    if "judged" in r:
        return r["judged"]["status"]
    return status_of(r.get("summary"), _cap(r))


def row_status(runs: list[dict[str, Any]]) -> str:
    """'converged' when every run of the row converged, else which runs did not and why."""
    open_runs = [f"{r['setting']}/seed{r['seed']}: {_status(r)}" for r in runs if _status(r) != CONVERGED]
    if not runs:
        return "–"
    return "converged" if not open_runs else "NOT CONVERGED (" + "; ".join(open_runs) + ")"


def results_table(exp: ExperimentConfig, results: list[dict[str, Any]], split: str | None = None) -> str:
    """Markdown: one row per method, BLEU per setting (mean ± std over seeds, ``(n=K)`` when fewer
    seeds than the grid's are done), size, time, steps and convergence status. A BLEU from a run
    that had not converged carries a ``*``, and the row's status names those runs (a conclusion
    from them must say so)."""
    split = split or exp.splits[0]
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        cells.setdefault((r["method"], r["setting"]), []).append(r)
    settings = list(exp.settings)
    mixed = len({trained_on(r) for r in results}) > 1  # a grid trained on several machines: name each wall time's
    head = (f"| method | {' | '.join(f'{s} BLEU' for s in settings)} | params | train s (first run) | steps "
            "| status |")
    lines = [head, "|" + "---|" * (len(settings) + 5)]
    for method in exp.methods:
        bleu = []
        for s in settings:
            runs = cells.get((method, s), [])
            star = "*" if any(_status(r) != CONVERGED for r in runs) else ""
            n = f" (n={len(runs)})" if 0 < len(runs) < len(exp.seeds) else ""  # a grid reported before it is complete
            bleu.append(mean_std([r["scores"][split]["bleu"] for r in runs]) + star + n if runs else "–")
        runs = [r for s in settings for r in cells.get((method, s), [])]
        first_run = runs[0] if runs else {}  # size and time: the first run of its first setting that has runs
        first = first_run.get("summary", {})
        steps = sorted({r.get("summary", {}).get("steps") for r in runs} - {None})
        steps_s = "–" if not steps else (str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}")
        params = first.get("params")
        wall = f"{first.get('wall_s', '–')}" + (f" ({trained_on(first_run)})" if mixed else "")
        lines.append(f"| {method} | {' | '.join(bleu)} | {f'{params:,}' if isinstance(params, int) else '–'} | "
                     f"{wall} | {steps_s} | {row_status(runs)} |")
    if any(_status(r) != CONVERGED for r in results):
        lines.append("")
        lines.append("\\* from at least one run that had not converged: stopped by the step cap or reached it (\"still "
                     "improving\"), stopped by patience while its validation curve still fell (\"not flat\"), best "
                     "validation inside warm-up, or no stop reason recorded (\"unknown\"). Converged means stopped by "
                     "patience before the cap, with the best validation after warm-up and a flat end of the validation "
                     "curve (training/convergence.py); a longer run may change a starred number and any comparison "
                     "drawn from it.")
    return "\n".join(lines)


def seed_test_section(exp: ExperimentConfig, results: list[dict[str, Any]], split: str | None = None) -> list[str]:
    """Each method against the baseline per setting by Welch's t-test on the per-seed BLEU
    (posenc.evaluation.seeds): the training-seed noise that the paired bootstrap does not see."""
    from posenc.evaluation.seeds import seed_test

    split, base = split or exp.splits[0], exp.baseline_label
    bleu = {(r["method"], r["setting"]): [] for r in results}
    for r in sorted(results, key=lambda r: r["seed"]):
        bleu[(r["method"], r["setting"])].append(r["scores"][split]["bleu"])
    rows = []
    for setting in exp.settings:
        for method in (m for m in exp.methods if m != base):
            a, b = bleu.get((method, setting), []), bleu.get((base, setting), [])
            if len(a) >= 2 and len(b) >= 2:
                t = seed_test(a, b)
                p = f"{t.p:.3f}" if t.p >= 0.001 else "< 0.001"
                rows.append(f"| {setting} | {method} | {t.diff:+.2f} | {t.t:.2f} | {t.df:.1f} | {p} |")
    if not rows:
        return []
    return [f"## Across seeds: each method vs `{base}` (Welch's t-test on per-seed {split} BLEU)", "",
            "Two-sided; n = the seeds of each system. The paired bootstrap in each setting's section resamples "
            "test sentences (test-set noise); this test sees the spread over training seeds.", "",
            "| setting | method | Δ BLEU | t | df | p |", "|---|---|---|---|---|---|", *rows, ""]


def learning_curves_section(exp: ExperimentConfig, results: list[dict[str, Any]], report: Path) -> list[str]:
    """Validation perplexity vs steps and vs wall clock for every run of each setting."""
    md = ["## Learning curves (validation perplexity; SHAPE Fig. 8/9)", ""]
    for setting in exp.settings:
        runs = [r for r in results if r["setting"] == setting]
        names = {f"{r['method']}/seed{r['seed']}": r for r in runs}
        curves = {n: read_valid(run_config(exp, setting, r["method"], r["seed"]).out_dir) for n, r in names.items()}
        out = learning_curves.learning_curves(curves, {n: _status(r) for n, r in names.items()},
                                              report / setting / "learning_curves")
        md += [f"### {setting}", "", f"![learning curves]({(out / 'learning_curves.png').relative_to(report)})", "",
               (out / "curves.md").read_text(encoding="utf-8"), ""]
    return md


class SettingView:
    """The runs of one setting for ``seeds`` (default: every seed of the experiment), loaded
    lazily, with the prepared test data: the :class:`~posenc.analysis.view.GridView` that the
    analyses' feeders read (translation runs carry every group of it, ``spec.SPEC.carries``).

    Text analyses see every seed pooled: :attr:`src`/:attr:`ref` repeat the test set once per seed
    and :meth:`hyps` concatenates the seeds' outputs in the same order (so a corpus BLEU is the
    BLEU of all seeds' outputs together, and a paired bootstrap pairs each seed's sentence with the
    same seed's sentence of the other model). Analyses of model internals (:meth:`run`,
    :meth:`models`) need a one-seed view: :func:`~posenc.analysis.grid_part.run_analysis` makes one
    per seed (:func:`setting_part`).
    """

    carries = SPEC.carries

    def __init__(self, exp: ExperimentConfig, setting: str, seeds: list[int] | None = None) -> None:
        self.exp, self.setting = exp, setting
        self.methods, self.baseline = list(exp.methods), exp.baseline_label
        self.seeds = list(seeds) if seeds else list(exp.seeds)
        self.cfgs = {m: run_config(exp, setting, m, self.seeds[0]) for m in exp.methods}
        base_cfg = self.cfgs[exp.baseline_label]
        self.data_dir = Path(base_cfg.prepared_dir)
        self.meta = load_meta(self.data_dir)
        test_src, test_ref = read_lines(self.data_dir / "test.src"), read_lines(self.data_dir / "test.tgt")
        self.src, self.ref = test_src * len(self.seeds), test_ref * len(self.seeds)
        self._runs: dict[str, LoadedRun] = {}

    def run(self, method: str) -> LoadedRun:
        """The trained run of ``method`` for this view's first seed (use a one-seed view)."""
        if method not in self._runs:
            self._runs[method] = load_run(self.cfgs[method].out_dir)
        return self._runs[method]

    @property
    def tok(self) -> Tokenizer:
        """The setting's tokenizer (every run of a setting shares the prepared data's): read from
        the prepared data, so text analyses need no checkpoint."""
        if not hasattr(self, "_tok"):
            self._tok = Tokenizer.from_file(self.data_dir / "spm.model")
        return self._tok

    def hyps(self, method: str) -> list[str]:
        """Test outputs of ``method``, every seed of the view in order (as :attr:`src`)."""
        return [line for per_seed in self.hyps_by_seed(method) for line in per_seed]

    def hyps_by_seed(self, method: str, greedy: bool = False) -> list[list[str]]:
        """Test outputs of ``method``, one list per seed of the view: the scored beam's, or with
        ``greedy`` those of ``experiment.greedy_splits`` (a one-line ConfigError when a run has none)."""
        out = []
        for seed in self.seeds:
            cfg = run_config(self.exp, self.setting, method, seed)
            hyp = Path(cfg.out_dir) / "translations" / f"test.beam{1 if greedy else cfg.decode.beam}.hyp"
            if greedy and "test" not in self.exp.greedy_splits:
                raise ConfigError(f"{hyp}: no greedy test translations; add test to experiment.greedy_splits")
            out.append(read_lines(hyp))
        return out

    def model(self, method: str) -> torch.nn.Module:
        """The trained model of ``method`` (this view's first seed)."""
        return self.run(method).model

    def models(self) -> dict[str, torch.nn.Module]:
        return {m: self.model(m) for m in self.exp.methods}

    @property
    def train_lengths(self) -> list[int]:
        """Source lengths (subwords) of the training split: both bounds of what was seen (a Middle
        or Long split has no short sentences), for the "seen" shading."""
        if not hasattr(self, "_train_lengths"):
            self._train_lengths = self.lengths(read_lines(self.data_dir / "train.src"))
        return self._train_lengths

    @property
    def train_max_target(self) -> int:
        """The longest training target (subwords), as the prepared data's meta.json records it."""
        return self.meta["train"]["max_tgt_len"]

    @property
    def group_size(self) -> int:
        """INTERPOLATE's sentences per joined group (``data.group`` of the baseline's run)."""
        return self.cfgs[self.exp.baseline_label].data.group

    def training_texts(self) -> tuple[list[str], list[str]]:
        """The prepared training sources and targets, in corpus order."""
        return read_lines(self.data_dir / "train.src"), read_lines(self.data_dir / "train.tgt")

    def lengths(self, texts: list[str]) -> list[int]:
        return [len(self.tok.encode(t)) for t in texts]

    def source_bos(self, method: str) -> bool:
        """Whether ``method`` was trained with a source BOS (CAPE): its own source format."""
        from posenc.decoding.loaded import source_bos

        return source_bos(self.run(method).cfg)

    def pairs(self, src: list[str], tgt: list[str], method: str) -> list[tuple[list[int], list[int]]]:
        """(source ids, target ids) in the source format ``method`` was trained with."""
        bos = [self.tok.bos_id] if self.source_bos(method) else []
        return [(bos + self.tok.encode(s), self.tok.encode(t)) for s, t in zip(src, tgt)]

    def decoder(self, method: str) -> Callable[[list[str]], list[str]]:
        """Lines → translations by ``method``'s model with its run's own decoding settings."""
        from posenc.decoding.translate import translate_lines

        r = self.run(method)
        return lambda lines: list(translate_lines(r.model, r.tokenizer, lines, **decode_options(r.cfg.decode, r)))

    def run_dir(self, method: str) -> Path:
        """``method``'s run directory of this view's first seed."""
        return Path(self.cfgs[method].out_dir)

    def _stored(self, method: str) -> dict[str, Any]:
        """``method``'s results.json in this view (its first seed), {} when it has none."""
        path = self.run_dir(method) / "results.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def device(self, method: str) -> str:
        """The device ``method``'s run of this view trained on (:func:`~posenc.experiments.cell.trained_on`
        of its results.json)."""
        return trained_on(self._stored(method))

    def params(self, method: str) -> int:
        """``method``'s parameter count: its results.json summary (no checkpoint needed), else its model."""
        params = self._stored(method).get("summary", {}).get("params")
        return params if isinstance(params, int) else sum(p.numel() for p in self.model(method).parameters())


def setting_part(exp: ExperimentConfig, setting: str) -> GridPart:
    """One setting of ``exp`` as the analysis runner reads it: its runs in the grid's run
    directories (:meth:`~posenc.experiments.experiment.Experiment.run_dir`), a :class:`SettingView`
    of some of its seeds, and each run identified by its results.json
    (:func:`~posenc.experiments.cell.run_identity`).

    Args:
        exp: the grid (or the part of it the report compares, :func:`done_part`).
        setting: one of its settings.

    Returns:
        The :class:`~posenc.analysis.grid_part.GridPart` of that setting.
    """
    grid = experiment_of(exp)
    return GridPart(task=exp.task, carries=SettingView.carries, setting=setting, methods=list(exp.methods),
                    seeds=list(exp.seeds), run_dir=lambda method, seed: grid.run_dir((setting, method, seed)),
                    view=lambda seeds: SettingView(exp, setting, seeds), identity=run_identity)


def interpolate_short_runs(pairs: list[Pair], group: int) -> int:
    """Output pairs of INTERPOLATE with fewer than ``group`` sentences: one per document whose size
    is not a multiple of ``group`` (:func:`posenc.data.settings.interpolate` keeps that shorter
    last run, so no sentence is dropped)."""
    per_doc: dict[str, int] = {}
    for p in pairs:
        per_doc[p.doc] = per_doc.get(p.doc, 0) + 1
    return sum(1 for n in per_doc.values() if n % group)


def interpolate_note(exp: ExperimentConfig, setting: str) -> str:
    """One line: INTERPOLATE keeps every sentence; how many joined pairs are shorter runs."""
    from posenc.data.corpora import load_corpus

    cfg = run_config(exp, setting, exp.baseline_label, exp.seeds[0])
    if cfg.data.setting != "interpolate":
        return ""
    corpus = load_corpus(cfg.data.corpus, **cfg.data.options)
    parts = []
    for split in ("train", "valid", "test"):
        pairs = getattr(corpus, split)
        joined = -(-len(pairs) // cfg.data.group)
        parts.append(f"{split} {interpolate_short_runs(pairs, cfg.data.group):,} of about {joined:,} joined pairs")
    return (f"INTERPOLATE joins runs of {cfg.data.group} sentences within a document and keeps every sentence, as "
            f"SHAPE does (4.5M pairs → 450K): the run left at a document's end is a shorter joined pair "
            f"({'; '.join(parts)}, before any max_*_pairs cut).")


def stopping_lines(exp: ExperimentConfig, results: list[dict[str, Any]]) -> list[str]:
    """Per setting, the validation pairs whose loss drove patience and checkpoint selection (each
    run's ``summary.json``: ``stopping_signal``), and what "converged" means."""
    lines = []
    for setting in exp.settings:
        signals = sorted({str(r.get("summary", {}).get("stopping_signal", "not recorded"))
                          for r in results if r["setting"] == setting})
        lines.append(f"- stopping signal ({setting}): {'; '.join(signals) or 'no runs'} "
                     "(patience and best-checkpoint selection)")
    lines.append("- converged = stopped by patience (`train.patience` validations without a relative gain > "
                 "`train.min_delta`) before the step cap, with the best validation after warm-up and a flat end of the "
                 "validation curve (least-squares slope of the last 8 validations not significantly below zero: "
                 "learning-curve tables, \"end slope\"); a run that reached `max_steps`/`max_epochs` is \"still "
                 "improving\", whatever its curve, and one stopped on a falling curve \"not flat\"")
    return lines


def tokenizer_lines(exp: ExperimentConfig, results: list[dict[str, Any]]) -> list[str]:
    """Per setting, the SentencePiece models the runs trained with (``summary.json`` ``tokenizer``:
    the content identity, first 12 hex digits, with their run counts) and how many runs predate
    that record: per-subword figures compare only between runs of one tokenizer. [] when no run
    of the grid records one."""
    if not any(r.get("summary", {}).get(TOKENIZER_KEY) for r in results):
        return []
    lines = []
    for setting in exp.settings:
        runs = [r for r in results if r["setting"] == setting]
        counts = Counter(str(r.get("summary", {}).get(TOKENIZER_KEY, ""))[:12] for r in runs)
        unrecorded = counts.pop("", 0)
        named = ", ".join(f"`{h}` ({n} run{'s' * (n > 1)})" for h, n in sorted(counts.items()))
        lines.append(f"- tokenizer ({setting}): {len(counts)} SentencePiece model{'s' * (len(counts) != 1)}: "
                     f"{named or 'none recorded'}" + (f"; {unrecorded} run{'s' * (unrecorded > 1)} trained "
                                                      "before the record" if unrecorded else ""))
    return lines


def check_one_tokenizer(exp: ExperimentConfig, results: list[dict[str, Any]]) -> None:
    """Refuse, in one line naming both, a setting whose runs recorded different tokenizers
    (``summary.json`` ``tokenizer``): their BLEU, lengths and per-position figures are of different
    data, so one table or analysis must never hold both."""
    for setting in exp.settings:
        seen: dict[str, str] = {}
        for r in results:
            identity = (r.get("summary") or {}).get(TOKENIZER_KEY) if r.get("setting") == setting else None
            if identity:
                seen.setdefault(str(identity), f"{r.get('method')}/seed{r.get('seed')}")
        if len(seen) > 1:
            (a, run_a), (b, run_b) = list(seen.items())[:2]
            raise ConfigError(f"report of {exp.name}: the {setting} runs were trained with different tokenizers "
                              f"({a[:12]} by {run_a}, {b[:12]} by {run_b}); retrain them on the grid's committed "
                              "tokenizer or report them in separate grids")


def length_penalty_section(exp: ExperimentConfig, results: list[dict[str, Any]]) -> list[str]:
    """The validation sweep of the GNMT length penalty per run (``experiment.tune_length_penalty``):
    validation BLEU for each α and the α its splits were decoded with; [] when tuning is off."""
    if not exp.tune_length_penalty:
        return []
    decoded = {float(k) for r in results for k in (r.get("length_penalty") or {}).get("sweep", {})}
    keys = [f"{a:g}" for a in sorted(decoded | set(exp.tune_length_penalty))]
    rule = ("the highest validation BLEU, ties: the first listed"
            if exp.tune_length_penalty_max <= max(exp.tune_length_penalty)
            else f"the validation peak: the grid extended by its step while its top or bottom α was the strict best, "
                 f"up to α = {exp.tune_length_penalty_max:g}; ties: the smallest α; \"–\": not decoded")
    at_bound = [f"{r['setting']}/{r['method']}/seed{r['seed']}" for r in results
                if (r.get("length_penalty") or {}).get("at_bound")]
    note = ([f"Chosen at the search's bound α = {exp.tune_length_penalty_max:g} with validation BLEU still rising "
             f"(no peak found): {', '.join(at_bound)}.", ""]
            if at_bound and exp.tune_length_penalty_max > max(exp.tune_length_penalty)
            else [])
    lines = ["## Length penalty chosen on validation", "",
             "Validation BLEU (beam search on the validation split) for each GNMT α; the test BLEU above uses "
             f"the chosen α of each run ({rule}). The test split is not decoded until α is chosen.", "", *note,
             "| run | " + " | ".join(f"α = {k}" for k in keys) + " | chosen α |", "|---|" + "---|" * (len(keys) + 1)]
    for r in results:
        tuning = r.get("length_penalty") or {}
        sweep = tuning.get("sweep", {})
        cells = [f"{sweep[k]:.2f}" if k in sweep else "–" for k in keys]
        chosen = f"{tuning['chosen']:g}" if "chosen" in tuning else "–"
        lines.append(f"| {r['setting']}/{r['method']}/seed{r['seed']} | {' | '.join(cells)} | {chosen} |")
    return lines + [""]


def evaluation_protocol(exp: ExperimentConfig, results: list[dict[str, Any]]) -> list[str]:
    """The evaluation settings that may differ from a paper's, named."""
    cfg = run_config(exp, *experiment_of(exp).cells()[0])
    dc, tc = cfg.decode, cfg.train
    grid_s = ", ".join(f"{a:g}" for a in exp.tune_length_penalty)
    search = (f", searched on to the validation peak, α <= {exp.tune_length_penalty_max:g}"
              if exp.tune_length_penalty and exp.tune_length_penalty_max > max(exp.tune_length_penalty) else "")
    alpha = (f"chosen per run on validation BLEU from {{{grid_s}}}{search}" if exp.tune_length_penalty
             else f"= {dc.length_penalty}")
    search = "greedy search" if dc.beam == 1 else f"beam search (beam {dc.beam}, GNMT length penalty α {alpha})"
    best = getattr(tc, "average_best", 0)
    if best and best > 1:
        ckpt = f"average of the best {best} checkpoints by validation loss (`train.average_best`)"
    elif tc.average_last > 1:
        ckpt = f"average of the last {tc.average_last} checkpoints (`train.average_last`)"
    else:
        ckpt = "the last checkpoint"
    sig = next((r["scores"][s].get("bleu_signature") for r in results for s in r.get("scores", {})), None)
    budget = (f"a fixed budget of {tc.max_steps:,} updates without early stopping (`train.patience: null`; SHAPE "
              "App. B's protocol, whose runs are capped by design)" if tc.patience is None else
              f"patience {tc.patience} validations × {tc.validate_every} updates, cap {tc.max_steps:,} updates")
    return ["## Evaluation protocol", "",
            f"- decoding: {search} (`decode.beam`, `decode.length_penalty`)",
            f"- training: {budget}",
            f"- checkpoint: {ckpt}",
            *stopping_lines(exp, results),
            *tokenizer_lines(exp, results),
            f"- BLEU: sacreBLEU on detokenized text{f' (`{sig}`)' if sig else ''}; a paper's BLEU on tokenized "
            "text is a different number: compare absolute scores only when the BLEU variant matches",
            ""]


def done_part(exp: ExperimentConfig, setting: str,
              results: list[dict[str, Any]]) -> tuple[ExperimentConfig | None, str]:
    """The part of ``setting``'s grid that the analyses can compare (a grid reported before it is
    complete, ``--report-only``): the methods with results and the seeds every one of them has, so
    pooled seeds pair like with like. Where the baseline and another method have every seed, a
    method still missing some waits for them, so that it does not cut their comparison down to its
    seeds.
    ``(exp, "")`` for a complete setting, ``(None, why)`` when there is nothing to compare with the
    baseline."""
    have: dict[str, set[int]] = {}
    for r in results:
        if r.get("setting") == setting:
            have.setdefault(r["method"], set()).add(r["seed"])
    methods = [m for m in exp.methods if m in have]
    complete = [m for m in methods if have[m] >= set(exp.seeds)]
    waiting = [m for m in methods if m not in complete] if exp.baseline_label in complete and len(complete) > 1 else []
    methods = [m for m in methods if m not in waiting]
    seeds = [s for s in exp.seeds if all(s in have[m] for m in methods)]
    if methods == list(exp.methods) and seeds == list(exp.seeds):
        return exp, ""
    if exp.baseline_label not in methods:
        return None, f"Not analysed: the baseline `{exp.baseline_label}` has no fresh run in this setting yet."
    if not seeds:
        return None, "Not analysed: no seed has a fresh run of every method that has runs in this setting."
    left = len(exp.methods) * len(exp.seeds) - sum(len(v) for v in have.values())
    part = replace(exp, methods={m: exp.methods[m] for m in methods}, seeds=seeds,
                   selection=SelectionConfig())  # the choice is already in the methods (and in selection.json)
    wait = "".join(f"; {m} waits for its other seeds (done: {', '.join(map(str, sorted(have[m])))})" for m in waiting)
    return part, (f"**Partial grid**: the analyses below compare the runs done so far ({', '.join(methods)}; "
                  f"seed(s) {', '.join(map(str, seeds))}); {left} run(s) of this setting are left out "
                  f"(not trained or not fresh){wait}.")


def write_translation_report(exp: ExperimentConfig, results: list[dict[str, Any]]) -> Path:
    """``report/README.md`` with the results table and, per setting, every requested analysis."""
    check_one_tokenizer(exp, results)
    report = exp.root / "report"
    report.mkdir(parents=True, exist_ok=True)
    results = judged(exp, results)
    md = [f"# {exp.name}", "", exp.description, "",
          f"## {exp.splits[0].capitalize()} BLEU (sacreBLEU, seeds {exp.seeds})", "", results_table(exp, results), ""]
    md += seed_test_section(exp, results)
    md += selection_lines(exp)
    md += length_penalty_section(exp, results)
    md += evaluation_protocol(exp, results)
    md += devices_section(results)
    md += learning_curves_section(exp, results, report)
    for setting in exp.settings:
        md += [f"## {setting}", ""]
        note = interpolate_note(exp, setting)
        md += [note, ""] if note else []
        part, why = done_part(exp, setting, results)
        md += [why, ""] if why else []
        for name in exp.analyses if part is not None else []:
            out, runs = report / setting / name, setting_part(part, setting)
            clear_analysis_output(runs, name, out)  # posenc's report dir: no output of another grid part
            md += [f"### {name}", ""] + run_analysis(runs, name, part.analysis_options, out)
            md += [f"![{p.stem}]({p.relative_to(report)})" for p in sorted(out.rglob("*.png"))]
            md += [(p.read_text(encoding="utf-8")) for p in sorted(out.rglob("*.md"))] + [""]
    (report / "README.md").write_text("\n".join(md), encoding="utf-8")
    return report
