"""A methods-grid task's config (what a grid's schema and the spec discovery read) is imported
alone: its package's exports load on first use, so importing the config pulls in neither the task
module, its evaluation and report, nor matplotlib, while every export is listed and there when asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Each task → the class of its ``TASK``.
TASKS = {"vision": "VisionTask", "speech": "SpeechTask", "lengthgen": "LengthgenTask"}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_importing_a_task_config_imports_no_task_module(task: str) -> None:
    package = f"posenc.tasks.{task}"
    heavy = ("matplotlib", f"{package}.task", f"{package}.evaluate", f"{package}.report")
    code = (f"import sys, {package}.config\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
            f"import {package} as package\n"
            "print(set(package.__all__) <= set(dir(package)))\n"
            "print(type(package.TASK).__name__)\n"
            "print(all(getattr(package, name) is not None for name in package.__all__))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["[]", "True", TASKS[task], "True"]
