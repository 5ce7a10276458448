"""OpenNMT-py 3.5.1 peer worker: its Transformer (sinusoidal, or Shaw RPE via max_relative_positions)."""

from __future__ import annotations

import os
from typing import Any, Callable

import pyonmttok
import torch
from common import serve, synthetic
from onmt.model_builder import build_base_model
from onmt.opts import _add_train_general_opts, distributed_opts, model_opts, translate_opts
from onmt.translate import GNMTGlobalScorer
from onmt.translate.translator import Translator
from onmt.utils.parse import ArgumentParser


def _model_opt(cfg: dict[str, Any]) -> Any:
    parser = ArgumentParser()
    model_opts(parser)
    _add_train_general_opts(parser)  # -dropout and -attention_dropout live there
    distributed_opts(parser)  # -parallel_mode
    args = ["-encoder_type", "transformer", "-decoder_type", "transformer", "-layers", str(cfg["layers"]),
            "-hidden_size", str(cfg["d_model"]), "-word_vec_size", str(cfg["d_model"]), "-heads", str(cfg["heads"]),
            "-transformer_ff", str(cfg["d_ff"]), "-dropout", str(cfg["dropout"]), "-attention_dropout", "0.0",
            "-share_embeddings", "-share_decoder_embeddings", "-position_encoding_type", "SinusoidalInterleaved"]
    if cfg["position"] == "rpe":
        args += ["-max_relative_positions", str(cfg["rpe_k"])]
    else:
        args += ["-position_encoding"]
    opt, _ = parser.parse_known_args(args)
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    return opt


def _vocab(size: int) -> Any:
    """Specials first (<blank> = 0, <unk> = 1, <s> = 2, </s> = 3) as in common.PAD/UNK/BOS/EOS."""
    tokens = ["<blank>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(size - 4)]
    return pyonmttok.build_vocab_from_tokens(tokens, maximum_size=0, minimum_frequency=1, special_tokens=tokens[:4])


def _translator(model: Any, vocabs: dict[str, Any], model_opt: Any, cfg: dict[str, Any]) -> Translator:
    parser = ArgumentParser()
    translate_opts(parser)
    n = str(cfg["decode_len"])
    opt, _ = parser.parse_known_args(["-model", "x", "-src", "x", "-beam_size", str(cfg["beam"]), "-min_length", n,
                                      "-max_length", n, "-n_best", "1", "-length_penalty", "wu", "-alpha", "0.6"])
    scorer = GNMTGlobalScorer.from_opt(opt)
    return Translator.from_opt(model, vocabs, opt, model_opt, global_scorer=scorer, out_file=open(os.devnull, "w"),
                               report_score=False)


def setup(cfg: dict[str, Any]) -> dict[str, Callable[[], int]]:
    model_opt = _model_opt(cfg)
    vocab = _vocab(cfg["vocab"])
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": "<s>"}
    model = build_base_model(model_opt, vocabs)
    for p in model.parameters():  # skip_init leaves the generator bias uninitialised
        torch.nn.init.normal_(p, std=0.02) if p.dim() == 1 else torch.nn.init.xavier_uniform_(p)
    cfg["_params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt = synthetic(cfg, cfg["batch"], cfg["length"], 0)
    src3, tgt3, src_len = src[:, :, None], tgt[:, :, None], torch.full((src.shape[0],), src.shape[1])
    dsrc, _ = synthetic(cfg, cfg["decode_batch"], cfg["decode_len"], 1)
    translator = _translator(model, vocabs, model_opt, cfg)
    dbatch = {"src": dsrc[:, :, None], "srclen": torch.full((dsrc.shape[0],), dsrc.shape[1]),
              "indices": torch.arange(dsrc.shape[0])}

    def train() -> int:
        model.train()
        dec_out, _ = model(src3, tgt3, src_len)  # the decoder reads tgt[:, :-1]
        logits = model.generator(dec_out)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return 2 * src.numel()

    def beam() -> int:
        model.eval()
        out = translator.translate_batch(dbatch, attn_debug=False)
        return sum(len(p[0]) for p in out["predictions"])

    return {"train": train, "beam": beam}


if __name__ == "__main__":
    serve(setup)
