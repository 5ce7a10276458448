"""posenc's position methods in your own PyTorch model: SHAPE, CAPE, RoPE and ALiBi.

A tiny causal language model written in plain PyTorch takes its positions from ``posenc.positions``
(the drop-in API of docs/positions.md); the lines that use posenc are marked ``# posenc:``.

* SHAPE and CAPE are augmentations: samplers over the ``(B, L)`` positions tensor that move the
  positions in training (SHAPE: one integer shift per sequence; CAPE: a global shift, a jitter per
  token and a global scaling) and leave them as they are in eval. The model adds the sinusoidal
  table of those positions to its embeddings. CAPE runs without its mean normalisation here: a
  causal model cannot subtract the mean of positions it has not seen yet.
* RoPE and ALiBi are attention methods: a context built once per forward from the positions, and
  one hook per layer that rotates q and k (RoPE) or adds ``-m_h |i - j|`` to the scaled logits
  (ALiBi). Both see only distances, so a shift of every position changes nothing.

Each model trains for a few Adam steps on a toy next-token task (each row counts up from a random
start); the script prints the losses, the output shape and what the method does to the positions.

    PYTHONPATH=src python examples/drop_in_positions.py --steps 40
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.positions.alibi import AlibiParams, AlibiPosition
from posenc.positions.base import default_positions
from posenc.positions.cape import CapeAugmentation, CapeParams
from posenc.positions.rope import RopeParams, RotaryPosition
from posenc.positions.shape import ShapeAugmentation, ShapeParams
from posenc.positions.sinusoidal import sinusoidal_embedding

VOCAB, D, HEADS, LAYERS = 32, 64, 4, 2
METHODS = ("shape", "cape", "rope", "alibi")
MAX_SHIFT = 40  # SHAPE's K


class Layer(nn.Module):
    """A pre-LN causal self-attention layer whose attention takes a posenc hook and context."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: Tensor, hook: nn.Module | None, ctx: object) -> Tensor:
        b, length, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        mask = torch.full((length, length), float("-inf")).triu(1)  # causal, additive
        if hook is not None and hook.has_transform:
            q, k = hook.transform_q(q, ctx), hook.transform_k(k, ctx)  # posenc: RoPE rotates q and k
        if hook is not None and hook.has_bias:
            mask = mask + hook.bias(ctx)  # posenc: ALiBi's distance penalty, (B, H, L, L)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(y.transpose(1, 2).reshape(b, length, D))
        return x + self.ff(self.norm2(x))


class TinyLM(nn.Module):
    """Token embedding, ``LAYERS`` causal layers, tied output; positions from one posenc method."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        nn.init.normal_(self.embed.weight, std=D**-0.5)  # tied output: logits of unit scale at the start
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.augment = self.attention = None
        if method == "shape":  # posenc: an augmentation of absolute positions
            self.augment = ShapeAugmentation(ShapeParams(max_shift=MAX_SHIFT))
        elif method == "cape":
            self.augment = CapeAugmentation(CapeParams(max_global_shift=5.0, max_local_shift=0.5,
                                                       max_global_scaling=1.2, mean_normalize=False))
        elif method == "rope":  # posenc: an attention method, one hook per layer
            self.attention = RotaryPosition(D, RopeParams(), num_layers=LAYERS, num_heads=HEADS)
        elif method == "alibi":
            self.attention = AlibiPosition(D, AlibiParams(), num_layers=LAYERS, num_heads=HEADS, causal=True)
        else:
            raise ValueError(f"method {method!r} unknown (known: {', '.join(METHODS)})")

    def positions(self, tokens: Tensor) -> Tensor:
        """The positions the model reads: 0..L-1, moved by the augmentation in training."""
        mask = torch.ones_like(tokens, dtype=torch.bool)  # every row full length: no padding here
        positions = default_positions(mask)  # posenc: 0..L-1, float (B, L)
        return positions if self.augment is None else self.augment(positions, mask)  # posenc

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """Tokens ``(B, L)`` → next-token logits ``(B, L, VOCAB)``; ``positions`` overrides the model's own."""
        positions = self.positions(tokens) if positions is None else positions
        x = self.embed(tokens)
        if self.augment is not None:
            x = x + sinusoidal_embedding(positions, D)  # posenc: absolute positions in the input
        ctx = None if self.attention is None else self.attention.context(positions, positions)  # posenc
        for i, layer in enumerate(self.layers):
            x = layer(x, None if self.attention is None else self.attention.hook(i), ctx)  # posenc
        return x @ self.embed.weight.T


def count_batch(gen: torch.Generator, batch: int = 16, length: int = 12) -> Tensor:
    """Rows ``s, s+1, ...`` modulo VOCAB from a random start ``s``: ``(B, L)``."""
    start = torch.randint(0, VOCAB, (batch, 1), generator=gen)
    return (start + torch.arange(length)) % VOCAB


def train(model: TinyLM, steps: int, seed: int) -> list[float]:
    """``steps`` Adam updates of next-token cross entropy; the loss of each."""
    gen, losses = torch.Generator().manual_seed(seed), []
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        tokens = count_batch(gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def probe(model: TinyLM, seed: int) -> dict[str, object]:
    """What the method does with positions: training and eval positions, whether eval is
    deterministic, and whether shifting every position by 7 changes the eval logits."""
    tokens = count_batch(torch.Generator().manual_seed(seed + 1), batch=4)
    model.train()
    train_positions = model.positions(tokens)
    model.eval()
    eval_positions = model.positions(tokens)
    logits = model(tokens)
    shifted = model(tokens, eval_positions + 7)
    return {"shape": tuple(logits.shape), "train_positions": train_positions, "eval_positions": eval_positions,
            "deterministic": torch.equal(logits, model(tokens)),
            "shift_changes_logits": not torch.allclose(logits, shifted, atol=1e-4)}


def main(argv: list[str] | None = None) -> dict[str, dict[str, object]]:
    parser = argparse.ArgumentParser(description="SHAPE, CAPE, RoPE and ALiBi from posenc in a plain PyTorch LM.")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one suffices for a model this small)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {}
    for method in METHODS:
        torch.manual_seed(args.seed)
        model = TinyLM(method)
        losses = train(model, args.steps, args.seed)
        results[method] = {"losses": losses, **probe(model, args.seed)}
        report(method, results[method])
    return results


def report(method: str, r: dict[str, object]) -> None:
    """One line per method: losses, output shape, first row's positions in train and eval mode."""
    losses = r["losses"]
    row = lambda t: " ".join(f"{v:.1f}" for v in t[0, :4].tolist())  # noqa: E731
    print(f"{method:6s} loss {losses[0]:.2f} -> {losses[-1]:.2f}  logits {r['shape']}  "
          f"train positions {row(r['train_positions'])} ...  eval positions {row(r['eval_positions'])} ...  "
          f"shift by 7 changes the output: {'yes' if r['shift_changes_logits'] else 'no'}")


if __name__ == "__main__":
    main(sys.argv[1:])
