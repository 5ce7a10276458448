"""The code snippets of docs/positions.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "positions.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S) if DOC.is_file() else []


def test_doc_has_snippets() -> None:
    assert len(SNIPPETS) >= 2, f"no python snippets found in {DOC}"


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(SNIPPETS[index], f"{DOC.name}[{index}]", "exec"), {"__name__": "__doc_snippet__"})
    printed = capsys.readouterr().out
    assert "torch.Size" in printed
