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


@dataclass
class ModelConfig:
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
        require(self.encoder_layers >= 0 and self.decoder_layers >= 1, "model: need >= 0 encoder and >= 1 decoder layers")
        require(self.d_model > 0 and self.d_model % 2 == 0, f"model.d_model must be positive and even, got {self.d_model}")
        require(self.heads >= 1 and self.d_model % self.heads == 0, f"model.d_model {self.d_model} not divisible by heads {self.heads}")
        require(0.0 <= self.dropout < 1.0 and 0.0 <= self.attention_dropout < 1.0, "model: dropout must be in [0, 1)")
        require(self.norm in ("post", "pre"), f"model.norm must be 'post' or 'pre', got {self.norm!r}")
        require(self.activation in ("relu", "gelu"), f"model.activation must be relu or gelu, got {self.activation!r}")
        require(self.share_embeddings in ("none", "decoder", "all"), f"model.share_embeddings must be none|decoder|all, got {self.share_embeddings!r}")
        require(self.vocab_size >= 0, f"model.vocab_size must be >= 0, got {self.vocab_size}")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        from posenc.config import from_dict

        return from_dict(cls, {"preset": name, **overrides})
