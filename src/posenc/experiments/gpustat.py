"""GPU utilisation and memory of a grid's GPUs while it trains (``posenc experiment`` on CUDA).

Sampled from ``nvidia-smi --query-gpu=...`` when it is on PATH, else from
``torch.cuda.utilization`` (needs the ``pynvml`` / nvidia-ml-py package; utilisation only); the
probe never creates a CUDA context in the grid's own process. Samples go to ``ROOT/logs/gpu.csv``
as they are taken; :meth:`GpuMonitor.summary` is the grid's one line ("not measured" when neither
source is available).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

QUERY = "index,uuid,utilization.gpu,memory.used,memory.total"
COLUMNS = ("time_s", "gpu", "utilization_pct", "memory_used_mib", "memory_total_mib", "runs")


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment: its id as the workers see it (an index or UUID), utilisation in
    percent, memory used and total in MiB (None where the source does not say)."""

    gpu: str
    utilization: float
    memory_used: float | None = None
    memory_total: float | None = None


def parse_nvidia_smi(text: str, visible: list[str]) -> list[GpuSample]:
    """Rows of ``nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total
    --format=csv,noheader,nounits`` for the GPUs in ``visible`` (indices or UUIDs; [] = all)."""
    samples = []
    for row in csv.reader(line for line in text.splitlines() if line.strip()):
        index, uuid, util, used, total = (c.strip() for c in row[:5])
        if visible and index not in visible and uuid not in visible:
            continue
        number = lambda v: None if v in ("", "[N/A]", "N/A") else float(v)  # noqa: E731
        samples.append(GpuSample(index if not visible or index in visible else uuid,
                                 number(util) or 0.0, number(used), number(total)))
    return samples


def nvidia_smi_probe(visible: list[str]) -> Callable[[], list[GpuSample]] | None:
    """A probe reading ``nvidia-smi`` (None when it is not on PATH)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None

    def probe() -> list[GpuSample]:
        out = subprocess.run([exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return parse_nvidia_smi(out, visible)

    return probe


def torch_probe(visible: list[str]) -> Callable[[], list[GpuSample]] | None:
    """A probe through ``torch.cuda.utilization(i)`` (None without pynvml or CUDA). Called with
    an explicit index it reads NVML only: no CUDA context in this process."""
    try:
        import pynvml  # noqa: F401 - torch.cuda.utilization needs it
        import torch
    except ImportError:
        return None
    count = len(visible) if visible else torch.cuda.device_count()
    if count == 0:
        return None
    names = visible or [str(i) for i in range(count)]
    return lambda: [GpuSample(names[i], float(torch.cuda.utilization(i))) for i in range(count)]


def find_probe(visible: list[str]) -> tuple[str, Callable[[], list[GpuSample]]] | None:
    """``(source name, probe)`` of the first available source, None when none is."""
    for name, make in (("nvidia-smi", nvidia_smi_probe), ("torch.cuda.utilization", torch_probe)):
        probe = make(visible)
        if probe is not None:
            return name, probe
    return None


@dataclass
class GpuMonitor:
    """Samples ``probe`` at most every ``interval_s`` seconds (:meth:`sample`), appending each to
    ``path`` (CSV, :data:`COLUMNS`) and keeping them for :meth:`summary`."""

    path: Path
    source: tuple[str, Callable[[], list[GpuSample]]] | None
    interval_s: float = 5.0
    clock: Callable[[], float] = time.monotonic
    samples: list[GpuSample] = field(default_factory=list)
    latest: list[GpuSample] = field(default_factory=list)  # the last sample's GPUs
    failed: str | None = None

    def __post_init__(self) -> None:
        self.start, self.last = self.clock(), -float("inf")
        if self.source is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(",".join(COLUMNS) + "\n", encoding="utf-8")

    def sample(self, runs: int, force: bool = False) -> list[GpuSample]:
        """Take a sample now if ``interval_s`` has passed (or ``force``), ``runs`` being the runs
        training; returns it ([] otherwise).
        A probe that fails is not asked again (its error is kept for the summary)."""
        now = self.clock()
        if self.source is None or self.failed is not None or (not force and now - self.last < self.interval_s):
            return []
        self.last = now
        try:
            taken = self.source[1]()
        except Exception as err:  # noqa: BLE001 -- a monitor: any probe failure (e.g. pynvml's NVMLError) ends sampling
            self.failed = str(err).splitlines()[0] if str(err) else type(err).__name__
            return []
        with self.path.open("a", encoding="utf-8", newline="") as fh:
            for s in taken:
                csv.writer(fh).writerow([f"{now - self.start:.1f}", s.gpu, f"{s.utilization:g}",
                                         "" if s.memory_used is None else f"{s.memory_used:g}",
                                         "" if s.memory_total is None else f"{s.memory_total:g}", runs])
        self.samples.extend(taken)
        self.latest = taken
        return taken

    def summary(self) -> str:
        """One line: mean (min-max) utilisation over the samples and the most memory used, or why not measured."""
        if self.source is None:
            return "GPU utilisation: not measured (neither nvidia-smi on PATH nor pynvml for torch.cuda.utilization)"
        if not self.samples:
            why = f": {self.source[0]} failed ({self.failed})" if self.failed else " (no samples)"
            return f"GPU utilisation: not measured{why}"
        util = [s.utilization for s in self.samples]
        text = (f"GPU utilisation: mean {sum(util) / len(util):.0f} % (min {min(util):g}, max {max(util):g}) over "
                f"{len(util)} samples from {self.source[0]}")
        used = [s for s in self.samples if s.memory_used is not None]
        if used:
            peak = max(used, key=lambda s: s.memory_used or 0.0)
            total = f" of {peak.memory_total:g}" if peak.memory_total else ""
            text += f"; memory used at most {peak.memory_used:g}{total} MiB per GPU"
        return text + f" (samples: {self.path})"
