"""One setting of a grid as the registered analyses run over it: :class:`GridPart`, and the runner
that runs an analysis on it into a report folder.

The runner is the same for every task: a task's report describes one setting of its grid as a
:class:`GridPart` (its methods and seeds, where each run is, how to build a
:class:`~posenc.analysis.view.GridView` of some of its seeds and what identifies a finished run),
and :func:`run_analysis` runs any registered analysis that fits the task's runs on it. An analysis
of outputs runs once on every seed pooled; one of model internals once per seed, into
``out/seed<N>`` beside a ``runs.json`` naming the runs it read (:data:`RUNS_READ`), and only on
the seeds whose runs keep a checkpoint. A per-seed output that an earlier report wrote where the
models were stays while the runs it names are unchanged (checkpoints are not committed, the
analyses of them are): :func:`clear_analysis_output` keeps it and :func:`run_analysis` says so.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc.analysis.registry import REGISTRY, fitting
from posenc.analysis.view import GridView
from posenc.files import atomic_write_text
from posenc.training.checkpoint import MODEL_FILE

#: Beside each per-seed analysis output: the runs it was computed from (:func:`run_identities`).
RUNS_READ = "runs.json"


@dataclass(frozen=True)
class GridPart:
    """One setting of a grid, for some of its methods and seeds, as :func:`run_analysis` reads it.

    Args:
        task: the grid's task (named by a refusal).
        carries: what its runs carry (the task's RunSpec ``carries``; names of analysis/view.py).
        setting: the setting's label.
        methods: the methods compared, in grid order (a view's ``methods``).
        seeds: the seeds compared, in grid order.
        run_dir: ``(method, seed)`` → that run's directory, for any method of the setting (also
            one this part leaves out: an earlier output may name it).
        view: seeds → the :class:`~posenc.analysis.view.GridView` of those seeds of this part.
        identity: a run directory → what makes its run the run it is (equal for the same finished
            run, different once it is retrained or extended; JSON-serializable), None where no
            finished run is.
    """

    task: str
    carries: frozenset[str]
    setting: str
    methods: Sequence[str]
    seeds: Sequence[int]
    run_dir: Callable[[str, int], Path]
    view: Callable[[list[int]], GridView]
    identity: Callable[[Path], dict[str, Any] | None]


def skip_reason(name: str, methods: Sequence[str]) -> str:
    """Why analysis ``name`` cannot compare ``methods`` (the report skips it with this note).

    Args:
        name: a registered analysis.
        methods: the methods of the grid.

    Returns:
        The reason in one clause, "" when it can run.
    """
    need = REGISTRY[name].min_methods
    if len(methods) < need:
        return f"{name} compares at least {need} methods; this experiment has {len(methods)}"
    return ""


def run_analysis(part: GridPart, name: str, options: Mapping[str, Any], out: Path) -> list[str]:
    """Run registered analysis ``name`` on every seed of ``part`` into ``out``.

    Pooled over the seeds when the registry says so, else once per seed into ``out/seed<N>``
    beside a ``runs.json`` (:func:`run_identities`), and the per-seed outputs combined across the
    seeds where the analysis says how. An analysis that reads the trained models runs on the
    seeds whose runs keep a checkpoint; a seed without one keeps the output an earlier report
    wrote when its ``runs.json`` names today's runs (:func:`kept_seeds`).

    Args:
        part: the grid part.
        name: a registered analysis that fits the part's runs.
        options: the experiment's ``analysis_options`` (the analysis reads its own keys).
        out: its folder in the report (:func:`clear_analysis_output` empties it first).

    Returns:
        The report's Markdown lines on what ran over which seeds (or why nothing did).

    Raises:
        ConfigError: one line, for an analysis not registered or one the part's runs cannot feed.
    """
    analysis = fitting(name, part.task, part.carries)
    if skip_reason(name, part.methods):
        return [f"Skipped: {skip_reason(name, part.methods)}.", ""]
    seeds, note, parsed = list(part.seeds), "", analysis.parse_options(options)
    if analysis.reads_models:
        seeds, note = seeds_with_checkpoints(part, name)
        kept = kept_seeds(part, out, [s for s in part.seeds if s not in seeds])
        note += "".join(f" Seed {s}: kept as the report that had its models wrote it (its runs.json names "
                        f"today's runs of {', '.join(methods)})." for s, methods in kept.items())
        if not seeds:
            return [note.strip(), ""]
    if analysis.pooled:
        out.mkdir(parents=True, exist_ok=True)
        with torch.inference_mode():
            analysis.feeder(part.view(list(part.seeds)), parsed, out)
        return [f"All seeds pooled ({', '.join(map(str, part.seeds))}): each test sentence once per seed.", ""]
    for seed in seeds:
        (out / f"seed{seed}").mkdir(parents=True, exist_ok=True)
        with torch.inference_mode():
            analysis.feeder(part.view([seed]), parsed, out / f"seed{seed}")
        if any((out / f"seed{seed}").iterdir()):  # an analysis with nothing to say for this seed writes nothing
            atomic_write_text(out / f"seed{seed}" / RUNS_READ, json.dumps(run_identities(part, seed), indent=2))
    return [f"One result per seed ({', '.join(f'seed{s}' for s in seeds)}).{note}{_combine_seeds(part, name, out)}",
            ""]


def _combine_seeds(part: GridPart, name: str, out: Path) -> str:
    """Run analysis ``name``'s ``across_seeds`` (registry) on the per-seed outputs in ``out`` that
    describe today's runs (computed now or kept) when there are at least two; a sentence for the report."""
    combine = REGISTRY[name].across_seeds
    seed_dirs = {s: out / f"seed{s}" for s in part.seeds if (out / f"seed{s}" / RUNS_READ).is_file()}
    if combine is None or len(seed_dirs) < 2:
        return ""
    combine(seed_dirs, out)
    return f" Compared over seeds {', '.join(map(str, seed_dirs))} in the files beside the seed folders."


def run_identities(part: GridPart, seed: int) -> dict[str, dict[str, Any]]:
    """What a per-seed output was computed from: the identity of each method's run of one seed.

    Args:
        part: the grid part.
        seed: one of its seeds.

    Returns:
        Method → its run's identity (``part.identity``), for the methods of ``part`` that have a
        finished run of ``seed``, in grid order.
    """
    out = {}
    for method in part.methods:
        identity = part.identity(part.run_dir(method, seed))
        if identity is not None:
            out[method] = identity
    return out


def kept_seeds(part: GridPart, out: Path, seeds: list[int]) -> dict[int, list[str]]:
    """The seeds whose earlier per-seed output still describes today's runs.

    Args:
        part: the grid part.
        out: the analysis's folder in the report.
        seeds: the seeds this report cannot recompute (their runs keep no checkpoint).

    Returns:
        Of ``seeds``, each whose ``out/seed<N>/runs.json`` names only runs unchanged in their cells
        (also a method ``part`` leaves out, e.g. one waiting for a selection) → the methods it names.
    """
    kept = {}
    for seed in seeds:
        path = out / f"seed{seed}" / RUNS_READ
        if not path.is_file():
            continue
        read = json.loads(path.read_text(encoding="utf-8"))
        runs = {m: part.identity(part.run_dir(m, seed)) for m in read}
        if read and all(runs[m] == identity for m, identity in read.items()):
            kept[seed] = list(read)
    return kept


def clear_analysis_output(part: GridPart, name: str, out: Path) -> None:
    """Empty one analysis's folder of a report before :func:`run_analysis` writes it, but for the
    per-seed outputs of a model-reading analysis that it cannot recompute here and that still
    describe today's runs (:func:`kept_seeds`).

    Args:
        part: the grid part.
        name: a registered analysis.
        out: its folder in the report (nothing happens where it does not exist).
    """
    keep: set[str] = set()
    if REGISTRY[name].reads_models and not REGISTRY[name].pooled:
        here, _ = seeds_with_checkpoints(part, name)
        keep = {f"seed{s}" for s in kept_seeds(part, out, [s for s in part.seeds if s not in here])}
    if out.is_dir():
        for entry in out.iterdir():
            if entry.name not in keep:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _without_checkpoints(part: GridPart, seed: int) -> list[str]:
    """Run directories of ``seed`` (every method of ``part``) that keep no checkpoint: a committed
    grid (checkpoints are not committed) read back in another clone."""
    dirs = [part.run_dir(m, seed) for m in part.methods]
    return [str(d) for d in dirs if not any((d / "checkpoints").glob(f"*/{MODEL_FILE}"))]


def seeds_with_checkpoints(part: GridPart, name: str) -> tuple[list[int], str]:
    """The seeds an analysis that reads the models can run on here.

    Args:
        part: the grid part.
        name: a registered analysis that reads the models.

    Returns:
        ``(seeds, note)``: the seeds whose runs (every method) keep a checkpoint and a note on the
        others, for the report. A per-seed analysis runs on those seeds; a pooled one needs them
        all. With no seed (or a pooled analysis missing one) the seeds are empty and the note
        says why.
    """
    missing = {seed: _without_checkpoints(part, seed) for seed in part.seeds}
    gone = [d for dirs in missing.values() for d in dirs]
    if not gone:
        return list(part.seeds), ""
    skipped = (f"it reads the trained models and {len(gone)} run(s) keep no checkpoint (e.g. `{gone[0]}`; "
               "committed results keep none)")
    kept = [seed for seed, dirs in missing.items() if not dirs]
    if REGISTRY[name].pooled or not kept:
        return [], f"Skipped: {skipped}: run the report where the runs were trained."
    return kept, f" Seed(s) {', '.join(str(s) for s, d in missing.items() if d)} left out: {skipped}."
