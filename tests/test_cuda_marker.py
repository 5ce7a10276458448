"""Every test that skips without CUDA carries the ``cuda`` marker, so ``pytest -m cuda`` (what
benchmarks/gpu_session.sh runs on a lent GPU) selects all of them.

Read from the source of ``tests/``: a ``pytest.mark.skipif`` whose condition skips where CUDA is
absent (``not ...cuda.is_available()``, ``...cuda.device_count() == 0``/``< 1``), given as a
decorator, through a module-level name, as ``pytestmark`` or in ``pytest.param(marks=...)``, and a
``pytest.skip`` under ``if not ...cuda.is_available():``, each need ``pytest.mark.cuda`` (or
``tests/helpers/cuda.py::cuda_only``, which adds it) on the test, its class or its module.
Skips *on* CUDA (``skipif(torch.cuda.is_available())``: CPU-only checks) need nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
NO_CUDA = re.compile(r"not \(?[\w.]*cuda\.is_available\(\)|cuda\.device_count\(\)\s*(==\s*0|<\s*1)")


def skips_without_cuda(expr: ast.expr) -> bool:
    """Whether a condition is true where no CUDA device is visible."""
    return bool(NO_CUDA.search(ast.unparse(expr)))


def _is_skipif_no_cuda(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("mark.skipif")):
        return False
    conditions = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "condition"]
    return any(skips_without_cuda(c) for c in conditions)


def _is_cuda_mark(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text.endswith("mark.cuda") or (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("cuda_only"))


def _marks(node: ast.expr) -> list[ast.expr]:
    """The marks of a ``pytestmark``/``marks=`` value (a mark or a list/tuple of marks)."""
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else [node]


class Checker:
    """The violations of one test module's source (``path:line: what``)."""

    def __init__(self, source: str, name: str) -> None:
        self.tree, self.name = ast.parse(source), name
        self.skip_names, self.cuda_names = set(), set()  # module-level names bound to such marks
        self.module_cuda = False
        self.problems: list[str] = []

    def run(self) -> list[str]:
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
                if target == "pytestmark":
                    self._pytestmark(value, node.lineno)
                elif _is_skipif_no_cuda(value):
                    self.skip_names.add(target)
                elif _is_cuda_mark(value):
                    self.cuda_names.add(target)
        self._module_skip()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("param"):
                self._param(node)
        self._defs(self.tree.body, self.module_cuda)
        return self.problems

    def _pytestmark(self, value: ast.expr, line: int) -> None:
        marks = _marks(value)
        self.module_cuda = any(_is_cuda_mark(m) for m in marks)
        if any(_is_skipif_no_cuda(m) for m in marks) and not self.module_cuda:
            self.problems.append(f"{self.name}:{line}: pytestmark skips without CUDA but lacks pytest.mark.cuda")

    def _module_skip(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.If) and skips_without_cuda(node.test) and _calls_skip(node.body):
                if not self.module_cuda:
                    self.problems.append(f"{self.name}:{node.lineno}: module skipped without CUDA, no cuda pytestmark")

    def _param(self, call: ast.Call) -> None:
        for kw in call.keywords:
            if kw.arg == "marks":
                marks = _marks(kw.value)
                if any(self._skips(m) for m in marks) and not any(self._cuda(m) for m in marks):
                    self.problems.append(f"{self.name}:{call.lineno}: pytest.param skips without CUDA, "
                                         "no pytest.mark.cuda in its marks")

    def _skips(self, node: ast.expr) -> bool:
        return _is_skipif_no_cuda(node) or (isinstance(node, ast.Name) and node.id in self.skip_names)

    def _cuda(self, node: ast.expr) -> bool:
        return _is_cuda_mark(node) or (isinstance(node, ast.Name) and node.id in self.cuda_names)

    def _defs(self, body: list[ast.stmt], marked: bool) -> None:
        """Check every test function/class in ``body`` (``marked``: an enclosing scope carries cuda)."""
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            cuda = marked or any(self._cuda(d) for d in node.decorator_list)
            if not cuda and any(self._skips(d) for d in node.decorator_list):
                self.problems.append(f"{self.name}:{node.lineno}: {node.name} skips without CUDA but lacks the "
                                     "cuda marker (use tests/helpers/cuda.py::cuda_only)")
            if isinstance(node, ast.ClassDef):
                self._defs(node.body, cuda)
            elif not cuda and any(isinstance(n, ast.If) and skips_without_cuda(n.test) and _calls_skip(n.body)
                                  for n in ast.walk(node)):
                self.problems.append(f"{self.name}:{node.lineno}: {node.name} calls pytest.skip without CUDA but "
                                     "lacks the cuda marker (use tests/helpers/cuda.py::cuda_only)")


def _calls_skip(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) in ("pytest.skip", "skip")
               for stmt in body for n in ast.walk(stmt))


def violations(source: str, name: str = "<test>") -> list[str]:
    """Every CUDA-only skip in ``source`` that lacks the cuda marker."""
    return Checker(source, name).run()


def test_every_cuda_only_test_carries_the_cuda_marker() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert found == [], "\n".join(found)


BAD = {
    "decorator": """
import pytest, torch
@pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")
def test_a(): pass
""",
    "named mark": """
import pytest, torch
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")
class TestX:
    @GPU
    def test_a(self): pass
""",
    "skip in body": """
import pytest, torch
def test_a():
    if not torch.cuda.is_available():
        pytest.skip("gpu")
""",
    "device count": """
import pytest, torch
@pytest.mark.skipif(condition=torch.cuda.device_count() == 0, reason="gpu")
def test_a(): pass
""",
    "pytestmark": """
import pytest, torch
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")]
""",
    "module skip": """
import pytest, torch
if not torch.cuda.is_available():
    pytest.skip("gpu", allow_module_level=True)
""",
    "param": """
import pytest, torch
@pytest.mark.parametrize("d", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                                     reason="gpu"))])
def test_a(d): pass
""",
}

GOOD = {
    "cuda_only": """
from tests.helpers.cuda import cuda_only
@cuda_only("gpu")
def test_a(): pass
""",
    "named cuda_only": """
from tests.helpers.cuda import cuda_only
CUDA = cuda_only("gpu")
@CUDA
def test_a(): pass
""",
    "marked class": """
import pytest, torch
@pytest.mark.cuda
class TestX:
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")
    def test_a(self): pass
    def test_b(self):
        if not torch.cuda.is_available():
            pytest.skip("gpu")
""",
    "cpu only": """
import pytest, torch
@pytest.mark.skipif(torch.cuda.is_available(), reason="the error without CUDA")
def test_a(): pass
""",
    "pytestmark": """
import pytest, torch
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")]
def test_a():
    if not torch.cuda.is_available():
        pytest.skip("gpu")
""",
    "param": """
import pytest, torch
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="gpu")
@pytest.mark.parametrize("d", ["cpu", pytest.param("cuda", marks=[GPU, pytest.mark.cuda])])
def test_a(d): pass
""",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_guard_finds_an_unmarked_cuda_skip(case: str) -> None:
    assert len(violations(BAD[case])) == 1, case


@pytest.mark.parametrize("case", sorted(GOOD))
def test_the_guard_accepts_marked_or_cpu_only_skips(case: str) -> None:
    assert violations(GOOD[case]) == [], case
