"""What a Hugging Face model accepts as ``position_ids``, found from the model itself.

Shape legend: B batch, L sequence length.

Two position interfaces can carry posenc's augmentations (``posenc.hf.wrapper``):

* ``rotary`` (Llama, Mistral, Qwen2, GPT-NeoX, ...): ``position_ids (B, L)`` only feed the rotary
  angles θ_i·p (Su et al. 2021, Eq. 34), computed as ``position_ids[..., None].float() * inv_freq``
  in transformers' ``*RotaryEmbedding.forward`` and never cast to an integer, so real-valued
  positions (CAPE) work. RoPE scores depend only on p_q − p_k, so a shift of every position is a
  no-op; jitter and scaling are not.
* ``learned`` (GPT-2, OPT-style ``wpe`` tables, ...): ``position_ids`` index an embedding table of
  ``max_position_embeddings`` rows, so positions must be integers in [0, max_position_embeddings).

A family is chosen by a name from :data:`FAMILIES`, found from the model's modules and signature
(a rotary-embedding submodule, else a ``position_ids`` argument). Models whose ``forward`` takes no
``position_ids`` (T5: relative buckets; BART: learned positions computed inside the model) are
rejected with one line.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from torch import nn

from posenc.errors import ConfigError


@dataclass(frozen=True)
class Family:
    """How a position interface reads ``position_ids``."""

    name: str
    continuous: bool  # accepts real-valued positions
    bounded: bool  # positions must lie in [0, max_positions)


FAMILIES: dict[str, Family] = {
    "rotary": Family("rotary", continuous=True, bounded=False),
    "learned": Family("learned", continuous=False, bounded=True),
}


@dataclass(frozen=True)
class PositionInterface:
    family: Family
    max_positions: int | None  # rows of the learned table (None for rotary)
    model_type: str


def _has_rotary(model: nn.Module) -> bool:
    return any(type(m).__name__.endswith("RotaryEmbedding") for m in model.modules())


def _max_positions(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    return None


def inspect_model(model: nn.Module) -> PositionInterface:
    """The position interface of ``model``; ConfigError when it takes no usable ``position_ids``."""
    model_type = str(getattr(getattr(model, "config", None), "model_type", type(model).__name__))
    if "position_ids" not in inspect.signature(model.forward).parameters:
        raise ConfigError(
            f"posenc.hf: {type(model).__name__} ({model_type}) takes no position_ids (for BART-style seq2seq "
            "models use PositionAugmentedSeq2Seq or augment_model; T5's relative buckets cannot be augmented)"
        )
    if _has_rotary(model):
        return PositionInterface(FAMILIES["rotary"], None, model_type)
    max_positions = _max_positions(model)
    if max_positions is None:
        raise ConfigError(
            f"posenc.hf: {type(model).__name__} ({model_type}) has neither rotary positions nor "
            "max_position_embeddings, so its position_ids cannot be checked"
        )
    return PositionInterface(FAMILIES["learned"], max_positions, model_type)
