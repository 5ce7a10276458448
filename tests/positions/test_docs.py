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
def test_method_tables_are_generated_from_the_registry(doc: Path) -> None:
    """README's and docs/positions.md's method, combination and option tables are the output of
    ``python -m posenc.positions.tables`` (a new method file brings its rows with it)."""
    from posenc.positions.tables import render

    text = doc.read_text(encoding="utf-8")
    assert "<!-- combos -->" in text and render(text) == text, "run: python -m posenc.positions.tables"


def test_every_option_of_every_method_is_documented_in_its_params() -> None:
    from posenc.positions.tables import undocumented

    assert undocumented() == []


def test_generated_tables_follow_the_registry() -> None:
    """The combos rows say what resolve() says; a method's option rows are its params' defaults."""
    from posenc.errors import ConfigError
    from posenc.positions import registry, resolve
    from posenc.positions.tables import block

    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block("combos")]
    augs = rows[0][1:]
    assert set(augs) == {n for n, e in registry.AUGMENT.items() if e.layout == "sequence"}
    assert {r[0] for r in rows[2:]} == {e.name for e in registry.entries() if e.name not in registry.AUGMENT and e.layout == "sequence"}
    for method, *cells in rows[2:]:
        for aug, cell in zip(augs, cells):
            try:
                resolve(f"{method}+{aug}")
                got = "valid"
            except ConfigError:
                got = "rejected"
            assert got == cell, f"{method}+{aug}: table says {cell}, resolve says {got}"
    assert "| `shaw.k` | `16` | clipping distance" in "\n".join(block("options:shaw"))
    assert "| `cape.source_scale` | `0.0` |" in "\n".join(block("options:cape"))


def test_table_writer_outside_a_checkout_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Run from an installed package (no README beside it), the writer touches nothing."""
    from posenc.positions import tables

    monkeypatch.setattr(tables, "DOCS", (tmp_path / "README.md", tmp_path / "docs" / "positions.md"))
    assert tables.main([]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_the_tables_command_prints_help_and_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m posenc.positions.tables --help`` (or an unknown option) prints and exits; no
    file is rewritten (issue 58)."""
    from posenc.positions.tables import DOCS, main

    before = {p: p.read_bytes() for p in DOCS}
    for argv, code in ((["--help"], 0), (["--frobnicate"], 2)):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == code
    assert "--check" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in DOCS} == before
