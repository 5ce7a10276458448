"""A tiny decoder-only LM and the KV-cache check every LM position test shares."""

from __future__ import annotations

from typing import Any

import torch

from posenc.config import from_dict
from posenc.models.lm import DecoderLM, LMConfig

VOCAB = 30


def tiny_lm(position: dict[str, Any], vocab: int = VOCAB) -> DecoderLM:
    """A 2-layer, width-32 DecoderLM in eval mode with ``model.position`` = ``position``."""
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 32, "heads": 4, "d_ff": 64, "vocab_size": vocab,
                               "position": position})
    return DecoderLM(cfg).eval()


def assert_incremental_equals_full_pass(model: DecoderLM, batch: int = 3, length: int = 9) -> None:
    """Logits of one step at a time with the KV cache equal the full causal pass (to 1e-5)."""
    tokens = torch.randint(1, model.cfg.vocab_size, (batch, length))
    with torch.no_grad():
        full = model(tokens, torch.ones_like(tokens, dtype=torch.bool))  # (B, L, V)
        state = model.init_state(batch)
        steps = torch.stack([model.step(tokens[:, t], state) for t in range(length)], 1)
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)
