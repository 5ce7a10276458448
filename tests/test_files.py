"""posenc.files: atomic writes through a user's symlink (written through, the link kept) and over
posenc's own files (the link itself replaced, its target untouched)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from posenc.files import atomic_output, atomic_write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """``links/out.txt`` → ``data/out.txt`` (mode 0640, "old"), in two directories."""
    (tmp_path / "links").mkdir()
    (tmp_path / "data").mkdir()
    target, link = tmp_path / "data" / "out.txt", tmp_path / "links" / "out.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    link.symlink_to(target)
    return link, target


def test_user_output_through_a_symlink_keeps_the_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link, target = _linked(tmp_path)
    temp_dirs: list[str] = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(**kw: str) -> tuple[int, str]:
        temp_dirs.append(str(kw["dir"]))
        return real_mkstemp(**kw)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    atomic_write_text(link, "new\n", follow_symlink=True)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n" and _mode(target) == 0o640
    assert temp_dirs == [str(target.parent)]  # the temporary file beside the target: one rename, same filesystem
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["data", "links", "out.txt", "out.txt"]  # no temp left


def test_user_output_through_a_chain_of_links_and_a_failure(tmp_path: Path) -> None:
    link, target = _linked(tmp_path)
    outer = tmp_path / "outer.txt"
    outer.symlink_to(link)
    with atomic_output(outer, follow_symlink=True) as fh:
        fh.write("chained\n")
    assert outer.is_symlink() and link.is_symlink() and target.read_text() == "chained\n" and _mode(target) == 0o640
    with pytest.raises(RuntimeError), atomic_output(outer, follow_symlink=True) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "chained\n" and outer.is_symlink() and link.is_symlink()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["out.txt"]


def test_posenc_own_file_replaces_a_link_and_leaves_its_target(tmp_path: Path) -> None:
    """A link planted where posenc writes its own file never redirects the write outside."""
    link, target = _linked(tmp_path)
    atomic_write_text(link, "posenc's\n")
    assert not link.is_symlink() and link.read_text() == "posenc's\n"
    assert target.read_text() == "old\n"
