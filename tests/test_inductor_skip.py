"""tests/helpers/inductor.compiled_or_skip: a compiled test skips only for Inductor's undeclared
at::vec (in either of gcc's quoting styles, however deep Inductor wraps it); any other failure is the test's."""

from __future__ import annotations

import pytest

from tests.helpers.inductor import compiled_or_skip


def _failing(output: str) -> None:
    from torch._inductor.exc import CppCompileError

    try:
        raise CppCompileError(["g++", "kernel.cpp"], output)
    except CppCompileError as err:
        raise RuntimeError("backend='inductor' raised") from err  # wrapped, as Dynamo does


@pytest.mark.parametrize("quoted", ["‘at::vec’", "'at::vec'"])
def test_undeclared_vec_skips_with_the_compilers_words(quoted: str) -> None:
    with pytest.raises(pytest.skip.Exception, match="at::vec. has not been declared"):
        compiled_or_skip(lambda: _failing(f"kernel.cpp:76:45: error: {quoted} has not been declared"))


def test_another_compile_error_or_failure_is_the_tests() -> None:
    with pytest.raises(RuntimeError):
        compiled_or_skip(lambda: _failing("kernel.cpp:1:1: error: expected ';'"))
    with pytest.raises(ZeroDivisionError):
        compiled_or_skip(lambda: 1 / 0)
    assert compiled_or_skip(lambda: 7) == 7
