"""The experiment driver: methods × tasks × seeds, each trained through the one Trainer
(:func:`posenc.training.trainer.train`), evaluated by test length, then the report.

Layout under ``exp.root``: ``<task>/<method>/seed<N>/`` (a run directory: checkpoints, logs,
``eval.json`` and ``results.json`` once done; a done run is not retrained), ``report/``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from posenc.config import from_dict, load_yaml, merge_overrides, save_yaml, to_dict
from posenc.errors import ConfigError
from posenc.processes import run_processes
from posenc.tasks.lengthgen.config import LengthgenConfig, LengthgenExperimentConfig, expand
from posenc.tasks.lengthgen.generators import VOCAB_SIZE
from posenc.tasks.lengthgen.task import LengthgenTask
from posenc.training import checkpoint as ck
from posenc.training.trainer import train

log = logging.getLogger("posenc")


def restore_best(model: torch.nn.Module, out: Path, best_step: int | None, last_step: int) -> int:
    """Load the weights of the best validation step when its checkpoint is still on disk
    (early stopping: evaluate the best, not the last, weights); returns the evaluated step."""
    if best_step is None or best_step == last_step:
        return last_step
    path = out / "checkpoints" / ck.checkpoint_name(best_step)
    if not path.is_dir():
        log.warning("%s: checkpoint of the best step %d is gone; evaluating step %d", out, best_step, last_step)
        return last_step
    ck.restore_model(model, ck.load_checkpoint(path, with_optimizer=False))
    return best_step


def check_stale(cells: list[tuple[str, str, int, LengthgenConfig]], rerun_stale: bool) -> None:
    """A run directory whose saved config.yaml differs from the grid's config for it is stale
    (results or checkpoints of another config): removed with ``rerun_stale``, else refused."""
    stale = [cfg for _, _, _, cfg in cells if (Path(cfg.out_dir) / "config.yaml").is_file()
             and from_dict(LengthgenConfig, load_yaml(Path(cfg.out_dir) / "config.yaml")) != cfg]
    if stale and not rerun_stale:
        raise ConfigError(f"{len(stale)} run(s) were started with another config (first: {stale[0].out_dir}); "
                          "rerun with --rerun-stale to retrain them, or use another out_dir")
    for cfg in stale:
        log.warning("%s: stale (another config); removed, retraining", cfg.out_dir)
        shutil.rmtree(cfg.out_dir)


def run_one(task: LengthgenTask, cfg: LengthgenConfig, method: str) -> dict[str, Any]:
    """Train (resumable) and evaluate one run unless its ``results.json`` exists; returns its content.

    The summary records the trainer's stop reason and convergence status
    (:mod:`posenc.training.convergence`); the evaluated weights are those of the best validation."""
    out = Path(cfg.out_dir)
    done = out / "results.json"
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    save_yaml(cfg, out / "config.yaml")
    torch.manual_seed(cfg.train.seed)  # initial weights follow train.seed
    model = task.build_model(cfg)
    sections = {"model": to_dict(replace(cfg.model, vocab_size=VOCAB_SIZE)), "data": to_dict(cfg.data)}
    batches = lambda epoch, rank, world: task.train_batches(cfg, epoch, rank, world)  # noqa: E731
    result = train(model, batches, cfg.train, out, valid_batches=task.valid_batches(cfg), loss_fn=task.loss,
                   d_model=cfg.model.d_model, config=sections)
    conv = result.summary()
    evaluated = restore_best(model, out, conv["best_step"], result.state.step)
    model.eval()
    metrics = task.evaluate(cfg, model, out)
    summary = {"steps": result.state.step, "wall_s": round(result.state.wall_s, 2), "best_valid": result.state.best_valid,
               "evaluated_step": evaluated, **{k: conv[k] for k in ("stopped", "warmup", "best_step", "status", "converged")}}
    res = {"task": cfg.data.task, "method": method, "seed": cfg.train.seed, "summary": summary, "metrics": metrics}
    done.write_text(json.dumps(res, indent=2), encoding="utf-8")
    return res


def run_grid(exp: LengthgenExperimentConfig, jobs: int = 1, rerun_stale: bool = False) -> Path:
    """Every cell of the grid (``jobs`` > 1: that many worker processes at once, packed on the
    visible GPUs round robin), then the report; returns the report directory. Finished runs are
    reused, unfinished ones resume; stale ones (another config) are refused or retrained."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    task, cells = LengthgenTask(), expand(exp)
    check_stale(cells, rerun_stale)
    if jobs > 1:
        _run_parallel(exp, cells, jobs)
    results = []
    for name, method, seed, cfg in cells:
        log.info("== %s / %s / seed %d -> %s", name, method, seed, cfg.out_dir)
        results.append(run_one(task, cfg, method))  # after a parallel run: read back results.json
    return task.report(exp, results, exp.root / "report")


def _run_parallel(exp: LengthgenExperimentConfig, cells: list[tuple[str, str, int, LengthgenConfig]], jobs: int) -> None:
    """Each unfinished cell in ``python -m posenc.tasks.lengthgen.driver RUN_CONFIG METHOD``."""
    work = []
    for name, method, seed, cfg in cells:
        out = Path(cfg.out_dir)
        if (out / "results.json").is_file():
            continue
        out.mkdir(parents=True, exist_ok=True)
        save_yaml(cfg, out / "config.yaml")
        argv = [sys.executable, "-m", "posenc.tasks.lengthgen.driver", str(out / "config.yaml"), method]
        work.append(((name, method, seed), argv, exp.root / "logs" / f"{name}-{method}-seed{seed}.log"))
    failed = run_processes(work, jobs, lambda key, rc: f"{'done' if rc == 0 else f'FAILED (exit {rc})'}: {'/'.join(map(str, key))}")
    if failed:
        raise ConfigError(f"{len(failed)} run(s) failed: {', '.join('/'.join(map(str, k)) for k in failed)} (logs under {exp.root / 'logs'})")


def experiment(data: dict[str, Any], overrides: list[str], jobs: int = 1, rerun_stale: bool = False,
               backend: str = "local") -> Path:
    """``posenc experiment`` entry for ``task: lengthgen``: the raw mapping plus dotted overrides."""
    if backend != "local":
        raise ConfigError("lengthgen experiments run with the local backend only")
    exp = from_dict(LengthgenExperimentConfig, merge_overrides(data, overrides, LengthgenExperimentConfig))
    return run_grid(exp, jobs, rerun_stale)


def main(argv: list[str]) -> int:
    """Worker entry: train and evaluate the run whose resolved config is ``argv[0]``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    threads = int(os.environ.get("POSENC_NUM_THREADS", "0"))
    if threads > 0:
        torch.set_num_threads(threads)
    cfg = from_dict(LengthgenConfig, load_yaml(Path(argv[0])))
    res = run_one(LengthgenTask(), cfg, argv[1])
    print(json.dumps({"method": res["method"], "task": res["task"], "summary": res["summary"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
