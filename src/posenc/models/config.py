"""``ModelConfig`` and named presets.

``transformer-base``/``-big`` follow Vaswani et al. (as used by SHAPE Table 6 and Shaw et al.);
``small``/``tiny`` train on a 2-core CPU. Explicit keys override the preset's values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from posenc.config import require
from posenc.errors import ConfigError
from posenc.positions.config import PositionConfig

PRESETS: dict[str, dict[str, Any]] = {
    "transformer-base": dict(encoder_layers=6, decoder_layers=6, d_model=512, heads=8, d_ff=2048, dropout=0.1),
    "transformer-big": dict(encoder_layers=6, decoder_layers=6, d_model=1024, heads=16, d_ff=4096, dropout=0.3),
    "transformer-small": dict(encoder_layers=3, decoder_layers=3, d_model=256, heads=4, d_ff=1024, dropout=0.1),
    "transformer-tiny": dict(encoder_layers=2, decoder_layers=2, d_model=64, heads=4, d_ff=128, dropout=0.1),
}


@dataclass(frozen=True)
class StackConfig:
    """One Transformer stack (encoder, decoder or decoder-only LM): all that
    :class:`~posenc.models.transformer.Stack` reads. Built by :meth:`ModelConfig.encoder_stack`,
    :meth:`ModelConfig.decoder_stack` and :meth:`~posenc.models.lm.LMConfig.stack`; the number of
    layers is ``num_layers`` here whatever the section calls it (``encoder_layers``, ``layers``).

    Args:
        num_layers: layers of the stack.
        d_model: model width D.
        heads: attention heads per layer.
        d_ff: hidden width of the feed-forward block.
        dropout: dropout of the residual branches and feed-forward block.
        attention_dropout: dropout of the attention weights.
        activation: feed-forward activation, ``relu`` or ``gelu``.
        norm: layer-norm placement, ``post`` or ``pre``.
        position: the position methods of the stack.
        causal: masked self-attention (decoder, LM): causal forms of attention methods.
        cross_attention: decoder layers (self-attention, cross-attention, feed-forward).
    """

    num_layers: int
    d_model: int
    heads: int
    d_ff: int
    dropout: float
    attention_dropout: float
    activation: str
    norm: str
    position: PositionConfig
    causal: bool = False  # masked self-attention (decoder, LM): causal forms of attention methods
    cross_attention: bool = False  # decoder layers (self-attention, cross-attention, feed-forward)


def stack_config(cfg: Any, num_layers: int, causal: bool = False, cross_attention: bool = False) -> StackConfig:
    """A stack's config from the shared layer fields of a model section.

    Args:
        cfg: a model section (``ModelConfig``, ``LMConfig``, ...) with ``d_model``, ``heads``, ``d_ff``,
            dropouts, ``activation``, ``norm`` and ``position``.
        num_layers: layers of the stack.
        causal: masked self-attention.
        cross_attention: decoder layers with cross-attention.

    Returns:
        The stack's config.
    """
    return StackConfig(num_layers, cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                       cfg.activation, cfg.norm, cfg.position, causal, cross_attention)


def check_layer_dims(cfg: Any, section: str) -> None:
    """Checks shared by the Transformer configs (seq2seq ``model``, decoder-only ``lm``): width,
    heads, dropouts, norm placement, activation and vocabulary size.

    Args:
        cfg: the section to check.
        section: its name in messages (``model``, ``lm``).

    Raises:
        ConfigError: one line naming the first bad field.
    """
    require(cfg.d_model > 0 and cfg.d_model % 2 == 0, f"{section}.d_model must be positive and even, got {cfg.d_model}")
    require(cfg.heads >= 1 and cfg.d_model % cfg.heads == 0,
            f"{section}.d_model {cfg.d_model} not divisible by heads {cfg.heads}")
    require(0.0 <= cfg.dropout < 1.0 and 0.0 <= cfg.attention_dropout < 1.0, f"{section}: dropout must be in [0, 1)")
    require(cfg.norm in ("post", "pre"), f"{section}.norm must be 'post' or 'pre', got {cfg.norm!r}")
    require(cfg.activation in ("relu", "gelu"), f"{section}.activation must be relu or gelu, got {cfg.activation!r}")
    require(cfg.vocab_size >= 0, f"{section}.vocab_size must be >= 0, got {cfg.vocab_size}")


@dataclass
class ModelConfig:
    """The encoder-decoder Transformer of a translation run (the ``model`` section); a preset's values
    fill the keys the section does not give.

    Args:
        preset: a name of ``PRESETS`` (empty: none).
        encoder_layers: encoder layers (0: no encoder).
        decoder_layers: decoder layers (at least 1).
        d_model: model width D, even.
        heads: attention heads (D divisible by them).
        d_ff: hidden width of the feed-forward blocks.
        dropout: dropout of the residual branches, embeddings and feed-forward blocks.
        attention_dropout: dropout of the attention weights.
        activation: ``relu`` or ``gelu``.
        norm: layer-norm placement, ``post`` or ``pre``.
        share_embeddings: ``none``, ``decoder`` (decoder input and output) or ``all`` (encoder too).
        vocab_size: vocabulary size (0: set from the data's tokenizer).
        position: the position methods.

    Raises:
        ConfigError: a value out of range, or an augmentation that needs task-given position ids.
    """

    preset: str = ""
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "post"
    share_embeddings: str = "all"
    vocab_size: int = 0
    position: PositionConfig = field(default_factory=PositionConfig)

    @staticmethod
    def _preset_defaults(data: dict[str, Any]) -> dict[str, Any]:
        name = data.get("preset", "")
        if name and name not in PRESETS:
            raise ConfigError(f"model.preset: unknown preset {name!r} (known: {', '.join(PRESETS)})")
        return dict(PRESETS.get(name, {}))

    def __post_init__(self) -> None:
        require(self.encoder_layers >= 0 and self.decoder_layers >= 1,
                "model: need >= 0 encoder and >= 1 decoder layers")
        check_layer_dims(self, "model")
        require(self.share_embeddings in ("none", "decoder", "all"),
                f"model.share_embeddings must be none|decoder|all, got {self.share_embeddings!r}")
        self.position.refuse_task_ids("a translation model")

    def encoder_stack(self) -> StackConfig:
        """The encoder's stack config.

        Returns:
            ``encoder_layers`` bidirectional layers.
        """
        return stack_config(self, self.encoder_layers)

    def decoder_stack(self) -> StackConfig:
        """The decoder's stack config.

        Returns:
            ``decoder_layers`` causal layers with cross-attention.
        """
        return stack_config(self, self.decoder_layers, causal=True, cross_attention=True)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A config from a preset, with some keys overridden.

        Args:
            name: a name of ``PRESETS``.
            **overrides: keys of this section and their values (``position`` may be a dict).

        Returns:
            The checked config.

        Raises:
            ConfigError: an unknown preset or a bad value.
        """
        from posenc.config import from_dict

        return from_dict(cls, {"preset": name, **overrides})
