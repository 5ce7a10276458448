"""Benchmark output: the JSON list, a markdown table and a cost-vs-length plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posenc.files import atomic_output, atomic_write_text

#: Keys every record has (the ``--out`` schema); records may carry more (see ``runner``).
REQUIRED_KEYS = ("method", "length", "tokens_per_s", "ratio_to_ape", "peak_mem_mb")


def write_json(records: list[dict[str, Any]], path: str | Path) -> None:
    """The records as a JSON list, written atomically (a failure leaves the old file; a symlink is
    written through to its target and stays)."""
    atomic_write_text(path, json.dumps(records, indent=1) + "\n", follow_symlink=True)


def plot_formats() -> set[str]:
    """File suffixes (without the dot) that matplotlib can write."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        return set(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown_table(records: list[dict[str, Any]], kind: str = "train") -> str:
    """Rows of one kind: method × length with tokens/s, ratio to APE and peak memory."""
    rows = [r for r in records if r.get("kind", "train") == kind]
    vs_fp32 = kind == "train" and any("ratio_to_fp32" in r for r in rows)  # --precision bf16
    head = ("| method | length | batch | tokens/s | ×APE | peak MB |" if kind == "train"
            else "| method | src len | batch | sentences/s | tokens/s | ×APE |")
    head += " bf16 ×fp32 | fp32 ×APE |" if vs_fp32 else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if kind == "train":
            extra = (f" {_fmt(r.get('ratio_to_fp32'), '.3f')} | {_fmt(r.get('ratio_to_ape_fp32'), '.3f')} |"
                     if vs_fp32 else "")
            lines.append(f"| {r['method']} | {r['length']} | {r['batch']} | {r['tokens_per_s']:.0f} | "
                         f"{r['ratio_to_ape']:.3f} | {_fmt(r['peak_mem_mb'], '.0f')} |{extra}")
        else:
            lines.append(f"| {r['method']} | {r['length']} | {r['batch']} | {r['sentences_per_s']:.2f} | "
                         f"{r['tokens_per_s']:.0f} | {r['ratio_to_ape']:.3f} |")
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], path: str | Path) -> None:
    """PNG: training µs per token and ratio to APE vs source length, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if r.get("kind", "train") == "train"]
    methods = list(dict.fromkeys(r["method"] for r in train))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for m in methods:
        rs = sorted((r for r in train if r["method"] == m), key=lambda r: r["length"])
        xs = [r["length"] for r in rs]
        ax1.plot(xs, [1e6 / r["tokens_per_s"] for r in rs], marker="o", label=m)
        ax2.plot(xs, [r["ratio_to_ape"] for r in rs], marker="o", label=m)
    for ax, label in ((ax1, "µs per token (forward+backward+Adam)"), (ax2, "throughput / APE (paired median)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (source = target)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax1.set_yscale("log")
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.legend()
    fig.tight_layout()
    try:
        with atomic_output(path, binary=True, follow_symlink=True) as fh:  # a failure leaves the old file
            fig.savefig(fh, dpi=110, format=Path(path).suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
