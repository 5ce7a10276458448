"""fairseq 0.12 (fairseq-fixed) transformer peer worker (sinusoidal positions, post-LN)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

import torch
from common import serve, synthetic
from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel, base_architecture
from fairseq.sequence_generator import SequenceGenerator


class _Task:
    """The two attributes TransformerModel.build_model reads from a task."""

    def __init__(self, dictionary: Dictionary) -> None:
        self.source_dictionary = self.target_dictionary = dictionary


def _dictionary(size: int) -> Dictionary:
    """fairseq's specials are <s>=0, <pad>=1, </s>=2, <unk>=3; ids ≥ 4 are words, as in common."""
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def setup(cfg: dict[str, Any]) -> dict[str, Callable[[], int]]:
    args = argparse.Namespace(
        encoder_layers=cfg["layers"], decoder_layers=cfg["layers"], encoder_embed_dim=cfg["d_model"],
        decoder_embed_dim=cfg["d_model"], encoder_attention_heads=cfg["heads"], decoder_attention_heads=cfg["heads"],
        encoder_ffn_embed_dim=cfg["d_ff"], decoder_ffn_embed_dim=cfg["d_ff"], dropout=cfg["dropout"],
        activation_dropout=cfg["dropout"], share_all_embeddings=True, max_source_positions=4096,
        max_target_positions=4096)
    base_architecture(args)
    d = _dictionary(cfg["vocab"])
    model = TransformerModel.build_model(args, _Task(d))
    cfg["_params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt = synthetic(cfg, cfg["batch"], cfg["length"], 0)
    prev = tgt[:, :-1].clone()
    prev[:, 0] = d.eos()  # fairseq starts the target side with </s>
    src_len = torch.full((src.shape[0],), src.shape[1])
    dsrc, _ = synthetic(cfg, cfg["decode_batch"], cfg["decode_len"], 1)
    n = cfg["decode_len"]
    gen = SequenceGenerator([model], d, beam_size=cfg["beam"], max_len_a=0, max_len_b=n, min_len=n, len_penalty=0.6)
    sample = {"net_input": {"src_tokens": dsrc, "src_lengths": torch.full((dsrc.shape[0],), dsrc.shape[1])}}

    def train() -> int:
        model.train()
        logits, _ = model(src, src_len, prev)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return 2 * src.numel()

    @torch.no_grad()
    def beam() -> int:
        model.eval()
        out = gen.generate([model], sample)
        return sum(len(h[0]["tokens"]) - 1 for h in out)  # without the final </s>

    return {"train": train, "beam": beam}


if __name__ == "__main__":
    serve(setup)
