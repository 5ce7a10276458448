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


@pytest.mark.parametrize("doc", [DOC, DOC.parents[1] / "README.md"], ids=["positions.md", "README.md"])
def test_combination_table_matches_resolve(doc: Path) -> None:
    from posenc.errors import ConfigError
    from posenc.positions import registry, resolve

    block = doc.read_text(encoding="utf-8").split("<!-- combos -->")[1].split("<!-- /combos -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    augs = ["shape", "cape", "randomized"]
    one_d = {"sinusoidal", "learned", "gru", "none", "shaw", "alibi", "t5", "rope", "xpos", "fire", "cope"}  # 2-D methods live elsewhere
    assert {r[0] for r in rows} == one_d and one_d <= {*registry.INPUT, *registry.ATTENTION}
    assert set(augs) <= set(registry.AUGMENT)
    for method, *cells in rows:
        for aug, cell in zip(augs, cells):
            try:
                resolve(f"{method}+{aug}")
                got = "valid"
            except ConfigError:
                got = "rejected"
            assert got == cell, f"{method}+{aug}: table says {cell}, resolve says {got}"
