"""BLEU by source-length bucket and the gain over a baseline (SHAPE Fig. 3/7, Neishi Fig. 3).

The test set is split by source length (in whatever unit the caller measures: words, or
subwords as Neishi et al. do), BLEU is computed per bucket and model, and the difference to a
baseline model (APE) per bucket. A bucket is ``seen`` only when every test sentence in it has a
length inside the training range (a bucket whose lower edge fits but whose longer
sentences do not is not "seen"); the others are shaded grey in the plot (the papers' "no training
data" areas).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc.analysis import plots
from posenc.analysis.common import Buckets, check_same_length, corpus_bleu
from posenc.errors import DataError

DEFAULT_BUCKETS = Buckets.uniform(10, 60)  # 0-9, 10-19, ..., 50-59, 60-


def seen_buckets(buckets: Buckets, train_lengths: Sequence[int] | None, train_max: int | None,
                 lengths: Sequence[int] | None = None) -> list[bool | None]:
    """Which buckets lie inside the training range of lengths, ``min..max`` of ``train_lengths``
    (or ``0..train_max``).

    Args:
        buckets: the length buckets.
        train_lengths: the training sources' lengths, or None.
        train_max: the longest training source, used when ``train_lengths`` is None (or None).
        lengths: the test sources' lengths; without them a bucket is judged by every length it
            spans (an open last bucket is never inside).

    Returns:
        Per bucket: True when every test length in it (every length it spans) is inside the training
        range, False otherwise (an empty bucket is False); all ``None`` when both ``train_lengths``
        and ``train_max`` are None.
    """
    if train_lengths is None and train_max is None:
        return [None] * len(buckets)
    lo = min(train_lengths) if train_lengths else 0
    hi = max(train_lengths) if train_lengths else int(train_max or 0)
    inside = lambda n: lo <= n <= hi  # noqa: E731
    if lengths is not None:
        index = buckets.assign(lengths)
        members = [[n for n, b in zip(lengths, index) if b == k] for k in range(len(buckets))]
        return [all(map(inside, m)) if m else False for m in members]
    ends = [*(e - 1 for e in buckets.edges[1:]), None]
    return [end is not None and inside(start) and inside(end) for start, end in zip(buckets.edges, ends)]


def length_bleu(
    src_lengths: Sequence[int],
    refs: Sequence[str],
    hyps: Mapping[str, Sequence[str]],
    out_dir: str | Path,
    buckets: Buckets = DEFAULT_BUCKETS,
    baseline: str | None = None,
    train_lengths: Sequence[int] | None = None,
    train_max: int | None = None,
    tokenize: str = "13a",
) -> list[dict[str, Any]]:
    """Per-bucket BLEU per model → ``length_bleu.csv`` and ``length_bleu.png``.

    Args:
        src_lengths: source length of every test sentence (in the unit the buckets count).
        refs: references, aligned with ``src_lengths``.
        hyps: model name → hypotheses, aligned with ``src_lengths``.
        out_dir: the output directory (created if needed).
        buckets: the source-length buckets.
        baseline: the model the gain is measured against (None: the first of ``hyps``).
        train_lengths: training source lengths, for the seen/unseen shading (:func:`seen_buckets`).
        train_max: the longest training source, used for the shading when ``train_lengths`` is None.
        tokenize: sacreBLEU's tokenizer.

    Returns:
        The rows written, one per model and bucket: ``model, bucket, sentences, bleu, gain, seen``
        (gain = bleu − the baseline's bleu; None for an empty bucket).

    Raises:
        DataError: no models, inputs that do not align, or a baseline not among the models.
    """
    if not hyps:
        raise DataError("length_bleu: no model outputs given")
    check_same_length("length_bleu: references", refs, len(src_lengths), "source lengths")
    for name, h in hyps.items():
        check_same_length(f"length_bleu: outputs of {name}", h, len(src_lengths), "source lengths")
    base = baseline if baseline is not None else next(iter(hyps))
    if base not in hyps:
        raise DataError(f"length_bleu: baseline {base!r} is not among the models ({', '.join(hyps)})")
    index = buckets.assign(src_lengths)
    members = [[i for i, b in enumerate(index) if b == k] for k in range(len(buckets))]
    seen = seen_buckets(buckets, train_lengths, train_max, src_lengths)
    scores = {
        name: [corpus_bleu([h[i] for i in m], [refs[i] for i in m], tokenize) for m in members]
        for name, h in hyps.items()
    }
    rows = []
    for name in hyps:
        for k, label in enumerate(buckets.labels()):
            bleu, ref_bleu = scores[name][k], scores[base][k]
            gain = None if bleu is None or ref_bleu is None else bleu - ref_bleu
            rows.append({"model": name, "bucket": label, "sentences": len(members[k]), "bleu": bleu, "gain": gain,
                         "seen": seen[k]})
    plot_length_bleu(rows, buckets.labels(), base, seen, plots.output_dir(out_dir))
    return rows


def plot_length_bleu(
    rows: list[dict[str, Any]], labels: list[str], base: str, seen: list[bool | None], out: Path
) -> None:
    """Write the rows of :func:`length_bleu` as ``length_bleu.csv`` and plot ``length_bleu.png``
    (BLEU by bucket, and each other model's gain over the baseline; unseen buckets shaded).

    Args:
        rows: the rows of :func:`length_bleu`, grouped by model in bucket order.
        labels: the bucket labels.
        base: the baseline model (no gain bars).
        seen: per bucket, as :func:`seen_buckets` (False: shaded).
        out: the existing output directory.
    """
    plots.write_csv(out / "length_bleu.csv", rows)
    models = list(dict.fromkeys(r["model"] for r in rows))
    by = {m: [r for r in rows if r["model"] == m] for m in models}
    fig, (ax1, ax2) = plots.figure(ncols=2)
    unseen = [k for k, s in enumerate(seen) if s is False]
    plots.shade(ax1, unseen)
    colors = plots.model_colors(models)
    plots.categorical_lines(ax1, labels, {m: [r["bleu"] for r in by[m]] for m in models}, "source length", "BLEU",
                            "BLEU by source length", colors)
    plots.shade(ax2, unseen)
    others = {m: [r["gain"] for r in by[m]] for m in models if m != base}
    plots.bars(ax2, labels, others, "source length", f"BLEU gain over {base}", f"Gain over {base}", colors)
    plots.save_png(fig, out / "length_bleu.png")
