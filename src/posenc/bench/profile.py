"""``python -m posenc.bench --profile DIR``: where a training step's time goes, per method and length.

For every (method, length) of the run, a few training steps (the same model, batch and step as the
timed benchmark) run under ``torch.profiler``; written under ``DIR``:

* ``train_<method>_L<length>.txt``: ms per step in each ``posenc::`` range, then the top ops by
  self device (CUDA) time (on CUDA) and by self CPU time, from ``key_averages()``;
* ``train_<method>_L<length>.json.gz``: a chrome trace of the same steps (open in Perfetto);
* ``summary.txt``: one line per (method, length): profiled wall ms per step, total self device
  and self CPU ms per step, and the ms per step inside each ``posenc::`` range.

The ``posenc::`` ranges wrap the position code of the forward pass (``posenc::positions``: default
positions + augmentation; ``posenc::{encoder,decoder}.input_pos``; ``posenc::*.attn_context``; the
self-attention layers' forward, ``posenc::{encoder,decoder}.self_attn``), so
the forward cost of a position method is read off directly; backward ops keep their names
(e.g. ``CudnnRnnBackward0`` for the GRU).
"""

from __future__ import annotations

import re
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

from posenc.bench.core import BenchConfig, TrainStep, batch_size, build_model, synthetic_batch

#: ``posenc::<name>`` profiler ranges: name → (sub-module path, method) of the seq2seq model.
RANGED: dict[str, tuple[str, str]] = {
    "positions": ("", "positions"),  # default positions + the augmentation (SHAPE, CAPE)
    "encoder.input_pos": ("encoder.input_pos", "forward"),
    "decoder.input_pos": ("decoder.input_pos", "forward"),
    "decoder.input_pos.prefetch": ("decoder.input_pos", "prefetch"),  # the GRU's early start
    "encoder.attn_context": ("encoder.attn_pos", "context"),
    "decoder.attn_context": ("decoder.attn_pos", "context"),
}
PREFIX = "posenc::"
#: Per-layer sub-modules ranged under one name per stack: ``{stack}.layers.<i>.self_attn`` →
#: ``posenc::{stack}.self_attn`` (the forward of every self-attention layer of the stack, summed;
#: an attention hook's per-layer cost, e.g. Shaw's, shows there, not in ``attn_context``).
LAYER_RANGES = re.compile(r"(encoder|decoder)\.layers\.\d+\.self_attn")


def _ranged(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with record_function(PREFIX + name):
            return fn(*args, **kwargs)
    return wrapper


@contextmanager
def module_ranges(model: nn.Module, ranged: dict[str, tuple[str, str]] = RANGED) -> Iterator[None]:
    """Run each listed method (of the sub-modules present) inside a ``posenc::<name>`` range.

    The methods are shadowed by instance attributes for the duration, then restored.
    """
    modules = dict(model.named_modules())
    patched = []
    layers = [(f"{m.group(1)}.self_attn", (path, "forward")) for path in modules if (m := LAYER_RANGES.fullmatch(path))]
    for name, (path, method) in [*ranged.items(), *layers]:
        module = modules.get(path)
        if module is not None and hasattr(module, method) and method not in vars(module):
            setattr(module, method, _ranged(name, getattr(module, method)))
            patched.append((module, method))
    try:
        yield
    finally:
        for module, method in patched:
            delattr(module, method)


def _activities(device: str) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])


def profile_step(step: TrainStep, device: str, steps: int = 3, warmup: int = 2) -> tuple[Any, float]:
    """Profile ``steps`` calls of ``step`` after ``warmup`` untimed ones → (profiler, wall s per step)."""
    for _ in range(warmup):
        step()
    with ExitStack() as stack:
        stack.enter_context(module_ranges(step.model))
        prof = stack.enter_context(torch.profiler.profile(activities=_activities(device)))
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps
    return prof, wall


def _ms(us: float, steps: int) -> float:
    return us / 1000.0 / steps


def range_times(prof: Any) -> dict[str, tuple[float, float]]:
    """``posenc::`` range → (CPU µs, device µs of the kernels launched inside), summed over calls.

    Read from the host-side range events only (on CUDA the profiler also records a GPU-side span
    under the same name, which ``key_averages`` would fold in).
    """
    out: dict[str, tuple[float, float]] = {}
    for e in prof.events():
        if e.name.startswith(PREFIX) and e.device_type == DeviceType.CPU:
            cpu, dev = out.get(e.name, (0.0, 0.0))
            out[e.name] = (cpu + e.cpu_time_total, dev + e.device_time_total)
    return dict(sorted(out.items()))


def range_table(prof: Any, steps: int) -> str:
    """CPU and device ms per step inside each ``posenc::`` range."""
    return "\n".join(f"{name:40s} cpu_ms={_ms(cpu, steps):9.3f} device_ms={_ms(dev, steps):9.3f}"
                     for name, (cpu, dev) in range_times(prof).items())


def tables(prof: Any, device: str, steps: int, rows: int = 30) -> str:
    """The ``posenc::`` ranges, then the top-``rows`` ops by self device time (CUDA) and self CPU time."""
    avg = prof.key_averages()
    parts = [f"== posenc:: ranges, per step ({steps} steps profiled) ==\n" + range_table(prof, steps)]
    if device.startswith("cuda"):
        parts.append("== top ops by self CUDA time ==\n" + avg.table(sort_by="self_device_time_total", row_limit=rows))
    parts.append("== top ops by self CPU time ==\n" + avg.table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n\n".join(parts)


def summary_line(method: str, length: int, prof: Any, wall: float, steps: int) -> str:
    """``method L wall_ms device_ms cpu_ms posenc::name=ms ...`` (all per step)."""
    avg = [e for e in prof.key_averages() if not e.key.startswith(PREFIX)]  # ranges: no self time of their own
    device = sum(e.self_device_time_total for e in avg)
    cpu = sum(e.self_cpu_time_total for e in avg)
    ranges = " ".join(f"{name}=cpu:{_ms(cpu, steps):.3f}/dev:{_ms(dev, steps):.3f}"
                      for name, (cpu, dev) in range_times(prof).items())
    return (f"{method:6s} L={length:5d} wall_ms={wall * 1000:.3f} self_device_ms={_ms(device, steps):.3f} "
            f"self_cpu_ms={_ms(cpu, steps):.3f} {ranges}".rstrip())


def profile_run(cfg: BenchConfig, out_dir: str, steps: int = 3, trace: bool = True,
                log: Callable[[str], None] = lambda _: None) -> list[Path]:
    """Profile every (method, length) of ``cfg``; write the files above under ``out_dir`` → their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, lines = [], []
    for length in cfg.lengths:
        batch = synthetic_batch(batch_size(length, cfg.batch_tokens), length, cfg.vocab, cfg.device, cfg.seed)
        for method in cfg.methods:
            prof, wall = profile_step(TrainStep(build_model(method, cfg), batch, cfg.device), cfg.device, steps)
            stem = out / f"train_{method}_L{length}"
            stem.with_suffix(".txt").write_text(tables(prof, cfg.device, steps) + "\n")
            written.append(stem.with_suffix(".txt"))
            if trace:
                path = out / f"{stem.name}.json.gz"  # gzip: a transformer-base trace is tens of MB
                prof.export_chrome_trace(str(path))
                written.append(path)
            lines.append(summary_line(method, length, prof, wall, steps))
            log(f"profile {lines[-1]}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    return [*written, out / "summary.txt"]
