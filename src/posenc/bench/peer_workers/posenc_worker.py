"""posenc side of the peers comparison (run with the project's venv)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from common import BOS, EOS, serve, synthetic

from posenc.bench.runner import NoEos
from posenc.config import from_dict
from posenc.decoding import beam_search
from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.training import TrainConfig
from posenc.training.optimization import build_optimizer


def setup(cfg: dict[str, Any]) -> dict[str, Callable[[], int]]:
    pos = {"name": "rpe", "shaw": {"k": cfg["rpe_k"]}} if cfg["position"] == "rpe" else {"name": "ape"}
    mcfg = from_dict(ModelConfig, dict(encoder_layers=cfg["layers"], decoder_layers=cfg["layers"],
                                       d_model=cfg["d_model"], heads=cfg["heads"], d_ff=cfg["d_ff"],
                                       dropout=cfg["dropout"], vocab_size=cfg["vocab"], position=pos))
    model = Seq2SeqTransformer(mcfg, pad_id=0)
    cfg["_params"] = sum(p.numel() for p in model.parameters())
    # the optimizer posenc's Trainer builds (fused Adam where torch has it), same hyper-parameters as the peers
    opt = build_optimizer(list(model.parameters()), TrainConfig(lr=1e-4, betas=[0.9, 0.98], eps=1e-9),
                          torch.device("cpu"))
    src, tgt = synthetic(cfg, cfg["batch"], cfg["length"], 0)
    mask = torch.ones_like(src, dtype=torch.bool)
    dsrc, _ = synthetic(cfg, cfg["decode_batch"], cfg["decode_len"], 1)
    dmask = torch.ones_like(dsrc, dtype=torch.bool)

    def train() -> int:
        model.train()
        logits = model(src, mask, tgt[:, :-1], mask)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return 2 * src.numel()

    def beam() -> int:
        model.eval()
        out = beam_search(NoEos(model), dsrc, dmask, BOS, EOS, beam=cfg["beam"], max_len_a=1.0, max_len_b=0)
        return sum(len(h[0].tokens) for h in out)

    return {"train": train, "beam": beam}


if __name__ == "__main__":
    serve(setup)
