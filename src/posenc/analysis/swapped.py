"""Sentence-order robustness on concatenated sequences (SHAPE §3.2, Table 1).

Groups of ten neighbouring pairs (X1..X10, Y1..Y10) are joined with a separator token. Each
group's source is translated in the original order X1..X10 and in the swapped order
X2..X10, X1; the outputs are split on the separator and BLEU of Y1' (the translation of X1)
is computed against Y1 in both orders. A shift-invariant model has a small drop.

Y1' is the first output segment in the original order and the last one in the swapped order;
outputs whose number of segments differs from the group size are counted in ``misaligned``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from posenc.analysis import plots
from posenc.analysis.common import Translate, check_same_length, corpus_bleu
from posenc.errors import DataError

Group = tuple[Sequence[str], Sequence[str]]


def make_groups(sources: Sequence[str], targets: Sequence[str], size: int = 10) -> list[Group]:
    """Consecutive groups of ``size`` sentence pairs (an incomplete last group is dropped).

    Args:
        sources: source sentences, in corpus order.
        targets: their references, aligned with ``sources``.
        size: sentences per group, >= 2.

    Returns:
        ``(sources, targets)`` per group, ``size`` sentences each.

    Raises:
        DataError: ``targets`` does not align with ``sources``, or ``size`` < 2.
    """
    check_same_length("swapped: targets", targets, len(sources), "sources")
    if size < 2:
        raise DataError(f"swapped: group size must be >= 2, got {size}")
    return [(sources[i : i + size], targets[i : i + size]) for i in range(0, len(sources) - size + 1, size)]


def join(sentences: Sequence[str], sep: str) -> str:
    """One line of sentences joined by a separator.

    Args:
        sentences: the sentences (each stripped).
        sep: the separator token.

    Returns:
        The sentences joined by ``sep`` with a space on each side.
    """
    return f" {sep} ".join(s.strip() for s in sentences)


def split(text: str, sep: str) -> list[str]:
    """The sentences of a joined line (the inverse of :func:`join`).

    Args:
        text: a line of sentences joined by ``sep`` (e.g. a model's output).
        sep: the separator token.

    Returns:
        The stripped segments between the separators (one more than the separators).
    """
    return [s.strip() for s in text.split(sep)]


def first_sentence_outputs(groups: Sequence[Group], translate: Translate, sep: str) -> tuple[list[str], list[str], int]:
    """Y1' (the translation of X1) in the original and in the swapped order.

    Args:
        groups: (sources X1..Xn, references Y1..Yn) per group.
        translate: source lines → one output each (the model's decoding).
        sep: the separator token joining sentences.

    Returns:
        ``(original, swapped, misaligned)``: Y1' per group in the original order (the first output
        segment) and in the swapped order (the last), and how many outputs have a number of segments
        other than the group's sentences.

    Raises:
        DataError: ``translate`` returns a number of outputs other than its inputs.
    """
    original_src = [join(xs, sep) for xs, _ in groups]
    swapped_src = [join([*xs[1:], xs[0]], sep) for xs, _ in groups]
    outputs = translate(original_src + swapped_src)
    check_same_length("swapped: translate() output", outputs, 2 * len(groups), "inputs")
    original, swapped, misaligned = [], [], 0
    for k, (xs, _) in enumerate(groups):
        a, b = split(outputs[k], sep), split(outputs[len(groups) + k], sep)
        misaligned += (len(a) != len(xs)) + (len(b) != len(xs))
        original.append(a[0])
        swapped.append(b[-1])
    return original, swapped, misaligned


def swapped(
    groups: Sequence[Group],
    translators: Mapping[str, Translate],
    out_dir: str | Path,
    sep: str = "<sep>",
    tokenize: str = "13a",
) -> list[dict[str, Any]]:
    """BLEU of Y1' in the original and swapped order per model → ``swapped.csv``/``.png``.

    Args:
        groups: (sources X1..Xn, references Y1..Yn) per group, e.g. from :func:`make_groups`.
        translators: model name → ``translate(list[str]) -> list[str]``.
        out_dir: the output directory (created if needed).
        sep: the separator token joining sentences (as the models saw it in training).
        tokenize: sacreBLEU's tokenizer.

    Returns:
        The rows written, one per model: ``model, original, swapped, drop, groups, misaligned``
        (``drop`` = original − swapped BLEU).

    Raises:
        DataError: no groups, or a translator returns a number of outputs other than its inputs.
    """
    if not groups:
        raise DataError("swapped: no groups to evaluate")
    refs = [ys[0] for _, ys in groups]
    rows = []
    for name, translate in translators.items():
        original, swapped_out, misaligned = first_sentence_outputs(groups, translate, sep)
        a, b = corpus_bleu(original, refs, tokenize), corpus_bleu(swapped_out, refs, tokenize)
        rows.append({"model": name, "original": a, "swapped": b, "drop": a - b, "groups": len(groups),
                     "misaligned": misaligned})
    out = plots.output_dir(out_dir)
    plots.write_csv(out / "swapped.csv", rows)
    fig, (ax,) = plots.figure()
    plots.bars(ax, [r["model"] for r in rows],
               {"original": [r["original"] for r in rows], "swapped": [r["swapped"] for r in rows]},
               "model", "BLEU of Y1'", "Original vs swapped order")
    plots.save_png(fig, out / "swapped.png")
    return rows
