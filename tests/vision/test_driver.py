"""Vision driver: config, training loop (plain and UniViT), resolution/TTA evaluation, experiment."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

import posenc.vision as vision
from posenc.config import from_dict, load_config, to_dict
from posenc.data.images import ImageSet
from posenc.errors import ConfigError, DataError
from posenc.vision import (
    VisionConfig,
    evaluate_resolutions,
    evaluate_tta,
    lr_factor,
    main,
    run_configs,
    run_experiment,
    train_vit,
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


def tiny_cfg(name: str = "cape-2d", num_classes: int = 4, **train) -> VisionConfig:
    return from_dict(VisionConfig, {
        "model": {"image_size": 16, "patch": 4, "d_model": 16, "heads": 2, "layers": 1, "d_ff": 32, "num_classes": num_classes,
                  "position": {"name": name}},
        "train": {"epochs": 3, "batch_size": 32, "lr": 3e-3, "threads": 1, **train},
        "eval": {"resolutions": [8, 16, 24], "tta_offset": 4},
    })  # fmt: skip


def test_lr_schedule():
    assert lr_factor(0, 100, 10) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10) == pytest.approx(1.0)
    assert lr_factor(55, 100, 10) == pytest.approx(0.5)
    assert lr_factor(100, 100, 10) == pytest.approx(0.0, abs=1e-12)


def test_config_validation_and_shipped_config():
    cfg = load_config(VisionConfig, REPO / "configs" / "vision" / "fashion_mnist_small.yaml")
    assert cfg.model.image_size % cfg.model.patch == 0
    assert all(r % cfg.model.patch == 0 for r in cfg.eval.resolutions + cfg.train.univit_resolutions)
    with pytest.raises(ConfigError, match="eval.resolutions: 30 is not a positive multiple of model.patch 4"):
        from_dict(VisionConfig, {"eval": {"resolutions": [28, 30]}})
    with pytest.raises(ConfigError, match="experiment method 'rpe' unknown"):
        from_dict(VisionConfig, {"experiment": {"methods": ["rpe"]}})


def test_run_configs_names_and_univit_scaling():
    cfg = from_dict(VisionConfig, {"experiment": {"methods": ["none", "cape-2d"], "univit_methods": ["cape-2d"]}})
    runs = run_configs(cfg)
    assert [name for name, _ in runs] == ["none", "cape-2d", "univit/cape-2d"]
    assert [r.train.univit for _, r in runs] == [False, False, True]
    assert runs[1][1].model.position.max_global_scaling == 1.4
    assert runs[2][1].model.position.max_global_scaling == 1.0
    assert cfg.model.position.name == "cape-2d" and not cfg.train.univit  # the base config is untouched


def test_training_lowers_loss_and_beats_chance():
    # The label is only in *where* the square is: a positional model learns it...
    model, metrics = train_vit(tiny_cfg("sinusoidal-2d", epochs=4), quadrant_images(256))
    assert metrics["steps"] == 4 * 8 and not model.training
    assert metrics["last_loss"] < metrics["first_loss"] - 0.3
    assert evaluate_resolutions(model, quadrant_images(200, seed=1), [16])[16] > 0.6  # chance: 0.25
    # ...while without positions every quadrant gives the same bag of patches.
    nopos, _ = train_vit(tiny_cfg("none", epochs=2), quadrant_images(256))
    assert evaluate_resolutions(nopos, quadrant_images(200, seed=1), [16])[16] < 0.4


def test_labels_outside_the_classes_are_rejected():
    data = quadrant_images(8)
    with pytest.raises(DataError, match=r"labels must be in 0\.\.2"):
        train_vit(tiny_cfg(num_classes=3), data)


def test_univit_draws_resolutions_from_its_list(monkeypatch: pytest.MonkeyPatch):
    seen: list[int] = []
    original = vision.to_model_input

    def recording(images: torch.Tensor, resolution: int | None = None) -> torch.Tensor:
        seen.append(resolution)
        return original(images, resolution)

    monkeypatch.setattr(vision, "to_model_input", recording)
    train_vit(tiny_cfg("cape-2d", epochs=2, univit=True, univit_resolutions=[8, 12, 20]), quadrant_images(256))
    assert set(seen) <= {8, 12, 20} and len(set(seen)) >= 2 and len(seen) == 16
    seen.clear()
    train_vit(tiny_cfg("cape-2d", epochs=1), quadrant_images(64))
    assert set(seen) == {16}


def test_tta_of_one_resolution_equals_single_evaluation():
    model = vision.ViT(tiny_cfg().model).eval()
    test = quadrant_images(50)
    single = evaluate_resolutions(model, test, [12, 16])
    assert evaluate_tta(model, test, [12]) == single[12]
    cache: dict[int, torch.Tensor] = {}
    three = evaluate_tta(model, test, [8, 12, 16], cache=cache)
    assert sorted(cache) == [8, 12, 16] and evaluate_tta(model, test, [8, 12, 16], cache=cache) == three
    mean_logits = torch.stack([cache[8], cache[12], cache[16]]).mean(0)
    assert three == pytest.approx(float((mean_logits.argmax(-1) == test.labels).float().mean()))


def test_experiment_writes_csv_and_plot(tmp_path: Path):
    root = tmp_path / "data"
    root.mkdir()
    make_split(root, 64, "train")
    make_split(root, 20, "t10k")
    cfg = to_dict(tiny_cfg("none", epochs=1))
    cfg["model"]["num_classes"] = 10
    cfg = from_dict(VisionConfig, {**cfg, "data": {"root": str(root)},
                                   "experiment": {"methods": ["none", "learned"], "univit_methods": ["cape-2d"]}})  # fmt: skip
    rows = run_experiment(cfg, tmp_path / "out", log=lambda _: None)
    assert len(rows) == 3 * (3 + 1)
    with open(tmp_path / "out" / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["run"] for r in table] == [r["run"] for r in rows]
    assert {r["eval"] for r in table} == {"single", "tta:12/16/20"}
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in table)
    png = (tmp_path / "out" / "accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "config.yaml").is_file()


def test_cli_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  patch: 5\n")
    assert main([str(bad), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: model.image_size 28 is not divisible by model.patch 5")
