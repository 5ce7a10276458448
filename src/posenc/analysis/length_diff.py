"""Output length vs reference length (Neishi & Yoshinaga Fig. 4, 5 and 7).

``length_diff`` averages (output length − reference length) over the test sentences of each
source-length bucket (Fig. 4/7; negative = too short). With ``hist_buckets`` it also writes the
distribution of output lengths for the chosen source-length buckets (Fig. 5, e.g. 40-49 and
50-59). Lengths are given by the caller (subwords in the paper).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posenc.analysis import plots
from posenc.analysis.common import Buckets, check_same_length
from posenc.analysis.length_bleu import DEFAULT_BUCKETS, seen_buckets
from posenc.errors import DataError


def check_lengths(
    src_lengths: Sequence[int], ref_lengths: Sequence[int], hyp_lengths: Mapping[str, Sequence[int]]
) -> None:
    if not hyp_lengths:
        raise DataError("length_diff: no model outputs given")
    check_same_length("length_diff: reference lengths", ref_lengths, len(src_lengths), "source lengths")
    for name, h in hyp_lengths.items():
        check_same_length(f"length_diff: output lengths of {name}", h, len(src_lengths), "source lengths")


def length_diff_table(
    src_lengths: Sequence[int], ref_lengths: Sequence[int], hyp_lengths: Mapping[str, Sequence[int]], buckets: Buckets,
    seen: Sequence[bool | None],
) -> list[dict[str, Any]]:
    """Rows ``model, bucket, sentences, mean_diff, seen``."""
    index = np.array(buckets.assign(src_lengths), dtype=int)
    refs = np.asarray(ref_lengths, dtype=float)
    rows = []
    for name, hyp in hyp_lengths.items():
        diff = np.asarray(hyp, dtype=float) - refs
        for k, label in enumerate(buckets.labels()):
            d = diff[index == k]
            rows.append({"model": name, "bucket": label, "sentences": int(d.size),
                         "mean_diff": float(d.mean()) if d.size else None, "seen": seen[k]})
    return rows


def output_length_histogram(
    src_lengths: Sequence[int], hyp_lengths: Mapping[str, Sequence[int]], buckets: Buckets, label: str
) -> list[dict[str, Any]]:
    """Rows ``model, bucket, output_length, sentences`` for source-length bucket ``label``."""
    labels = buckets.labels()
    if label not in labels:
        raise DataError(f"length_diff: unknown bucket {label!r} (buckets: {', '.join(labels)})")
    k = labels.index(label)
    members = [i for i, b in enumerate(buckets.assign(src_lengths)) if b == k]
    rows = []
    for name, hyp in hyp_lengths.items():
        counts = Counter(int(hyp[i]) for i in members)
        rows += [{"model": name, "bucket": label, "output_length": n, "sentences": counts[n]} for n in sorted(counts)]
    return rows


def length_diff(
    src_lengths: Sequence[int],
    ref_lengths: Sequence[int],
    hyp_lengths: Mapping[str, Sequence[int]],
    out_dir: str | Path,
    buckets: Buckets = DEFAULT_BUCKETS,
    hist_buckets: Sequence[str] = (),
    train_lengths: Sequence[int] | None = None,
    train_max: int | None = None,
) -> list[dict[str, Any]]:
    """Mean length difference per bucket → ``length_diff.csv``/``.png``; optional histograms
    → ``length_hist.csv``/``.png``. Returns the length-difference rows."""
    check_lengths(src_lengths, ref_lengths, hyp_lengths)
    seen = seen_buckets(buckets, train_lengths, train_max, src_lengths)
    rows = length_diff_table(src_lengths, ref_lengths, hyp_lengths, buckets, seen)
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "length_diff.csv", rows)
    fig, (ax,) = plots.figure()
    plots.shade(ax, [k for k, s in enumerate(seen) if s is False])
    series = {m: [r["mean_diff"] for r in rows if r["model"] == m] for m in hyp_lengths}
    plots.categorical_lines(ax, buckets.labels(), series, "source length", "output − reference length",
                            "Length difference")
    ax.axhline(0, color="black", linewidth=0.6)
    plots.save_png(fig, out / "length_diff.png")
    if hist_buckets:
        write_histograms(src_lengths, hyp_lengths, buckets, hist_buckets, out)
    return rows


def write_histograms(
    src_lengths: Sequence[int], hyp_lengths: Mapping[str, Sequence[int]], buckets: Buckets, labels: Sequence[str],
    out: Path,
) -> None:
    hist = [r for label in labels for r in output_length_histogram(src_lengths, hyp_lengths, buckets, label)]
    plots.write_csv(out / "length_hist.csv", hist, ["model", "bucket", "output_length", "sentences"])
    fig, axes = plots.figure(ncols=len(labels))
    top = max((r["output_length"] for r in hist), default=1)
    for ax, label in zip(axes, labels):
        values = {
            m: [r["output_length"] for r in hist if r["model"] == m and r["bucket"] == label
                for _ in range(r["sentences"])]
            for m in hyp_lengths
        }
        plots.histogram(ax, values, np.arange(-0.5, top + 1.5), "output length", title=f"source length {label}")
    plots.save_png(fig, out / "length_hist.png")
