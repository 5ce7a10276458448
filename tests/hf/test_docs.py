"""The code snippets of docs/hf.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="docs/hf.md's snippets need transformers (pip install posenc[hf])")

DOC = Path(__file__).resolve().parents[2] / "docs" / "hf.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S) if DOC.is_file() else []


def test_doc_has_a_snippet() -> None:
    assert SNIPPETS, f"no python snippets found in {DOC}"


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(SNIPPETS[index], f"{DOC.name}[{index}]", "exec"), {"__name__": "__doc_snippet__"})
    assert "True torch.Size([2, 12, 64])" in capsys.readouterr().out
