"""Run the training and decoding benchmarks and return flat records (one per method × length).

A training record: ``{"kind": "train", "method", "length", "batch", "tokens_per_s", "ratio_to_ape",
"peak_mem_mb", "seconds_per_step", "reps"}`` (+ ``"mfu"`` on CUDA, + ``"peak_mem_ratio_to_ape"`` when
memory is measured). A decoding record (``kind`` is
``greedy`` or ``beam<K>``) has ``length`` = source length, ``tokens_per_s`` = generated tokens/s,
``sentences_per_s``, ``beam``, ``seconds_per_batch``, ``precision`` (bf16 autocast on CUDA),
``cuda_graph`` (True on CUDA) and ``peak_mem_mb = None``; it times the device-batched search with the
static KV cache (on CUDA with the step captured as a CUDA graph, capture included in the time). Tokens are
source + target tokens of the batch.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
from torch import Tensor

from posenc.bench import flops
from posenc.bench.core import (
    BOS,
    EOS,
    BenchConfig,
    TrainStep,
    autocast,
    batch_size,
    build_model,
    fresh_compile_cache,
    interleaved,
    make_step,
    paired_ratio,
    sync,
    synthetic_batch,
)
from posenc.bench.memory import measure_in_subprocess, step_peak_mb
from posenc.bench.train_loop import loop_records

Log = Callable[[str], None]
#: Suffix of the fp32 reference steps timed beside bf16 ones (``--precision bf16``).
FP32 = "@fp32"


def _quiet(_: str) -> None:
    pass


def train_records(cfg: BenchConfig, length: int, log: Log = _quiet) -> list[dict[str, Any]]:
    """Interleaved training steps of every method at one length → one record per method."""
    b = batch_size(length, cfg.batch_tokens)
    fresh_compile_cache(cfg)  # at most len(METHODS) = 5 compiled steps live at once
    batch = synthetic_batch(b, length, cfg.vocab, cfg.device, cfg.seed)
    steps = {m: make_step(build_model(m, cfg), batch, cfg) for m in cfg.methods}
    if cfg.fp32_reference():  # the same models (same seed) in fp32, timed in the same rounds
        steps.update({f"{m}{FP32}": TrainStep(build_model(m, cfg), batch, cfg.device, "fp32", cfg.compiled())
                      for m in cfg.methods})
    # Compiled: 2+ untimed rounds, so every method runs once after all have compiled (a method
    # whose graph breaks adds frames to the shared caches that another's next call may recompile).
    times = interleaved(steps, cfg.reps, max(cfg.warmup, 2) if cfg.compiled() else cfg.warmup)
    peak = flops.peak_bf16_flops(torch.cuda.get_device_name()) if cfg.device.startswith("cuda") else None
    records = []
    for m in cfg.methods:
        sec = statistics.median(times[m])
        rec: dict[str, Any] = {
            "kind": "train", "method": m, "length": length, "batch": b,
            "tokens_per_s": steps[m].tokens / sec, "ratio_to_ape": paired_ratio(times, m),
            "peak_mem_mb": None, "seconds_per_step": sec, "reps": cfg.reps,
        }
        if cfg.device.startswith("cuda"):
            rec["mfu"] = flops.mfu(flops.train_flops(steps[m].model, b, length, length), sec, peak)
        if cfg.fp32_reference():
            rec["precision"], rec["ratio_to_fp32"] = "bf16", paired_ratio(times, m, f"{m}{FP32}")
            rec["ratio_to_ape_fp32"] = paired_ratio(times, f"{m}{FP32}", f"ape{FP32}")
        records.append(rec)
        vs = f"  ×fp32 {rec['ratio_to_fp32']:.3f}" if "ratio_to_fp32" in rec else ""
        log(f"train {m:6s} L={length:5d} B={b:4d} {rec['tokens_per_s']:10.0f} tok/s  "
            f"×APE {rec['ratio_to_ape']:.3f}{vs}")
    del steps
    return records


def add_memory(records: list[dict[str, Any]], cfg: BenchConfig, log: Log = _quiet) -> None:
    """Fill ``peak_mem_mb`` of the training records (subprocess per config on CPU)."""
    for rec in records:
        if rec["kind"] != "train":
            continue
        if cfg.device.startswith("cuda"):
            rec["peak_mem_mb"] = step_peak_mb(rec["method"], rec["length"], cfg)
        else:
            rec["peak_mem_mb"] = measure_in_subprocess(rec["method"], rec["length"], cfg)
        log(f"memory {rec['method']:6s} L={rec['length']:5d} {rec['peak_mem_mb']} MB")
    add_memory_ratio(records, log)


def add_memory_ratio(records: list[dict[str, Any]], log: Log = _quiet) -> None:
    """``peak_mem_ratio_to_ape``: a training record's peak memory over APE's at the same length
    (Shaw's memory target: ≤ 1.15 at 2048 tokens); None where either peak is missing."""
    ape = {r["length"]: r["peak_mem_mb"] for r in records if r["kind"] == "train" and r["method"] == "ape"}
    for rec in records:
        if rec["kind"] != "train":
            continue
        base = ape.get(rec["length"])
        rec["peak_mem_ratio_to_ape"] = rec["peak_mem_mb"] / base if rec["peak_mem_mb"] is not None and base else None
        if rec["method"] != "ape" and rec["peak_mem_ratio_to_ape"] is not None:
            log(f"memory {rec['method']:6s} L={rec['length']:5d} ×APE {rec['peak_mem_ratio_to_ape']:.3f}")


class NoEos:
    """Model view whose step never proposes EOS, so every method decodes the same number of steps
    (until the length limit forces EOS) — random-init models would otherwise stop at random."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return self.model.encode(src, src_mask)

    def init_state(self, memory: Tensor, memory_mask: Tensor) -> Any:
        return self.model.init_state(memory, memory_mask)

    def init_static_state(self, memory: Tensor, memory_mask: Tensor, max_len: int, **kw: Any) -> Any:
        """The model's preallocated (static) KV cache, so the search benchmarks that path."""
        return self.model.init_static_state(memory, memory_mask, max_len, **kw)

    def step(self, tokens: Tensor, state: Any) -> Tensor:
        logits = self.model.step(tokens, state)
        logits[:, EOS] = -1e4  # finite: the search's forced EOS at the length limit still works
        return logits


def greedy_loop(model: Any, src: Tensor, src_mask: Tensor, max_len: int) -> Tensor:
    """Minimal greedy decoding over ``model.step`` for ``max_len`` steps → tokens ``(B, max_len)``."""
    state = model.init_state(model.encode(src, src_mask), src_mask)
    tokens = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
    out = []
    for _ in range(max_len):
        tokens = model.step(tokens, state).argmax(-1)
        out.append(tokens)
    return torch.stack(out, 1)


def decode_runner(kind: str, model: Any, src: Tensor, mask: Tensor, beam: int, device: str,
                  cuda_graph: bool = False) -> Callable[[], float]:
    """A timed decode of the whole batch (output length = source length) for ``kind``;
    ``cuda_graph``: the search replays one captured step (the capture is part of the timed call)."""
    try:
        from posenc.decoding import beam_search, greedy_search
    except ImportError:  # decoding package not available: a plain greedy loop (no beam)
        beam_search = greedy_search = None  # type: ignore[assignment]

    def run() -> float:
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode(), autocast(device):  # bf16 on CUDA, as in training
            if kind == "greedy" and greedy_search is not None:
                greedy_search(model, src, mask, BOS, EOS, max_len_a=1.0, max_len_b=0, cuda_graph=cuda_graph)
            elif kind == "greedy":
                greedy_loop(model, src, mask, src.shape[1])
            else:
                beam_search(model, src, mask, BOS, EOS, beam=beam, max_len_a=1.0, max_len_b=0, cuda_graph=cuda_graph)
        sync(device)
        return time.perf_counter() - start

    return run


def decode_records(cfg: BenchConfig, log: Log = _quiet) -> list[dict[str, Any]]:
    """Greedy and beam-K sentences/s of every method on one random source batch, interleaved."""
    batch = synthetic_batch(cfg.decode_batch, cfg.decode_len, cfg.vocab, cfg.device, cfg.seed + 1)
    src, mask = batch["src"], batch["src_mask"]
    models = {m: NoEos(build_model(m, cfg).eval()) for m in cfg.methods}
    try:
        import posenc.decoding  # noqa: F401

        kinds = ["greedy", f"beam{cfg.beam}"]
    except ImportError:
        kinds = ["greedy"]
    graphs = cfg.device.startswith("cuda")  # CUDA graphs on the GPU (posenc.decoding.graphs)
    records = []
    for kind in kinds:
        runs = {m: decode_runner(kind, models[m], src, mask, cfg.beam, cfg.device, graphs) for m in cfg.methods}
        times = interleaved(runs, cfg.decode_reps, 1)
        for m in cfg.methods:
            sec = statistics.median(times[m])
            rec = {
                "kind": kind, "method": m, "length": cfg.decode_len, "batch": cfg.decode_batch,
                "tokens_per_s": cfg.decode_batch * cfg.decode_len / sec,
                "sentences_per_s": cfg.decode_batch / sec, "ratio_to_ape": paired_ratio(times, m),
                "peak_mem_mb": None, "reps": cfg.decode_reps, "beam": 1 if kind == "greedy" else cfg.beam,
                "seconds_per_batch": sec, "precision": "bf16" if cfg.device.startswith("cuda") else "fp32",
                "cuda_graph": graphs,
            }
            records.append(rec)
            log(f"{kind:7s} {m:6s} {rec['sentences_per_s']:8.2f} sent/s  ×APE {rec['ratio_to_ape']:.3f}")
    return records


def run(cfg: BenchConfig, decode: bool = True, log: Log = _quiet, train: bool = True) -> list[dict[str, Any]]:
    """Every training length (unless not ``train``), then memory (if enabled), decoding (if asked)
    and the training loop (if ``cfg.loop_steps``)."""
    torch.manual_seed(cfg.seed)
    records: list[dict[str, Any]] = []
    for length in cfg.lengths if train else []:
        records += train_records(cfg, length, log)
    if cfg.memory and train:
        add_memory(records, cfg, log)
    if decode:
        records += decode_records(cfg, log)
    if cfg.loop_steps > 0:
        records += loop_records(cfg, log)
    return records
