"""Hugging Face transformers MarianMT (random init, sinusoidal positions, post-LN) peer worker."""

from __future__ import annotations

from typing import Any, Callable

import torch
from common import BOS, EOS, PAD, serve, synthetic
from transformers import MarianConfig, MarianMTModel


def setup(cfg: dict[str, Any]) -> dict[str, Callable[[], int]]:
    conf = MarianConfig(
        vocab_size=cfg["vocab"], d_model=cfg["d_model"], encoder_layers=cfg["layers"], decoder_layers=cfg["layers"],
        encoder_attention_heads=cfg["heads"], decoder_attention_heads=cfg["heads"], encoder_ffn_dim=cfg["d_ff"],
        decoder_ffn_dim=cfg["d_ff"], dropout=cfg["dropout"], attention_dropout=0.0,
        activation_dropout=cfg["dropout"],  # as posenc and OpenNMT-py: dropout after the FFN activation too
        activation_function="relu", max_position_embeddings=max(1024, cfg["length"] + 2), scale_embedding=True,
        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    )
    model = MarianMTModel(conf)
    cfg["_params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt = synthetic(cfg, cfg["batch"], cfg["length"], 0)
    mask = torch.ones_like(src)
    dsrc, _ = synthetic(cfg, cfg["decode_batch"], cfg["decode_len"], 1)
    dmask = torch.ones_like(dsrc)
    n = cfg["decode_len"]

    def train() -> int:
        model.train()
        out = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return 2 * src.numel()

    @torch.inference_mode()
    def beam() -> int:
        model.eval()
        # min = max new tokens: every method emits exactly decode_len tokens per sentence
        out = model.generate(input_ids=dsrc, attention_mask=dmask, num_beams=cfg["beam"], max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, early_stopping=False, length_penalty=0.6)
        return int(out.shape[0] * (out.shape[1] - 1))

    return {"train": train, "beam": beam}


if __name__ == "__main__":
    serve(setup)
