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
``position_ids`` (T5: relative buckets; BART: learned positions computed inside the model), models
whose attention uses ALiBi (Falcon with ``alibi=True``, which still builds a rotary module) and rotary
models with ``rope_type`` dynamic or longrope (transformers recomputes their frequencies from
``max(position_ids)``, so an augmentation would rescale every frequency) are rejected with one line.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from torch import nn

from posenc.errors import ConfigError


@dataclass(frozen=True)
class Family:
    """How a position interface reads ``position_ids``.

    Args:
        name: ``rotary`` or ``learned``.
        continuous: accepts real-valued positions.
        bounded: positions must lie in [0, max_positions).
    """

    name: str
    continuous: bool  # accepts real-valued positions
    bounded: bool  # positions must lie in [0, max_positions)


FAMILIES: dict[str, Family] = {
    "rotary": Family("rotary", continuous=True, bounded=False),
    "learned": Family("learned", continuous=False, bounded=True),
}


@dataclass(frozen=True)
class PositionInterface:
    """What one model accepts as ``position_ids``.

    Args:
        family: its position family.
        max_positions: rows of its learned table (None for rotary).
        model_type: the model's ``config.model_type`` (or class name), for messages.
    """

    family: Family
    max_positions: int | None  # rows of the learned table (None for rotary)
    model_type: str


#: Rotary types whose frequencies transformers recomputes from ``max(position_ids)`` in each forward
#: (``dynamic_rope_update``): an augmentation would change the frequencies, not just the positions.
DYNAMIC_ROPE_TYPES = frozenset({"dynamic", "longrope"})


def _rotary_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def _rope_types(rotary: list[nn.Module]) -> set[str]:
    """The ``rope_type`` of every rotary module (a dict per layer type in some models)."""
    found: set[str] = set()
    for m in rotary:
        kind = getattr(m, "rope_type", "default")
        found |= set(kind.values()) if isinstance(kind, dict) else {str(kind)}
    return found


def require_module(model: object, what: str = "augment_model") -> nn.Module:
    """Refuse anything but a model instance that posenc does not wrap yet.

    Args:
        model: what the caller passed.
        what: the caller's name, for messages.

    Returns:
        ``model`` itself.

    Raises:
        TypeError: one line, for None, a class or any other object.
        ConfigError: a model posenc already wraps.
    """
    if isinstance(model, nn.Module) and getattr(model, "posenc_wrapper", False):
        raise ConfigError(f"posenc.hf: {what} got a model that posenc already wraps ({type(model).__name__}); "
                          "wrap the original model once (the wrapper's .model)")
    if isinstance(model, nn.Module):
        return model
    if isinstance(model, type):
        raise TypeError(f"posenc.hf: {what} needs a model instance, got the class {model.__name__} "
                        "(build one: cls(config) or cls.from_pretrained(...))")
    raise TypeError(f"posenc.hf: {what} needs a torch.nn.Module model instance, got {type(model).__name__}")


def _max_positions(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    return None


def inspect_model(model: nn.Module) -> PositionInterface:
    """The position interface of a model, found from its modules and signature.

    Args:
        model: a Hugging Face model instance.

    Returns:
        Its interface (rotary, or learned with the table's rows).

    Raises:
        ConfigError: one line, when it takes no usable ``position_ids`` (no such argument, ALiBi, a
            dynamic rotary type, or no table size).
        TypeError: not a model instance.
    """
    model = require_module(model, "inspect_model")
    config = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", type(model).__name__))
    if "position_ids" not in inspect.signature(model.forward).parameters:
        if not getattr(config, "is_encoder_decoder", False):
            raise ConfigError(
                f"posenc.hf: {type(model).__name__} ({model_type}) takes no position_ids: its attention computes "
                "its own position bias (Bloom and MPT use ALiBi, which reads no positions), so there is nothing "
                "to augment; use a model with rotary or learned positions (Llama, GPT-2, ...)"
            )
        raise ConfigError(
            f"posenc.hf: {type(model).__name__} ({model_type}) takes no position_ids (for BART-style seq2seq "
            "models use PositionAugmentedSeq2Seq or augment_model; T5's relative buckets cannot be augmented)"
        )
    if getattr(config, "alibi", False) is True:  # Falcon: keeps a rotary module, but attention uses ALiBi
        raise ConfigError(f"posenc.hf: {type(model).__name__} ({model_type}) uses ALiBi (config.alibi=True), "
                          "which reads no position_ids: an augmentation would do nothing")
    rotary = _rotary_modules(model)
    if rotary:
        dynamic = sorted(_rope_types(rotary) & DYNAMIC_ROPE_TYPES)
        if dynamic:
            raise ConfigError(
                f"posenc.hf: {model_type} uses rope_type {dynamic[0]!r}, whose rotary frequencies transformers "
                "recomputes from the largest position_id, so augmented positions would change the frequencies "
                "too; use rope_type default, linear, yarn or llama3"
            )
        return PositionInterface(FAMILIES["rotary"], None, model_type)
    max_positions = _max_positions(model)
    if max_positions is None:
        raise ConfigError(
            f"posenc.hf: {type(model).__name__} ({model_type}) has neither rotary positions nor "
            "max_position_embeddings, so its position_ids cannot be checked"
        )
    return PositionInterface(FAMILIES["learned"], max_positions, model_type)
