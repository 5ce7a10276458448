"""Every relative link and image in README.md and docs/*.md points at a file that exists (a
plot or a committed result named in the docs is never missing from a clean clone)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code blocks are not links
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # URLs and in-page anchors
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.name}: {missing}"


SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def _table_headers_without_separator(text: str) -> list[str]:
    """Header lines of Markdown tables (a ``|`` line after a non-table line) not followed by the
    ``|---|`` row that makes them a table (else they render as plain text); code blocks skipped."""
    lines, bad, fence = text.split("\n"), [], False
    for i, line in enumerate(lines):
        fence = fence != line.startswith("```")
        header = not fence and line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
        if header and not SEPARATOR.match(lines[i + 1] if i + 1 < len(lines) else ""):
            bad.append(line)
    return bad


def test_a_table_header_without_its_separator_row_is_found() -> None:
    assert _table_headers_without_separator("text\n| a | b |\n| 1 | 2 |\n") == ["| a | b |"]
    assert _table_headers_without_separator("text\n| a | b |\n|---|:-:|\n| 1 | 2 |\n") == []
    assert _table_headers_without_separator("```\n| a | b |\n```\n") == []


@pytest.mark.parametrize("page", [*_pages(), *sorted((ROOT / "docs" / "results").glob("*/report/README.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_has_its_header_separator(page: Path) -> None:
    assert not _table_headers_without_separator(page.read_text(encoding="utf-8")), page.name
