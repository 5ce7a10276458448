"""Vision task: config, training through the one Trainer (plain and UniViT), resolution/TTA
evaluation, the experiment's CSV and plot."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

import posenc.tasks.vision.task as vision_task
from posenc.config import from_dict, load_config, to_dict
from posenc.data.images import ImageSet
from posenc.errors import ConfigError, DataError
from posenc.experiments.runner import run_experiment
from posenc.models.vit import ViT
from posenc.tasks.base import Task, run_task
from posenc.tasks.vision import (
    TASK,
    VisionConfig,
    VisionExperimentConfig,
    VisionTask,
    evaluate_resolutions,
    evaluate_tta,
)
from tests.vision.test_images import make_split

REPO = Path(__file__).resolve().parents[2]


def quadrant_images(n: int, seed: int = 0) -> ImageSet:
    """16×16 images with a bright 6×6 square; the label is the square's quadrant (0-3)."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=gen)
    images = torch.randint(0, 40, (n, 1, 16, 16), generator=gen, dtype=torch.uint8)
    for i, label in enumerate(labels.tolist()):
        r, c = 1 + 8 * (label // 2), 1 + 8 * (label % 2)
        images[i, 0, r : r + 6, c : c + 6] = 230
    return ImageSet(images, labels)


def tiny_cfg(name: str = "cape-2d", num_classes: int = 4, univit: dict | None = None, **train) -> VisionConfig:
    return from_dict(VisionConfig, {
        "model": {"image_size": 16, "patch": 4, "d_model": 16, "heads": 2, "layers": 1, "d_ff": 32, "num_classes": num_classes,
                  "position": {"name": name}},
        "data": {"batch_size": 32},
        "train": {"max_epochs": 3, "lr": 3e-3, "num_threads": 1, "device": "cpu", "log_every": 1, **train},
        "univit": univit or {},
        "eval": {"resolutions": [8, 16, 24], "tta_offset": 4},
    })  # fmt: skip


def test_task_protocol_and_vit_recipe_defaults():
    assert isinstance(VisionTask(), Task)
    cfg = from_dict(VisionConfig, {"train": {"lr": 0.002}})
    t = cfg.train
    assert (t.optimizer, t.schedule, t.warmup_fraction, t.betas, t.eps, t.label_smoothing) == ("adamw", "cosine", 0.1, [0.9, 0.999], 1e-8, 0.0)
    assert (t.lr, t.max_epochs, t.max_steps) == (0.002, 3, 0)


def test_config_validation_and_shipped_config():
    exp = load_config(VisionExperimentConfig, REPO / "src" / "posenc" / "configs" / "vision" / "fashion_mnist_small.yaml")
    cfg = from_dict(VisionConfig, exp.base)
    assert cfg.model.image_size % cfg.model.patch == 0
    assert all(r % cfg.model.patch == 0 for r in cfg.eval.resolutions + cfg.univit.resolutions)
    with pytest.raises(ConfigError, match="eval.resolutions: 30 is not a positive multiple of model.patch 4"):
        from_dict(VisionConfig, {"eval": {"resolutions": [28, 30]}})
    bad = from_dict(VisionExperimentConfig, {"methods": {"rpe": {"model.position.name": "rpe"}}})
    with pytest.raises(ConfigError, match="model.position .rpe. is not a 2-D method"):
        TASK.experiment(bad).run_config(TASK.experiment(bad).cells()[0])


def test_a_run_config_is_no_experiment_and_is_refused_in_one_line():
    """A run config's sections at an experiment's top level are unknown options there (the run
    config goes under ``base:``), named with the known ones."""
    for old in ({"experiment": {"methods": ["none"], "univit_methods": ["cape-2d"]}}, {"model": {"patch": 4}}):
        with pytest.raises(ConfigError, match=r"(experiment|model): unknown option for VisionExperimentConfig "
                                              r"\(known: base, ") as err:
            from_dict(VisionExperimentConfig, old)
        assert "\n" not in str(err.value)


def test_cells_configs_and_univit_scaling(tmp_path: Path):
    exp = from_dict(VisionExperimentConfig, {"out_dir": str(tmp_path), "seeds": [0, 1], "methods": {
        "none": {"model.position.name": "none"}, "cape-2d": {"model.position.name": "cape-2d"},
        "univit-cape-2d": {"model.position.name": "cape-2d", "univit.enabled": True,
                           "model.position.cape2d.max_global_scaling": 1.0}}})
    cells = TASK.experiment(exp).cells()
    assert [c[1:] for c in cells] == [(m, s) for m in ("none", "cape-2d", "univit-cape-2d") for s in (0, 1)]
    runs = [TASK.experiment(exp).run_config(c) for c in cells]
    assert [r.univit.enabled for r in runs[::2]] == [False, False, True]
    assert runs[2].model.position.cape2d.max_global_scaling == 1.4
    assert runs[4].model.position.cape2d.max_global_scaling == 1.0
    assert [r.train.seed for r in runs[:2]] == [0, 1] and Path(runs[5].out_dir) == tmp_path / "univit-cape-2d" / "seed1"


def test_a_rescore_verdict_without_a_trained_run_is_refused_in_one_line(tmp_path: Path):
    """A cell is rescored from its run's checkpoint: handed a ``rescore`` verdict where no run was
    trained, it stops in one line naming the run directory, before anything is written."""
    from posenc.errors import RunDirError
    from posenc.runs.same_run import Verdict

    grid = TASK.experiment(from_dict(VisionExperimentConfig, {"out_dir": str(tmp_path), "seeds": [0],
                                                              "methods": {"none": {"model.position.name": "none"}}}))
    (cell,) = grid.cells()
    with pytest.raises(RunDirError, match=r"^.*/none/seed0: cannot score its run as stored \(its directory records "
                                          r"no run\); retrain it with --rerun-stale$"):
        TASK.run_cell_config(grid, cell, grid.run_config(cell), Verdict("rescore", "eval changed"))
    assert not (tmp_path / "none").exists()


def test_batches_are_a_pure_function_of_the_epoch():
    task, cfg = VisionTask(quadrant_images(100)), tiny_cfg(univit={"enabled": True, "resolutions": [8, 12, 20]})
    a, b = task.train_batches(cfg, 1, 0, 1), task.train_batches(cfg, 1, 0, 1)
    assert [x.resolution for x in a] == [x.resolution for x in b] and all(torch.equal(x.labels, y.labels) for x, y in zip(a, b))
    assert [len(x.labels) for x in a] == [32, 32, 32, 4]
    assert sorted(torch.cat([x.labels for x in a]).tolist()) == sorted(quadrant_images(100).labels.tolist())
    shards = [task.train_batches(cfg, 1, r, 2) for r in (0, 1)]
    assert [len(s) for s in shards] == [2, 2] and torch.equal(shards[1][0].labels, a[1].labels)


def test_training_lowers_loss_and_beats_chance(tmp_path: Path):
    # The label is only in *where* the square is: a positional model learns it...
    test = quadrant_images(200, seed=1)
    run = run_task(VisionTask(quadrant_images(256), test), tiny_cfg("sinusoidal-2d", max_epochs=4), tmp_path / "sin")
    losses = [r["loss"] for r in run.result.train]
    assert run.result.state.step == 4 * 8 and not run.model.training and len(losses) == 32
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    assert run.metrics["accuracy"][16] > 0.6  # chance: 0.25
    assert evaluate_resolutions(run.model, test, [16])[16] == run.metrics["accuracy"][16]
    # ...while without positions every quadrant gives the same bag of patches.
    nopos = run_task(VisionTask(quadrant_images(256), test), tiny_cfg("none", max_epochs=2), tmp_path / "none")
    assert nopos.metrics["accuracy"][16] < 0.4
    assert (tmp_path / "sin" / "checkpoints" / "ckpt_00000032").is_dir() and (tmp_path / "sin" / "train.csv").is_file()


def test_loss_is_summed_cross_entropy():
    task, cfg = VisionTask(quadrant_images(8)), tiny_cfg("learned-2d")
    torch.manual_seed(0)
    model = task.build_model(cfg)
    batch = task.train_batches(cfg, 0, 0, 1)[0]
    out = task.loss(model, batch)
    logits = model(vision_task.to_model_input(batch.images, 16))
    assert float(out.loss.detach()) == pytest.approx(float(torch.nn.functional.cross_entropy(logits, batch.labels).detach()) * 8, rel=1e-5)
    assert int(out.ntokens) == 8


def test_labels_outside_the_classes_are_rejected(tmp_path: Path):
    with pytest.raises(DataError, match=r"labels must be in 0\.\.2"):
        run_task(VisionTask(quadrant_images(8)), tiny_cfg(num_classes=3), tmp_path)


def test_univit_draws_resolutions_from_its_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    seen: list[int] = []
    original = vision_task.to_model_input

    def recording(images: torch.Tensor, resolution: int | None = None) -> torch.Tensor:
        seen.append(resolution)
        return original(images, resolution)

    monkeypatch.setattr(vision_task, "to_model_input", recording)
    cfg = tiny_cfg("cape-2d", max_epochs=2, univit={"enabled": True, "resolutions": [8, 12, 20]})
    run_task(VisionTask(quadrant_images(256), quadrant_images(4)), cfg, tmp_path / "u")
    assert set(seen) <= {8, 12, 20} and len(set(seen)) >= 2 and len(seen) == 16
    seen.clear()
    run_task(VisionTask(quadrant_images(64), quadrant_images(4)), tiny_cfg("cape-2d", max_epochs=1), tmp_path / "p")
    assert set(seen) == {16}


def test_tta_of_one_resolution_equals_single_evaluation():
    model = ViT(tiny_cfg().model).eval()
    test = quadrant_images(50)
    single = evaluate_resolutions(model, test, [12, 16])
    assert evaluate_tta(model, test, [12]) == single[12]
    cache: dict[int, torch.Tensor] = {}
    three = evaluate_tta(model, test, [8, 12, 16], cache=cache)
    assert sorted(cache) == [8, 12, 16] and evaluate_tta(model, test, [8, 12, 16], cache=cache) == three
    mean_logits = torch.stack([cache[8], cache[12], cache[16]]).mean(0)
    assert three == pytest.approx(float((mean_logits.argmax(-1) == test.labels).float().mean()))


def test_experiment_writes_csv_and_plot_and_resumes(tmp_path: Path):
    root = tmp_path / "data"
    root.mkdir()
    make_split(root, 64, "train")
    make_split(root, 20, "t10k")
    base = to_dict(tiny_cfg("none", max_epochs=1))
    base["model"]["num_classes"] = 10
    base["data"] = {"root": str(root), "batch_size": 32}
    methods = {"none": {"model.position.name": "none"}, "learned-2d": {"model.position.name": "learned-2d"},
               "univit-cape-2d": {"model.position.name": "cape-2d", "univit.enabled": True}}
    spec = tmp_path / "vision.yaml"
    spec.write_text(yaml.safe_dump({"task": "vision", "name": "tiny", "out_dir": str(tmp_path / "out"),
                                    "base": base, "methods": methods, "seeds": [0]}, sort_keys=False))
    report = run_experiment(str(spec))  # the shared grid runner
    assert report == tmp_path / "out" / "report"
    with open(report / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 3 * (3 + 1) and list(dict.fromkeys(r["run"] for r in table)) == list(methods)
    assert {r["eval"] for r in table} == {"single", "tta:12/16/20"}
    assert [r["resolution"] for r in table[:3]] == ["8", "16", "24"]
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in table)
    assert (report / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all((tmp_path / "out" / m / "seed0" / "results.json").is_file() for m in methods)
    before = {m: (tmp_path / "out" / m / "seed0" / "results.json").stat().st_mtime_ns for m in methods}
    assert run_experiment(str(spec)) == report  # fresh cells are not run again
    assert before == {m: (tmp_path / "out" / m / "seed0" / "results.json").stat().st_mtime_ns for m in methods}
    with pytest.raises(ConfigError, match="stale results .* rerun with --rerun-stale"):
        run_experiment(str(spec), ["base.train.lr=0.01"])


def test_validation_split_feeds_best_n_averaging(tmp_path: Path):
    valid = quadrant_images(40, seed=3)
    cfg = tiny_cfg("sinusoidal-2d", max_epochs=2, validate_every=2, save_every=2, average_best=2, keep_last=2)
    run = run_task(VisionTask(quadrant_images(128), quadrant_images(8), valid), cfg, tmp_path)
    history = run.result.state.valid_history
    assert [int(s) for s, _ in history] == [2, 4, 6, 8]
    best = sorted(sorted(history, key=lambda h: (h[1], -h[0]))[:2], key=lambda h: h[0])
    assert run.result.averaged_from == [f"ckpt_{int(s):08d}" for s, _ in best]
    direct = run_task(VisionTask(quadrant_images(128), quadrant_images(8), valid), cfg, tmp_path)  # resumed: no training
    assert direct.result.state.valid_history == history and direct.result.state.step == 8  # no re-validation


def test_report_summary_is_mean_and_sd_over_seeds(tmp_path: Path):
    """README.md of the report on hand-made results: mean ± sample sd over seeds per resolution,
    TTA, and the unseen-resolution mean (all but 28 px; UniViT: outside its 16-40 training range)."""
    from posenc.tasks.vision.report import unseen, write_summary

    def run(method: str, seed: int, acc: dict[int, float], tta: float, status: str = "still improving") -> dict:
        metrics = {"accuracy": {str(r): a for r, a in acc.items()}, "tta": tta, "tta_resolutions": [20, 28, 36]}
        return {"method": method, "seed": seed, "metrics": metrics, "summary": {"steps": 237, "status": status}}

    results = [run("learned-2d", 0, {12: 0.5, 28: 0.8, 48: 0.6}, 0.7),
               run("learned-2d", 1, {12: 0.7, 28: 0.9, 48: 0.8}, 0.9),
               run("univit-cape-2d", 0, {12: 0.4, 28: 0.6, 48: 0.2}, 0.5, "converged")]
    text = write_summary("grid", results, 28, {"learned-2d": [], "univit-cape-2d": [16, 40]}, tmp_path)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    # learned-2d: 12 px 50/70 -> 60.0 ± 14.1; unseen = mean(12, 48) per seed: 55, 75 -> 65.0 ± 14.1
    assert rows[0] == "| learned-2d | 60.0 ± 14.1 | 85.0 ± 7.1 | 70.0 ± 14.1 | 80.0 ± 14.1 | 65.0 ± 14.1 | 237 " \
                      "| still improving |"
    assert rows[1] == "| univit-cape-2d | 40.0 | 60.0 | 20.0 | 50.0 | 30.0 | 237 | converged |"
    assert "| method | 12 | 28* | 48 | TTA | unseen | steps | status |" in text
    assert unseen([12, 16, 28, 40, 48], 28, None) == [12, 16, 40, 48]
    assert unseen([12, 16, 28, 40, 48], 28, [16, 20, 40]) == [12, 48]
