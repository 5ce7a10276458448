"""Run fingerprints and the training options of issue 11 (precision auto, compile)."""

from __future__ import annotations

from dataclasses import make_dataclass

import torch

from posenc.runs.fingerprint import RUNTIME_KEYS, diff_keys, fingerprint
from posenc.training import TrainConfig


def _fp(**train: object) -> dict:
    """Fingerprint of the smallest run config: a dataclass with a train section (and a path)."""
    cfg = make_dataclass("RunCfg", [("train", TrainConfig), ("out_dir", str)])(TrainConfig(max_steps=5, **train), "x")
    return fingerprint(cfg)


def test_compile_never_enters_the_fingerprint() -> None:
    assert RUNTIME_KEYS == {"compile"}
    assert "compile" not in _fp()["train"] and not diff_keys(_fp(compile="on"), _fp(compile="off"))


def test_auto_precision_is_fingerprinted_as_what_it_resolves_to() -> None:
    """A run trained with the old default (fp32) is still the same run on CPU under ``auto``."""
    assert not diff_keys(_fp(precision="fp32", device="cpu"), _fp(precision="auto", device="cpu"))
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert _fp(precision="auto", device="auto")["train"]["precision"] == ("bf16" if bf16 else "fp32")
    assert _fp(precision="bf16")["train"]["precision"] == "bf16"  # explicit values are kept
    assert diff_keys(_fp(precision="fp32"), _fp(precision="bf16")) == ["train.precision"]


def test_a_cosine_schedule_keeps_its_horizon_in_the_fingerprint() -> None:
    """Cosine decays over max_steps/max_epochs: another cap is another training (every update's
    lr moves), so it is a model change; under Noam the caps only extend the run."""
    def fp(schedule: str, **train: object) -> dict:
        cfg = make_dataclass("RunCfg", [("train", TrainConfig), ("out_dir", str)])(TrainConfig(schedule=schedule, **train), "x")
        return fingerprint(cfg)

    assert diff_keys(fp("cosine", max_steps=10), fp("cosine", max_steps=20)) == ["train.max_steps"]
    assert diff_keys(fp("cosine", max_epochs=2), fp("cosine", max_epochs=3)) == ["train.max_epochs"]
    assert not diff_keys(fp("noam", max_steps=10), fp("noam", max_steps=20))
    assert not diff_keys(fp("cosine", max_steps=10, patience=3), fp("cosine", max_steps=10, patience=9))
