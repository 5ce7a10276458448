"""EXTRAPOLATE stops on validation pairs inside the training length range: the unseen
lengths are the test, never the early-stopping or checkpoint-selection signal; ``summary.json``
records the stop reason, the convergence status and which validation pairs were the signal."""

from __future__ import annotations

import json
from pathlib import Path

from posenc.config import load_config
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.tasks.translation import train_run
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.train import EncodedSplit, stopping_split
from tests.helpers.tiny import run_overrides

MAX_LEN = 16


def _in_range(data: Path, max_len: int) -> int:
    tok = Tokenizer.from_file(data / "spm.model")
    pairs = zip(read_lines(data / "valid.src"), read_lines(data / "valid.tgt"))
    return sum(1 for s, t in pairs if len(tok.encode(s)) <= max_len and len(tok.encode(t)) <= max_len)


def test_extrapolate_run_stops_on_in_range_validation(tmp_path: Path) -> None:
    cfg = load_config(RunConfig, None, run_overrides(tmp_path / "run", None, "data.setting=extrapolate",
                                                     f"data.max_len={MAX_LEN}", "train.validate_every=1",
                                                     "train.patience=50"))
    summary = train_run(cfg)
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["stopped"] == summary["stopped"] == "max_steps"
    assert on_disk["status"] == "still improving" and on_disk["converged"] is False  # capped: never converged
    assert on_disk["warmup"] == cfg.train.warmup and on_disk["best_step"] in (1, 2, 3)
    data = tmp_path / "run" / "data"
    n_valid = len(read_lines(data / "valid.src"))
    n_in = _in_range(data, MAX_LEN)
    assert 0 < n_in < n_valid  # the toy valid set has longer pairs: they must not be the signal
    assert on_disk["stopping_signal"] == f"validation pairs with source and target <= {MAX_LEN} subwords ({n_in} of {n_valid})"

    tok = Tokenizer.from_file(data / "spm.model")
    train = EncodedSplit(tok, data, "train", False)
    split, _ = stopping_split(cfg, tok, data, False, train)
    assert len(split.src) == n_in and max(max(map(len, split.src)), max(map(len, split.tgt))) <= MAX_LEN


def test_vanilla_stops_on_every_validation_pair(tmp_path: Path) -> None:
    cfg = load_config(RunConfig, None, run_overrides(tmp_path / "run", None, "train.max_steps=1"))
    summary = train_run(cfg)
    n_valid = len(read_lines(tmp_path / "run" / "data" / "valid.src"))
    assert summary["stopping_signal"] == f"all {n_valid} validation pairs"
