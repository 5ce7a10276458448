"""Model FLOPs per training step and MFU (model FLOPs utilisation).

Shape legend: S source length, T target length, D model width, V vocabulary.

Training FLOPs follow the usual accounting (Kaplan et al. 2020; PaLM appendix B): 6 FLOPs per
parameter per token (2 forward, 4 backward) for every weight matrix a token passes through, plus
the attention products q·k and α·v, 2·Lk·D FLOPs each per query and layer forward, ×3 for backward
(12·Lk·D per token and attention module). Causal masking is not discounted (as in PaLM), and Shaw's
O(k·D) per-query table products are ignored (≤ 2k+1 ≪ Lk columns).
"""

from __future__ import annotations

from torch import nn

#: Dense bf16 tensor-core peak FLOP/s by a substring of ``torch.cuda.get_device_name()``; first match
#: wins, so more specific names come first. Vendor datasheet figures without sparsity.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
]


def peak_bf16_flops(device_name: str) -> float | None:
    """Peak dense bf16 FLOP/s for a GPU name, or None when the name is not in the table."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def matmul_params(module: nn.Module) -> int:
    """Parameters of the weight matrices a token is multiplied by (Linear weights; no biases, norms, tables)."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def train_flops(model: nn.Module, batch: int, src_len: int, tgt_len: int) -> float:
    """FLOPs of one forward+backward step of a ``Seq2SeqTransformer`` on a (B, S)/(B, T) batch."""
    cfg = model.cfg
    d, vocab = cfg.d_model, cfg.vocab_size
    enc, dec = matmul_params(model.encoder), matmul_params(model.decoder)
    out = matmul_params(model.output) if model.output is not None else vocab * d  # tied projection
    src_tokens, tgt_tokens = batch * src_len, batch * tgt_len
    dense = 6.0 * (enc * src_tokens + (dec + out) * tgt_tokens)
    attn = 12.0 * d * (cfg.encoder_layers * src_len * src_tokens
                       + cfg.decoder_layers * (tgt_len + src_len) * tgt_tokens)
    return dense + attn


def mfu(flops_per_step: float, seconds_per_step: float, peak: float | None) -> float | None:
    """Achieved / peak FLOP/s, or None without a peak figure."""
    if peak is None or seconds_per_step <= 0:
        return None
    return flops_per_step / seconds_per_step / peak
