"""Shift invariance of encoder states (SHAPE §3.2, Eq. 3, Fig. 2).

For offsets k ∈ {0, 100, 250, 500} the encoder is run on positions i + k; for each pair of
offsets the cosine similarity of the hidden states h_i^{k1}, h_i^{k2} is averaged over the
positions of a sentence (Eq. 3) and then over sentences, giving a K×K matrix per model.
A model without absolute positions (RPE, RNN) gives 1 everywhere.

Shape legend: B batch, S source length, D model width, K number of offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from posenc.analysis import plots
from posenc.analysis.common import model_device, pad
from posenc.errors import ConfigError, DataError
from posenc.positions import default_positions

OFFSETS = (0, 100, 250, 500)


def encoder_states(model: nn.Module, src: Tensor, src_mask: Tensor, offset: float) -> Tensor:
    """Encoder output with the source positions shifted by ``offset``.

    Args:
        model: a Seq2SeqTransformer (its ``src_embed`` and ``encoder``).
        src: source token ids ``(B, S)``.
        src_mask: ``(B, S)`` bool, True on real tokens.
        offset: added to every source position.

    Returns:
        The encoder states ``(B, S, D)``.

    Raises:
        ConfigError: ``model`` is not a Seq2SeqTransformer (e.g. an RNN).
    """
    if not (hasattr(model, "encoder") and hasattr(model, "src_embed") and hasattr(model.encoder, "input_pos")):
        raise ConfigError(f"shift_invariance needs a Seq2SeqTransformer, got {type(model).__name__}")
    positions = default_positions(src_mask) + offset
    return model.encoder(model.src_embed(src), positions, src_mask)


@torch.no_grad()
def shift_similarity(
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    offsets: Sequence[float] = OFFSETS,
    pad_id: int = 0,
    batch_size: int = 32,
) -> np.ndarray:
    """SHAPE Eq. 3 averaged over sentences, for every pair of offsets. The model is put in eval mode.

    Args:
        model: a Seq2SeqTransformer.
        sources: source token-id sequences, as the encoder receives them; none empty.
        offsets: the K position offsets.
        pad_id: the padding id.
        batch_size: sentences per forward pass.

    Returns:
        The ``(K, K)`` float64 matrix of mean cosine similarity between the encoder states under
        each two offsets.

    Raises:
        DataError: no sources, or an empty one.
        ConfigError: ``model`` is not a Seq2SeqTransformer.
    """
    if not sources or any(len(s) == 0 for s in sources):
        raise DataError("shift_invariance: need at least one non-empty source sentence")
    model.eval()
    device = model_device(model)
    total = np.zeros((len(offsets), len(offsets)))
    for start in range(0, len(sources), batch_size):
        src, mask = pad(sources[start : start + batch_size], pad_id)
        src, mask = src.to(device), mask.to(device)
        states = [encoder_states(model, src, mask, k).double() for k in offsets]
        for a in range(len(offsets)):
            for b in range(len(offsets)):
                sim = torch.nn.functional.cosine_similarity(states[a], states[b], dim=-1)  # (B, S)
                per_sentence = (sim * mask).sum(1) / mask.sum(1)
                total[a, b] += per_sentence.sum().item()
    return total / len(sources)


def shift_invariance(
    models: Mapping[str, nn.Module],
    sources: Sequence[Sequence[int]] | Mapping[str, Sequence[Sequence[int]]],
    out_dir: str | Path,
    offsets: Sequence[float] = OFFSETS,
    pad_id: int = 0,
    batch_size: int = 32,
) -> list[dict[str, Any]]:
    """Similarity matrices per model → ``shift_invariance.csv`` and ``shift_<model>.png``.

    Args:
        models: name → Seq2SeqTransformer.
        sources: source token-id sequences (as the model's encoder receives them), or a mapping
            model name → its own sources, when models read different source formats (CAPE
            trained with a source BOS is scored with it).
        out_dir: the output directory (created if needed).
        offsets: the K position offsets.
        pad_id: the padding id.
        batch_size: sentences per forward pass.

    Returns:
        The rows written: ``model, k1, k2, similarity`` (K×K rows per model).
    """
    out = plots.output_dir(out_dir)
    labels = [f"{k:g}" for k in offsets]
    rows = []
    for name, model in models.items():
        own = sources[name] if isinstance(sources, Mapping) else sources
        matrix = shift_similarity(model, own, offsets, pad_id, batch_size)
        rows += [{"model": name, "k1": offsets[a], "k2": offsets[b], "similarity": float(matrix[a, b])}
                 for a in range(len(offsets)) for b in range(len(offsets))]
        fig, (ax,) = plots.figure(size=(4.2, 3.6))
        plots.heatmap(ax, matrix, labels, labels, f"{name}: cosine similarity", vmin=0.0, vmax=1.0, xlabel="offset k",
                      ylabel="offset k")
        plots.save_png(fig, out / f"shift_{plots.safe_name(name)}.png")
    plots.write_csv(out / "shift_invariance.csv", rows)
    return rows

