"""``posenc train`` under ``torchrun --nproc_per_node 2`` (Gloo on CPU) writes one run directory.

The trainer's DDP arithmetic is covered by tests/training; this only checks the translation task's glue.
Skipped where torchrun or Gloo is unavailable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.helpers.tiny import run_overrides

TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.mark.skipif(not TORCHRUN.is_file() and shutil.which("torchrun") is None, reason="torchrun not found")
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed/Gloo not available")
def test_torchrun_two_ranks(tmp_path: Path, toy_prepared: Path) -> None:
    torchrun = str(TORCHRUN) if TORCHRUN.is_file() else shutil.which("torchrun")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "posenc.cli.main", "train",
           *run_overrides(run, toy_prepared, "train.save_every=0")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_00000003"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3
    # every rank prints the same summary: the token count is the all-reduced global one
    decoder = json.JSONDecoder()
    text, printed = proc.stdout.strip(), []
    while text:
        obj, end = decoder.raw_decode(text)
        printed.append(obj)
        text = text[end:].strip()
    assert len(printed) == 2 and all(p["tokens"] == summary["tokens"] for p in printed)
