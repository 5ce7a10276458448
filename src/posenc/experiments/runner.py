"""Run an experiment grid run by run (resumable), then write its report.

Layout under ``root``: ``data/<setting>-<hash>/`` (prepared once, shared by methods and
seeds), ``<setting>/<method>/seed<N>/`` (a run directory with ``results.json`` once done),
``report/`` (Markdown tables and every PNG).
"""

from __future__ import annotations

import importlib
import json
import logging
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc.config import from_dict, load_yaml, merge_overrides
from posenc.errors import ConfigError
from posenc.experiments.cells import Cell, grid, run_config  # noqa: F401 - Cell, run_config re-exported
from posenc.experiments.config import ExperimentConfig
from posenc.experiments.convergence import UNKNOWN, run_status
from posenc.experiments.freshness import Verdict, judge, run_record
from posenc.pipeline.rundir import atomic_write_text
from posenc.processes import interrupt_on_signals

log = logging.getLogger("posenc")


def _load_results(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def verdict(exp: ExperimentConfig, setting: str, method: str, seed: int) -> Verdict | None:
    """None when the cell has no results yet, else how its results relate to the current config."""
    cfg = run_config(exp, setting, method, seed)
    old = _load_results(Path(cfg.out_dir) / "results.json")
    if old is None:
        return None
    steps = old.get("summary", {}).get("steps")
    return judge(old.get("record"), run_record(cfg, exp.splits), steps)


def execute_cell(exp: ExperimentConfig, setting: str, method: str, seed: int) -> dict[str, Any]:
    """Bring one grid cell up to date with the current config and return its results.

    fresh → the stored results; rescore → translate again with the trained model; extend or
    missing → train (resuming from the run's last checkpoint) and score. Stale cells must have been
    removed (``--rerun-stale``) or refused by :func:`plan` before this is called.
    """
    from posenc.pipeline.run import load_run, translate_split
    from posenc.tasks.translation import train_run

    cfg = run_config(exp, setting, method, seed)
    done = Path(cfg.out_dir) / "results.json"
    v = verdict(exp, setting, method, seed)
    if v is not None and v.kind == "fresh":
        return _load_results(done) or {}
    if v is not None and v.kind == "stale":
        raise ConfigError(f"{cfg.out_dir}: stale results ({v.detail}); rerun with --rerun-stale")
    if v is not None and v.kind == "rescore":
        summary = (_load_results(done) or {}).get("summary", {})
        log.info("== %s / %s / seed %d: rescoring (%s)", setting, method, seed, v.detail)
    else:
        if v is not None:
            log.info("== %s / %s / seed %d: extending training (%s)", setting, method, seed, v.detail)
        log.info("== %s / %s / seed %d -> %s", setting, method, seed, cfg.out_dir)
        summary = train_run(cfg)
    done.unlink(missing_ok=True)  # never leave old numbers next to a changed run
    loaded = load_run(cfg.out_dir)
    scores = {split: translate_split(loaded, split, cfg.decode) for split in exp.splits}
    summary = dict(summary, status=run_status(cfg.out_dir, summary))
    result = {"setting": setting, "method": method, "seed": seed, "summary": summary, "scores": scores,
              "record": run_record(cfg, exp.splits)}
    atomic_write_text(done, json.dumps(result, indent=2))
    return result


def plan(exp: ExperimentConfig, rerun_stale: bool = False) -> list[tuple[str, str, int]]:
    """The cells that need work. Stale cells stop the experiment with one line naming the differing
    keys, or with ``rerun_stale`` have their run directory removed so they train from scratch."""
    pending, stale = [], []
    for cell in grid(exp):
        v = verdict(exp, *cell)
        if v is not None and v.kind == "stale":
            stale.append((cell, v))
        if v is None or v.kind != "fresh":
            pending.append(cell)
    if stale and not rerun_stale:
        (s, m, seed), v = stale[0]
        more = f" (and {len(stale) - 1} more runs)" if len(stale) > 1 else ""
        raise ConfigError(f"stale results in {run_config(exp, s, m, seed).out_dir}{more}: the config changed: "
                          f"{v.detail}; rerun with --rerun-stale, or use another out_dir")
    for cell, _ in stale:
        _clear_stale(run_config(exp, *cell).out_dir)
        log.info("== %s / %s / seed %d: stale, its outputs removed for a fresh run", *cell)
    return pending


def _clear_stale(out_dir: str) -> None:
    """Remove what posenc wrote in a stale cell's run directory (never the directory itself,
    never files it did not write): refused in one line unless the directory is posenc's run."""
    from posenc.pipeline.rundir import check_target, clear_run

    check_target(out_dir, "run")
    clear_run(out_dir)


def prepare_data(exp: ExperimentConfig, cells: list[tuple[str, str, int]]) -> None:
    """Prepare every data directory the cells need, once each, before any run starts."""
    from posenc.pipeline.prepare import prepare

    seen: set[str] = set()
    for cell in cells:
        cfg = run_config(exp, *cell)
        if cfg.prepared_dir not in seen:
            seen.add(cfg.prepared_dir)
            prepare(cfg.data, cfg.prepared_dir)


def summary_line(result: dict[str, Any], split: str) -> str:
    """One line per finished run: method, setting, seed, BLEU, steps, convergence status."""
    summary = result.get("summary", {})
    bleu = result.get("scores", {}).get(split, {}).get("bleu")
    bleu_s = f"{bleu:.2f}" if isinstance(bleu, (int, float)) else "–"
    return (f"done {result['method']:<10} {result['setting']:<12} seed {result['seed']:<3} "
            f"{split} BLEU {bleu_s:>6}  steps {summary.get('steps', '–'):>6}  {summary.get('status', UNKNOWN)}")


def run_translation_grid(exp: ExperimentConfig, jobs: int = 1, rerun_stale: bool = False, backend: str = "local") -> Path:
    from posenc.experiments.report import write_translation_report
    from posenc.experiments.scheduler import run_cells

    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    for name in exp.analyses:
        if exp.skip_reason(name):
            log.info("note: %s; it will be skipped in the report", exp.skip_reason(name))
    pending = plan(exp, rerun_stale)
    prepare_data(exp, pending)
    if jobs == 1 and backend == "local":
        for cell in pending:
            print(summary_line(execute_cell(exp, *cell), exp.splits[0]), flush=True)
    else:
        run_cells(exp, pending, jobs, execute_cell, summary_line, backend)
    results = [execute_cell(exp, *cell) for cell in grid(exp)]  # all fresh now: read back
    return write_translation_report(exp, results)


def _translation(data: dict[str, Any], overrides: list[str], **options: Any) -> Path:
    exp = from_dict(ExperimentConfig, merge_overrides(data, overrides, ExperimentConfig))
    return run_translation_grid(exp, **options)


def task_runner(task: str) -> Callable[..., Path]:
    """The ``posenc experiment`` entry of ``task``: translation grids run here; every other task is
    a package ``posenc.tasks.<task>`` exporting ``experiment(data, overrides, **options)``, found
    by name (a new task is one package; nothing here changes)."""
    if task == "translation":
        return _translation
    module = None
    if task.isidentifier() and task in known_tasks():
        module = importlib.import_module(f"posenc.tasks.{task}")
    entry = getattr(module, "experiment", None)
    if entry is None:
        raise ConfigError(f"experiment task must be one of {', '.join(known_tasks())}, got {task!r}")
    return entry


def known_tasks() -> list[str]:
    """``translation`` and every ``posenc.tasks`` package (those with an ``experiment`` entry run)."""
    import posenc.tasks

    found = sorted(m.name for m in pkgutil.iter_modules(posenc.tasks.__path__) if m.ispkg and m.name != "translation")
    return ["translation", *found]


def shipped_configs() -> Path:
    """The directory of the shipped configs (package data: ``posenc/configs/<kind>/*.yaml``)."""
    from importlib.resources import files

    return Path(str(files("posenc").joinpath("configs")))


def find_experiment(name_or_path: str) -> Path:
    """A YAML path; a ``configs/...`` path as in the README (resolved against the shipped configs
    when it is not a file here); or the name of a shipped config (``configs/experiments/NAME.yaml``
    or ``configs/NAME.yaml``, e.g. ``vision/fashion_mnist_small``)."""
    path = Path(name_or_path)
    shipped = shipped_configs()
    if path.is_file():
        return path
    if path.parts[:1] == ("configs",) and (shipped.joinpath(*path.parts[1:])).is_file():
        return shipped.joinpath(*path.parts[1:])
    if path.suffix in (".yaml", ".yml"):
        return path  # a user file that does not exist: load_yaml names it
    for candidate in (shipped / "experiments" / f"{name_or_path}.yaml", shipped / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    known = sorted(p.stem for p in (shipped / "experiments").glob("*.yaml"))
    raise ConfigError(f"unknown experiment {name_or_path!r} (shipped: {', '.join(known)}; or give a YAML path)")




def run_experiment(name_or_path: str, overrides: list[str] | None = None, **options: Any) -> Path:
    """Run a shipped or user experiment; its top-level ``task`` picks the runner (:func:`task_runner`).
    ``options`` (``jobs``, ``rerun_stale``, ``backend``) go to it; tasks without grids reject them."""
    data = load_yaml(find_experiment(name_or_path))
    gpu = _gpu_variant(data, options)
    if gpu is not None:
        return run_experiment(gpu[0], overrides, **gpu[1])
    task = data.get("task", "translation")
    with interrupt_on_signals():  # SIGTERM stops the grid like Ctrl-C: cleanup runs, exit 130
        return task_runner(task)(data, list(overrides or []), **options)


def _gpu_variant(data: dict[str, Any], options: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``(name, options)`` of the experiment's ``on_gpu`` variant when a CUDA GPU is visible."""
    name = data.get("on_gpu")
    if not name:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    jobs = options.get("jobs") or 1
    chosen = dict(options, jobs=jobs if jobs > 1 else int(data.get("gpu_jobs", 4)))
    print(f"{data.get('name', 'experiment')}: a CUDA GPU is visible, running its GPU-sized variant "
          f"{name!r} with --jobs {chosen['jobs']}", flush=True)
    return name, chosen
