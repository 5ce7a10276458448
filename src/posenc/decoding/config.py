"""``DecodeConfig``: how a trained encoder–decoder is decoded (beam, length penalty, output length
bounds, batch budget): the ``decode`` section of a run config, read by ``posenc translate``, the
experiment's scoring and ``posenc export``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from posenc.config import require
from posenc.decoding.translate import MAX_BEAM


@dataclass
class DecodeConfig:
    """Beam search options (:func:`~posenc.decoding.translate.translate_file`)."""

    beam: int = 4
    length_penalty: float = 0.6  # Shaw et al. 2018 use α = 0.6
    max_len_a: float = 1.2
    max_len_b: int = 10
    batch_tokens: int = 4000

    def __post_init__(self) -> None:
        """Refuse what ``posenc translate`` would refuse later (so a run never stores it)."""
        require(1 <= self.beam <= MAX_BEAM, f"decode.beam must be in 1..{MAX_BEAM} (decoding memory grows with "
                f"batch x beam), got {self.beam}")
        require(0 <= self.length_penalty < math.inf,
                f"decode.length_penalty must be a finite number >= 0, got {self.length_penalty}")
        require(0 <= self.max_len_a < math.inf and 0 <= self.max_len_b < math.inf,
                f"decode.max_len_a/b must be finite numbers >= 0, got {self.max_len_a}, {self.max_len_b}")
        require(self.batch_tokens >= 1, f"decode.batch_tokens must be >= 1, got {self.batch_tokens}")
