"""The committed outputs of public reference code (tests/reference/data, written by
tests/reference/make_fixtures.py) and the tolerance they are compared with."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import torch

DATA = Path(__file__).resolve().parent / "data"


@cache
def fixture(name: str) -> dict[str, Any]:
    """``data/<name>.json``; its ``_header`` names the reference, its commit and the command that wrote it."""
    data = json.loads((DATA / f"{name}.json").read_text())
    assert data["_header"]["commit"] and data["_header"]["script"] == "tests/reference/make_fixtures.py"
    return data


def tensor(value: Any) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)
