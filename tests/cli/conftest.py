"""Shared tiny runs for the CLI tests (built once per session through the CLI itself)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from posenc.cli.main import main
from tests.helpers.tiny import NEAR_INIT, TINY, TOY, run_overrides


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prepared toy data directory shared by the runs below."""
    root = tmp_path_factory.mktemp("cli-data")
    out = root / "toy"
    assert main(["prepare", "--out", str(out), f"out_dir={root}", *TOY, *TINY]) == 0
    return out


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, prepared: Path) -> Path:
    """An APE run kept near its initialisation (non-empty outputs), one checkpoint per step."""
    run = tmp_path_factory.mktemp("cli-run") / "ape"
    extra = [*NEAR_INIT, "train.save_every=1", "train.keep_last=0", "model.position.name=ape"]
    assert main(["train", *run_overrides(run, prepared, *extra)]) == 0
    return run


@pytest.fixture
def run_copy(tmp_path: Path, trained: Path) -> Path:
    """A copy of :func:`trained` that a test may change."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run
