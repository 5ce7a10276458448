"""GRU as the positional encoder (Neishi & Yoshinaga 2019, §4, Eq. 8): h_i = GRU(wv_i, h_{i-1}).

The GRU output replaces the embedding + positional-encoding layer, in the encoder and in the
decoder. It is uni-directional, so with right padding the outputs at real tokens do not depend
on padding, and in incremental decoding the hidden state is carried from step to step in
``state["h"]`` with shape ``(B, num_layers, D)`` (batch first, so beam search can reorder it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from posenc.config import require
from posenc.positions.base import InputPosition
from posenc.positions.registry import register


@dataclass
class GRUParams:
    num_layers: int = 1

    def __post_init__(self) -> None:
        require(self.num_layers >= 1, f"gru.num_layers must be >= 1, got {self.num_layers}")


@register("input", "gru", GRUParams)
class GRUPosition(InputPosition):
    def __init__(self, d_model: int, params: GRUParams, **_: Any) -> None:
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, num_layers=params.num_layers, batch_first=True)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        h0 = None
        if state is not None and "h" in state:
            h0 = state["h"].transpose(0, 1).contiguous()  # (num_layers, B, D)
        out, h = self.gru(x, h0)
        if state is not None:
            state["h"] = h.transpose(0, 1)
        return out
