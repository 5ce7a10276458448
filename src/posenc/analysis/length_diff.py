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
    """Refuse length lists that do not align with the test set.

    Args:
        src_lengths: source length of every test sentence.
        ref_lengths: reference length of every test sentence.
        hyp_lengths: model name → output length of every test sentence.

    Raises:
        DataError: no models, or a list whose length differs from ``src_lengths``'.
    """
    if not hyp_lengths:
        raise DataError("length_diff: no model outputs given")
    check_same_length("length_diff: reference lengths", ref_lengths, len(src_lengths), "source lengths")
    for name, h in hyp_lengths.items():
        check_same_length(f"length_diff: output lengths of {name}", h, len(src_lengths), "source lengths")


def length_diff_table(
    src_lengths: Sequence[int], ref_lengths: Sequence[int], hyp_lengths: Mapping[str, Sequence[int]], buckets: Buckets,
    seen: Sequence[bool | None],
) -> list[dict[str, Any]]:
    """The mean output − reference length of each model per source-length bucket.

    Args:
        src_lengths: source length of every test sentence.
        ref_lengths: reference length of every test sentence.
        hyp_lengths: model name → output length of every test sentence.
        buckets: the source-length buckets.
        seen: per bucket, whether it lies in the training range (:func:`~posenc.analysis.length_bleu.seen_buckets`).

    Returns:
        One row per model and bucket: ``model, bucket, sentences, mean_diff, seen`` (``mean_diff``
        None for an empty bucket; negative = outputs too short).
    """
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
    """The distribution of output lengths on the sentences of one source-length bucket.

    Args:
        src_lengths: source length of every test sentence.
        hyp_lengths: model name → output length of every test sentence.
        buckets: the source-length buckets.
        label: the bucket, by its label (e.g. ``40-49``).

    Returns:
        Rows ``model, bucket, output_length, sentences``, one per model and output length that
        occurs, by length.

    Raises:
        DataError: ``label`` is not one of the buckets' labels.
    """
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
    """Mean length difference per bucket → ``length_diff.csv``/``.png``; with ``hist_buckets`` also the
    output-length histograms → ``length_hist.csv``/``.png``.

    Args:
        src_lengths: source length of every test sentence (in the unit the buckets count).
        ref_lengths: reference length of every test sentence.
        hyp_lengths: model name → output length of every test sentence.
        out_dir: the output directory (created if needed).
        buckets: the source-length buckets.
        hist_buckets: labels of the buckets to draw output-length histograms for (none: no histograms).
        train_lengths: training source lengths, for the seen/unseen shading.
        train_max: the longest training source, used for the shading when ``train_lengths`` is None.

    Returns:
        The length-difference rows (:func:`length_diff_table`).

    Raises:
        DataError: inputs that do not align, or a histogram bucket that is not a bucket's label.
    """
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
    """Write the output-length histograms of some source-length buckets as ``length_hist.csv`` and
    ``length_hist.png`` (one panel per bucket).

    Args:
        src_lengths: source length of every test sentence.
        hyp_lengths: model name → output length of every test sentence.
        buckets: the source-length buckets.
        labels: the buckets to draw, by label.
        out: the existing output directory.

    Raises:
        DataError: a label that is not one of the buckets'.
    """
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
