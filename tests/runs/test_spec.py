"""Task specs are found by discovery, as position methods are: every task package's ``spec`` module
is imported by :func:`posenc.runs.spec.declared`, so what ``runs/`` asks of every task (what marks
prepared data, its caches) does not depend on which modules a process imported first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.runs.spec import declared

TASKS = Path(__file__).resolve().parents[2] / "src" / "posenc" / "tasks"
#: Prints the declared specs' tasks and caches after importing ``sys.argv[1]`` (nothing when empty).
PROBE = """
import importlib, json, sys
if sys.argv[1]:
    importlib.import_module(sys.argv[1])
from posenc.runs.ownership import cache_names
from posenc.runs.spec import declared
print(json.dumps({"tasks": [s.task for s in declared()], "caches": sorted(cache_names())}))
"""


def _task_packages() -> list[str]:
    """The task packages that hold a spec module, read from the source tree."""
    return sorted(p.parent.name for p in TASKS.glob("*/spec.py"))


def test_every_task_package_declares_a_spec() -> None:
    assert {"lengthgen", "speech", "translation", "vision"} <= set(_task_packages())
    assert [s.task for s in declared()] == sorted(s.task for s in declared())  # one order, by name
    assert set(_task_packages()) <= {s.task for s in declared()}


@pytest.mark.parametrize("first", ["", "posenc.tasks.vision", "posenc.tasks.translation.spec"])
def test_specs_are_found_whatever_was_imported_first(first: str) -> None:
    """A fresh interpreter that imported no task (or one of them) sees every task's spec and the
    caches they declare (translation's SentencePiece cache)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", PROBE, first], env=env, capture_output=True, text=True, timeout=300,
                         check=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["tasks"] == _task_packages()
    assert ".spm-cache" in seen["caches"]
