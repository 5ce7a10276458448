"""The dummy task's experiment schema: settings × methods × seeds over a base DummyConfig (its grid,
freshness and report are the task's, :class:`tests.dummy_task.task.DummyTask`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class DummyExperimentConfig:
    name: str = "dummy"
    task: str = "tests.dummy_task"
    out_dir: str = ""
    base: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=lambda: {"plain": {}})
    methods: dict[str, dict[str, Any]] = field(default_factory=lambda: {"nobias": {}})
    seeds: list[int] = field(default_factory=lambda: [1])

    @property
    def root(self) -> Path:
        return Path(self.out_dir or f"runs/{self.name}")
