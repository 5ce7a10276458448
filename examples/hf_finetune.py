"""Fine-tune tiny, randomly initialised Hugging Face models with posenc's position augmentations.

No download: a tiny LlamaConfig (rotary positions), a tiny GPT2Config (learned positions) and a
tiny BartConfig (seq2seq, learned positions inside encoder and decoder) are built from scratch and
trained for a few steps on integer tokens of a toy counting task (each row counts up from a random
start, modulo the vocabulary), with SHAPE (all three) and CAPE (Llama only: learned tables cannot
take real-valued positions).
BART's target continues the count of its source.
Batches alternate right and left padding to exercise the attention mask. Prints the losses.
Needs transformers (``pip install posenc[hf]``).

    PYTHONPATH=src python examples/hf_finetune.py --steps 30
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn

from posenc.hf import augment_model

VOCAB, PAD = 32, 0


def tiny_llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=PAD, bos_token_id=None, eos_token_id=None)
    return LlamaForCausalLM(cfg)


def tiny_gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     pad_token_id=PAD, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg)


def tiny_bart() -> nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                     pad_token_id=PAD, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return BartForConditionalGeneration(cfg)


def count_batch(batch: int, gen: torch.Generator, left_pad: bool) -> dict[str, Tensor]:
    """Rows ``s, s+1, ...`` (tokens 1..V−1) of random length, padded to the longest: ids, mask,
    labels, each ``(B, L)``."""
    rows = []
    for n in torch.randint(4, 16, (batch,), generator=gen).tolist():
        start = int(torch.randint(0, VOCAB - 1, (1,), generator=gen))
        rows.append((start + torch.arange(n)) % (VOCAB - 1) + 1)
    width = max(len(r) for r in rows)
    ids = torch.full((batch, width), PAD)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r if left_pad else ids[i, width - len(r):]
        ids[i, : len(r)] = ids[i, : len(r)] if left_pad else r
    mask = (ids != PAD).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def continue_batch(batch: int, gen: torch.Generator, left_pad: bool) -> dict[str, Tensor]:
    """Seq2seq: source ``s..s+n−1``, target the next 4 counts ``s+n..s+n+3``; (B, S) and (B, 4)."""
    src = count_batch(batch, gen, left_pad)
    end = src["attention_mask"].shape[1] if left_pad else src["attention_mask"].sum(1, keepdim=True)
    last = src["input_ids"].gather(1, torch.as_tensor(end).expand(batch, 1) - 1)
    src["labels"] = (last - 1 + torch.arange(1, 5)) % (VOCAB - 1) + 1
    return src


Batches = Callable[[int, torch.Generator, bool], dict[str, Tensor]]


def finetune(model: nn.Module, batches: Batches, augment: str, steps: int, seed: int, **params: object) -> list[float]:
    """Train ``model`` wrapped with ``augment`` for ``steps`` Adam steps; the loss of each step."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    wrapped = augment_model(model, augment, **params).train()
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        loss = wrapped(**batches(8, gen, left_pad=bool(step % 2))).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


RUNS: dict[str, tuple[Callable[[], nn.Module], Batches, str, dict[str, object]]] = {
    "llama+shape": (tiny_llama, count_batch, "shape", {"max_shift": 100}),
    "llama+cape": (tiny_llama, count_batch, "cape",
                   {"max_global_shift": 5.0, "max_local_shift": 0.5, "max_global_scaling": 1.1}),
    "gpt2+shape": (tiny_gpt2, count_batch, "shape", {"max_shift": 40}),  # 40 + longest row (15) < 64 positions
    "bart+shape": (tiny_bart, continue_batch, "shape", {"max_shift": 40}),
}


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description="Fine-tune tiny HF models with SHAPE/CAPE positions.")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = {}
    for name, (build, batches, augment, params) in RUNS.items():
        torch.manual_seed(args.seed)
        losses = results[name] = finetune(build(), batches, augment, args.steps, args.seed, **params)
        print(f"{name:12s} loss {losses[0]:.3f} -> {losses[-1]:.3f}  ({' '.join(f'{x:.2f}' for x in losses)})")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
