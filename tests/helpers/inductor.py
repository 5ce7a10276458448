"""Inductor's CPU backend on a float path it cannot compile for: under ``ATEN_CPU_CAPABILITY=default``
Inductor still generates C++ that uses ATen's vector types (``at::vec``) while the headers it
includes for that path declare none, so every compiled CPU kernel fails to build. A test of the
compiled path is skipped there with the compiler's own words; any other failure stays the test's."""

from __future__ import annotations

import os
import re
from typing import Callable, TypeVar

import pytest
import torch

T = TypeVar("T")

#: A C++ compiler's words for generated code that uses ATen's vector types where the headers
#: included for this CPU float path (ATEN_CPU_CAPABILITY) declare none (gcc, clang); gcc quotes
#: with ‘ ’ under a UTF-8 locale and with ' ' otherwise.
UNDECLARED_VEC = re.compile(r"[‘']at::vec[’'] has not been declared|no member named 'vec' in namespace 'at'")


def cpp_compile_error(err: BaseException | None) -> BaseException | None:
    """The Inductor C++ compile error in ``err``'s chain (Inductor wraps it), or None."""
    from torch._inductor.exc import CppCompileError

    while err is not None and not isinstance(err, CppCompileError):
        err = getattr(err, "inner_exception", None) or err.__cause__ or err.__context__
    return err


def compiled_or_skip(run: Callable[[], T]) -> T:
    """``run()``; skipped, with the compiler's reason, when Inductor cannot compile its C++ kernel
    for this CPU float path (its generated code names at::vec, which that path does not declare).

    Args:
        run: the part of the test that compiles and runs (no argument).
    Returns:
        What ``run`` returns.
    """
    try:
        return run()
    except Exception as err:
        found = cpp_compile_error(err)
        reason = UNDECLARED_VEC.search(str(getattr(found, "output", ""))) if found is not None else None
        if reason is None:
            raise
        pytest.skip(f"Inductor cannot compile C++ kernels for ATEN_CPU_CAPABILITY="
                    f"{os.environ.get('ATEN_CPU_CAPABILITY', 'native')} (ATen CPU capability "
                    f"{torch.backends.cpu.get_cpu_capability()}): {reason.group(0)}")
