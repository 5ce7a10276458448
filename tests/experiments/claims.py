"""Shared by the seed-claims tests: how docs/results.md writes numbers and long-source rows."""

from __future__ import annotations

import csv
from pathlib import Path


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a committed CSV file, as dicts of strings."""
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def minus(text: str) -> str:
    """``text`` with ASCII hyphens as the docs' minus signs."""
    return text.replace("-", "−")


def long_source_row(label: str, r: dict[str, str]) -> str:
    """The docs' Markdown row for one method of the committed long_sources.csv (``r``): BLEU and
    output − reference length, each with its seeds, the gain over APE with its interval and both p values."""
    cells = [f"{float(r['bleu']):.2f} ({r['bleu_seeds'].replace(' ', ', ')})",
             f"{float(r['bleu_gain']):+.2f} [{float(r['bleu_low']):+.2f}, {float(r['bleu_high']):+.2f}]",
             f"{float(r['bleu_p']):.3f} / {float(r['bleu_boot_p']):.3f}",
             f"{float(r['out_minus_ref']):.2f} ({r['out_minus_ref_seeds'].replace(' ', ', ')})",
             f"{float(r['len_gain']):+.2f} [{float(r['len_low']):+.2f}, {float(r['len_high']):+.2f}]",
             f"{float(r['len_p']):.3f} / {float(r['len_boot_p']):.3f}"]
    return f"| {label} | " + minus(" | ".join(cells)) + " |"
