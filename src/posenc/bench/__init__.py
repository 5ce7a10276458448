"""Throughput and memory benchmark of the position methods (``python -m posenc.bench``)."""

from posenc.bench.core import DEFAULT_METHODS, BenchConfig, build_model, interleaved, paired_ratio, synthetic_batch
from posenc.bench.flops import mfu, peak_bf16_flops, train_flops
from posenc.bench.report import REQUIRED_KEYS, markdown_table, plot, write_json
from posenc.bench.runner import decode_records, run, train_records

__all__ = [
    "DEFAULT_METHODS",
    "REQUIRED_KEYS",
    "BenchConfig",
    "build_model",
    "decode_records",
    "interleaved",
    "markdown_table",
    "mfu",
    "paired_ratio",
    "peak_bf16_flops",
    "plot",
    "run",
    "synthetic_batch",
    "train_flops",
    "train_records",
    "write_json",
]
