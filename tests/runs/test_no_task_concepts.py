"""``runs/`` and ``training/`` know no task: every task-specific fact (derived keys, how a run is
scored, the files a run owns, what marks prepared data, a hash of the task's data) comes from the
spec the task declares (runs/spec.py). Checked on their source: no word of the translation task's
(``spm``, ``vocab``, ``decode``, ``translation``) in code, strings, comments or docstrings, Python's
own ``bytes.decode`` and ``*DecodeError`` aside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "posenc"
#: Words that name a task concept (case-insensitive; ``decod`` covers decode, decoding, decoder).
TASK_WORDS = re.compile(r"spm|vocab|decod|translat", re.IGNORECASE)
#: Python's own names that contain one of them.
PYTHON_NAMES = re.compile(r"\.decode\(|\b(JSON|Unicode)DecodeError\b")


def task_words(text: str, name: str) -> list[str]:
    """``name:line: 'word' in 'line'`` for every line of ``text`` that holds a task word."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = TASK_WORDS.search(PYTHON_NAMES.sub("", line))
        if match:
            found.append(f"{name}:{number}: {match.group(0)!r} in {line.strip()!r}")
    return found


@pytest.mark.parametrize("layer", ["runs", "training"])
def test_the_layer_names_no_task_concept(layer: str) -> None:
    files = sorted((SRC / layer).rglob("*.py"))
    assert files
    assert [hit for p in files for hit in task_words(p.read_text(encoding="utf-8"), str(p.relative_to(SRC)))] == []


def test_the_check_sees_a_task_word() -> None:
    """Control: the scan finds the words it looks for, and lets Python's own names pass."""
    sample = 'x = b"".decode()\ny = json.JSONDecodeError\nz = "spm.model"  # the Vocabulary\nw = decoder\n'
    assert [hit.split(": ")[1].split(" in ")[0] for hit in task_words(sample, "sample")] == ["'spm'", "'decod'"]
