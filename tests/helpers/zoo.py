"""The five models compared by Neishi & Yoshinaga (2019, §5.1, Table 2), as named configs.

================  ==========================================================================
name              model
================  ==========================================================================
rnn-nmt           4-layer bi-LSTM encoder, 3-layer LSTM decoder, dot attention, input feeding
transformer       Transformer with sinusoidal positional encodings (APE)
rel-transformer   Shaw et al. (2018) relative self-attention, k = 16, no absolute positions
rnn-transformer   one GRU replaces the positional encoding per side; decoder has one layer
                  fewer (6 encoder / 5 decoder layers at base size)
rr-transformer    RNN-Transformer + Shaw relative self-attention (same layers)
================  ==========================================================================

Following the paper's setup (§5.1) the zoo uses untied source/target/output embeddings and
dropout 0.2 at base size; ``**overrides`` change any ModelConfig/RNNConfig field. Our output
layer has no bias, so a base model has exactly ``vocab_size`` fewer parameters than the
corresponding Transformer-family entry of Neishi's Table 2 (checked in the tests).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

import torch
from torch import nn

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.models.config import ModelConfig
from posenc.models.rnn_nmt import RNNNMT, RNNConfig
from posenc.models.seq2seq import Seq2SeqTransformer

SIZES = ("base", "small", "tiny")

#: RNN-NMT sizes: base follows Neishi §5.1; small/tiny are CPU-trainable reductions.
RNN_SIZES: dict[str, dict[str, Any]] = {
    "base": dict(hidden=512, encoder_layers=4, decoder_layers=3, dropout=0.2),
    "small": dict(hidden=256, encoder_layers=2, decoder_layers=2, dropout=0.1),
    "tiny": dict(hidden=64, encoder_layers=1, decoder_layers=1, dropout=0.1),
}


@dataclass(frozen=True)
class ZooEntry:
    """A named model: its position method (None for the RNN), decoder-layer change, summary."""

    position: str | None
    decoder_layer_delta: int
    description: str


NEISHI_MODELS: dict[str, ZooEntry] = {
    "rnn-nmt": ZooEntry(None, 0, "bi-LSTM encoder, LSTM decoder, Luong dot attention + input feeding"),
    "transformer": ZooEntry("ape", 0, "Transformer with sinusoidal positional encodings"),
    "rel-transformer": ZooEntry("rpe", 0, "Transformer with Shaw et al. relative self-attention (k=16)"),
    "rnn-transformer": ZooEntry("rnn", -1, "GRU instead of positional encodings, one decoder layer fewer"),
    "rr-transformer": ZooEntry("rr", -1, "RNN-Transformer + Shaw relative self-attention"),
}


def model_config(name: str, vocab_size: int, size: str = "base", **overrides: Any) -> ModelConfig | RNNConfig:
    """The config of zoo model ``name`` at ``size`` (base|small|tiny), with field overrides."""
    if name not in NEISHI_MODELS:
        raise ConfigError(f"unknown zoo model {name!r} (known: {', '.join(NEISHI_MODELS)})")
    if size not in SIZES:
        raise ConfigError(f"unknown model size {size!r} (known: {', '.join(SIZES)})")
    entry = NEISHI_MODELS[name]
    if entry.position is None:
        return from_dict(RNNConfig, {**RNN_SIZES[size], "vocab_size": vocab_size, **overrides})
    preset = ModelConfig.from_preset(f"transformer-{size}")
    data: dict[str, Any] = {
        "preset": f"transformer-{size}",
        "decoder_layers": max(1, preset.decoder_layers + entry.decoder_layer_delta),
        "share_embeddings": "none",
        "vocab_size": vocab_size,
        "position": {"name": entry.position, "shaw": {"k": 16}},
    }
    if size == "base":
        data["dropout"] = 0.2  # Neishi §5.1 "Training"
    return from_dict(ModelConfig, {**data, **overrides})


def build_model(name: str, vocab_size: int, size: str = "base", pad_id: int = 0, **overrides: Any) -> nn.Module:
    """Build zoo model ``name`` (a key of :data:`NEISHI_MODELS`) for a ``vocab_size`` vocabulary."""
    cfg = model_config(name, vocab_size, size, **overrides)
    if isinstance(cfg, RNNConfig):
        return RNNNMT(cfg, pad_id)
    return Seq2SeqTransformer(cfg, pad_id)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def parameter_table(vocab_size: int, size: str = "base", names: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows ``{model, params}`` for zoo models, built on the meta device (no memory used)."""
    rows = []
    for name in names or list(NEISHI_MODELS):
        with torch.device("meta"):
            model = build_model(name, vocab_size, size)
        rows.append({"model": name, "params": count_parameters(model)})
    return rows


def print_parameter_table(vocab_size: int, size: str = "base", file: TextIO | None = None) -> list[dict[str, Any]]:
    """Print the parameter table (cf. Neishi Table 2) and return its rows."""
    rows = parameter_table(vocab_size, size)
    out = file or sys.stdout
    width = max(len(r["model"]) for r in rows)
    print(f"{'model':<{width}}  {'parameters':>13}   (vocab {vocab_size}, size {size})", file=out)
    for r in rows:
        print(f"{r['model']:<{width}}  {r['params']:>13,}", file=out)
    return rows
