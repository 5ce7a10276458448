"""The precision a run trains in (``train.precision``) and autocast for it.

Parameters, gradients and the optimizer's state stay float32 (master weights); under bf16/fp16 the
matrix products run in the low precision inside :func:`autocast`, and the losses cast their logits
to float32 (training/loss.py). ``auto`` picks bf16 where it is measured faster: a CUDA GPU with
bf16, or a CPU with native bf16 from a model width of :data:`CPU_BF16_MIN_WIDTH` on (the crossover
measured in docs/performance.md, "bf16 training on the CPU").
"""

from __future__ import annotations

import functools
import os
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager

import torch

from posenc.errors import ConfigError

#: ``/proc/cpuinfo`` flags of a CPU that computes bf16 products natively (x86: AVX512-BF16, AMX).
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

#: ``precision: auto`` on a CPU with native bf16 trains in bf16 autocast only from this model width
#: (d_model) on: below it bf16 was measured no faster than fp32 (``python -m posenc.bench.cpu_bf16``,
#: docs/performance.md), so ``auto`` keeps fp32 there.
CPU_BF16_MIN_WIDTH = 256


def cpu_bf16_flags(cpuinfo: str) -> bool:
    """Whether a ``/proc/cpuinfo`` text lists a native bf16 flag (:data:`CPU_BF16_FLAGS`) on its
    ``flags`` lines.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo``.

    Returns:
        True when a ``flags`` line holds ``avx512_bf16`` or ``amx_bf16``.
    """
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags" and CPU_BF16_FLAGS & set(value.split()):
            return True
    return False


#: Environment switch that forces the native-bf16 answer: ``1`` (as on a CPU with AVX512-BF16/AMX),
#: ``0`` (as on one without); unset or empty: probe this CPU. It lets the suite and the benchmarks
#: run both ways on one machine (README, "Tests").
NATIVE_BF16_ENV = "POSENC_NATIVE_BF16"


def cpu_has_native_bf16() -> bool:
    """Whether this machine's CPU counts as having native bf16: ``$POSENC_NATIVE_BF16`` (``0`` or
    ``1``) where set, else :func:`probe_native_bf16`.

    Returns:
        True for a CPU with native bf16 (or ``$POSENC_NATIVE_BF16=1``).

    Raises:
        ConfigError: ``$POSENC_NATIVE_BF16`` is set to anything but ``0``, ``1`` or empty.
    """
    forced = os.environ.get(NATIVE_BF16_ENV, "").strip()
    if not forced:
        return probe_native_bf16()
    if forced not in ("0", "1"):
        raise ConfigError(f"{NATIVE_BF16_ENV}={forced!r}: give 1 (native bf16), 0 (none) or leave it unset (probe)")
    return forced == "1"


@functools.lru_cache(maxsize=1)
def probe_native_bf16() -> bool:
    """Whether this machine's CPU has native bf16, never guessed: the flags of ``/proc/cpuinfo``,
    or where that file is absent (not Linux) torch's own probe when this torch has one
    (``torch._C._cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``), else False.
    Probed once per process.

    Returns:
        True when the CPU has native bf16.
    """
    try:
        return cpu_bf16_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        probes = [getattr(torch._C._cpu, name, None)
                  for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(bool(probe()) for probe in probes if callable(probe))


def resolve_precision(precision: str, device: torch.device, width: int | None = None) -> str:
    """The precision a run trains in: ``fp32``, ``bf16`` or ``fp16``.

    The one resolution of ``train.precision``, made where the run trains: the trainer (which
    records the answer in the run's summary) and the benchmarks (bench/core.py) call it; a run's
    fingerprint keeps ``auto`` as written, the same on every machine.

    Args:
        precision: ``auto``, ``fp32``, ``bf16`` or ``fp16``. ``auto`` is bf16 on a CUDA device with
            bf16 support; on a CPU, bf16 for a native-bf16 CPU (:func:`cpu_has_native_bf16`) and a
            ``width`` of at least :data:`CPU_BF16_MIN_WIDTH`; else fp32, silently. An explicit
            ``bf16`` trains in bf16 on the CPU too (warning where the CPU emulates it); ``fp16``
            needs CUDA (its loss scaler): on a CPU it falls back to fp32 with a warning.
        device: where the run trains.
        width: the model width (d_model); None: unknown, so ``auto`` keeps fp32 on a CPU.

    Returns:
        ``fp32``, ``bf16`` or ``fp16``.
    """
    cuda = device.type == "cuda"
    if precision == "auto":
        if cuda:
            return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
        wide = width is not None and width >= CPU_BF16_MIN_WIDTH
        return "bf16" if device.type == "cpu" and wide and cpu_has_native_bf16() else "fp32"
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn("train.precision=bf16 on a CPU without native bf16 (no avx512_bf16/amx_bf16 flag): "
                      "emulated, expect it slower than fp32", stacklevel=2)
    if precision == "fp16" and not cuda:
        warnings.warn(f"train.precision={precision} needs CUDA; training in fp32 on {device}", stacklevel=2)
        return "fp32"
    return precision


def autocast(precision: str, device_type: str = "cuda") -> ContextManager[Any]:
    """The autocast context of a resolved precision.

    Args:
        precision: ``fp32``, ``bf16`` or ``fp16`` (:func:`resolve_precision`).
        device_type: the device the run trains on, ``cuda`` or ``cpu``.

    Returns:
        ``torch.autocast`` to bf16 or fp16 on ``device_type``; a no-op context for fp32.
    """
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
