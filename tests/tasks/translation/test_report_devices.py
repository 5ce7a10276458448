"""The report and ``--merge`` name where each run trained by one rule: the device its summary.json
records (with the GPU's name), else the ``train.device`` its record names (not ``auto``)."""

from __future__ import annotations

import torch

from posenc.experiments.cell import trained_on
from posenc.tasks.translation.report import devices_section
from posenc.training.device import device_label


def _run(method: str, seed: int, summary_device: str | None = None, configured: str | None = None) -> dict:
    summary = {"steps": 10} if summary_device is None else {"steps": 10, "device": summary_device}
    record = {"extension": {"device": configured}} if configured else {}
    return {"setting": "vanilla", "method": method, "seed": seed, "summary": summary, "record": record}


def test_the_summary_names_the_device_else_the_record_does() -> None:
    assert trained_on(_run("ape", 1, "cuda: NVIDIA H200", "cuda")) == "cuda: NVIDIA H200"
    assert trained_on(_run("ape", 1, None, "cuda")) == "cuda"  # a summary without the device: its record
    assert trained_on(_run("ape", 1, None, "auto")) == "unknown"  # auto says nothing of where it ran
    assert trained_on(_run("ape", 1)) == "unknown"
    assert device_label(torch.device("cpu")) == "cpu"


def test_the_section_groups_the_runs_by_device() -> None:
    runs = [_run("ape", 1, "cuda: NVIDIA H200"), _run("rnn", 1, "cuda: NVIDIA H200"), _run("ape", 2, None, "cpu")]
    lines = devices_section(runs)
    assert lines[0] == "## Where each run trained"
    assert "| cuda: NVIDIA H200 | 2 | vanilla/ape/seed1, vanilla/rnn/seed1 |" in lines
    assert "| cpu | 1 | vanilla/ape/seed2 |" in lines
    assert devices_section([]) == []
