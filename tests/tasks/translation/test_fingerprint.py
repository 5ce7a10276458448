"""Run fingerprints and the training options of issue 11 (precision auto, compile): what a run's
identity holds of them, the same on every machine."""

from __future__ import annotations

from dataclasses import make_dataclass

import pytest

import posenc.runs.same_run as rules
from posenc.runs.fingerprint import RUNTIME_KEYS, diff_keys, fingerprint
from posenc.runs.same_run import RunRecord, same_run
from posenc.training import TrainConfig


def _fp(**train: object) -> dict:
    """Fingerprint of the smallest run config: a dataclass with a train section (and a path)."""
    cfg = make_dataclass("RunCfg", [("train", TrainConfig), ("out_dir", str)])(TrainConfig(max_steps=5, **train), "x")
    return fingerprint(cfg)


def test_compile_never_enters_the_fingerprint() -> None:
    assert RUNTIME_KEYS == {"compile"}
    assert "compile" not in _fp()["train"] and not diff_keys(_fp(compile="on"), _fp(compile="off"))


def test_auto_precision_is_fingerprinted_as_written() -> None:
    """``auto`` stays ``auto`` on every device (the trainer resolves it where the run trains);
    explicit values are kept and differ from each other and from ``auto``."""
    assert {_fp(precision="auto", device=d)["train"]["precision"] for d in ("cpu", "cuda", "auto")} == {"auto"}
    assert _fp(precision="bf16")["train"]["precision"] == "bf16"
    assert diff_keys(_fp(precision="fp32"), _fp(precision="bf16")) == ["train.precision"]
    assert diff_keys(_fp(precision="fp32"), _fp(precision="auto")) == ["train.precision"]


@pytest.mark.parametrize("read", [False, True])
def test_a_run_recorded_in_any_precision_answers_auto(monkeypatch: pytest.MonkeyPatch, read: bool) -> None:
    """A record of an older posenc holds the precision ``auto`` resolved to where it trained (fp32
    on a CPU, bf16 on a GPU): today's ``auto`` is that same run; a config that names a precision
    asks for that one, and a record of ``auto`` does not say it trained in it. Alike whether the
    record is compared as stored or read through today's config classes (``read``)."""
    if read:
        monkeypatch.setattr(rules, "_differences", lambda *a: [("read", 0, 1)])  # always read the record

    def cfg(precision: str) -> object:
        return make_dataclass("RunCfg", [("train", TrainConfig), ("out_dir", str)])(
            TrainConfig(max_steps=5, precision=precision), "x")

    def verdict(recorded: str, now: str) -> str:
        record = RunRecord.of(cfg("auto"))
        record.fingerprint["train"]["precision"] = recorded
        return same_run(record, cfg(now)).kind

    assert [verdict(p, "auto") for p in ("fp32", "bf16", "fp16", "auto")] == ["fresh"] * 4
    assert verdict("fp32", "fp32") == "fresh" and verdict("bf16", "fp32") == "stale"
    assert verdict("auto", "fp32") == "stale" and verdict("auto", "bf16") == "stale"


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
