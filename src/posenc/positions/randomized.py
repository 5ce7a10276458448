"""Randomized positional encodings (Ruoss et al. 2023, ACL, §3).

The positions of a length-l sequence are a sorted random subset of {0, …, N−1} (N = ``max_len`` ≥ l),
drawn uniformly without replacement (the reference code: ``jax.random.choice(arange(N), (l,),
replace=False)``, then ``sort``; position 0 is a candidate like any other). Each row of a
padded batch gets a subset of its own length l_b, in order over its real tokens (right or left
padding alike); pads keep their default positions.

Training: a fresh draw per sequence and per step from the global RNG (source and target
independently). Evaluation (``eval: sample``, the default, as published: the reference code samples
at test time too and has no training switch): the same rule, drawn from a dedicated
``torch.Generator`` seeded with ``eval_seed`` and re-seeded on every ``.eval()``, so an evaluation is
reproducible and never touches the global RNG. ``eval: sequential`` gives positions 0, …, l−1.

Incremental decoding cannot know the final length, so it reads the first steps of one draw of a
decoding horizon T (:meth:`RandomizedAugmentation.decode_positions`, ``(1, T)``, shared by the batch
as in the reference, which draws one subset per call for the whole batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.config import require
from posenc.errors import DataError
from posenc.positions.base import Augmentation
from posenc.positions.registry import register

EVAL_MODES = ("sample", "sequential")
#: Largest N: positions stay exact integers in float32 (2^24).
MAX_LEN = 2**24


@dataclass
class RandomizedParams:
    """Options of randomized positions (each field's meaning in the ``#:`` comment above it)."""

    #: $N \ge L$; a longer sequence raises `DataError`
    max_len: int = 2048
    #: `sample`: random ordered positions at eval (the paper); `sequential`: $0, \dots, l-1$
    eval: str = "sample"
    #: seed of the eval generator (reset on every `.eval()`)
    eval_seed: int = 0

    def __post_init__(self) -> None:
        ok = isinstance(self.max_len, int) and not isinstance(self.max_len, bool) and 1 <= self.max_len <= MAX_LEN
        require(ok, f"randomized.max_len must be an integer in [1, {MAX_LEN}], got {self.max_len!r}")
        require(self.eval in EVAL_MODES, f"randomized.eval must be one of {', '.join(EVAL_MODES)}, got {self.eval!r}")
        ok = isinstance(self.eval_seed, int) and not isinstance(self.eval_seed, bool) and 0 <= self.eval_seed < 2**63
        require(ok, f"randomized.eval_seed must be an integer in [0, 2^63), got {self.eval_seed!r}")

    @property
    def position_reach(self) -> int:
        """The largest position drawn (N − 1, reached with probability l/N per sequence)."""
        return self.max_len - 1

    @property
    def sampled_in_eval(self) -> bool:
        """True when evaluation draws random positions too (``eval: sample``)."""
        return self.eval == "sample"


def sorted_subsets(lengths: Tensor, width: int, n: int, generator: torch.Generator | None = None) -> Tensor:
    """Row b: a uniform random ``lengths[b]``-subset of {0..n−1}, sorted, then ``width − lengths[b]``
    slots of ``n`` (callers overwrite them).

    The ``l`` smallest of n i.i.d. uniform keys mark a uniform l-subset, for every l at once.

    Args:
        lengths: long subset sizes ``(B,)``, each ≤ ``width``.
        width: columns of the result (≤ n).
        n: the subsets are drawn from {0..n−1}.
        generator: draws the keys on its own device (CPU for eval: device-independent draws); None:
            the global RNG on ``lengths``' device.

    Returns:
        Float positions ``(B, width)`` on ``lengths``' device.
    """
    b = lengths.shape[0]
    device = generator.device if generator is not None else lengths.device
    keys = torch.rand(b, n, generator=generator, device=device).to(lengths.device)
    chosen = keys.argsort(-1)[:, :width]
    slot = torch.arange(width, device=lengths.device)
    chosen = torch.where(slot < lengths[:, None], chosen, torch.full_like(chosen, n))
    return chosen.sort(-1).values.float()


@register("augment", "randomized", RandomizedParams,
          paper="Ruoss et al. 2023",
          what="an ordered random subset of {0..N−1} as positions, in training and evaluation")
class RandomizedAugmentation(Augmentation):
    """Randomized positions: an ordered random subset of {0..N−1} per sequence, in training and (by
    default) in evaluation, from a seeded eval generator.

    Args:
        params: the method's options.
    """

    integer_valued = True  # an ordered subset of {0..N−1}

    def __init__(self, params: RandomizedParams, **_: Any) -> None:
        super().__init__()
        self.params = params
        self.generator = torch.Generator().manual_seed(params.eval_seed)
        #: Incremental decoding must ask :meth:`decode_positions` (eval positions depend on the horizon).
        self.needs_decode_horizon = self.samples_in_eval = params.sampled_in_eval

    def train(self, mode: bool = True) -> RandomizedAugmentation:
        """Switch training/eval mode; entering eval re-seeds the eval generator, so every evaluation
        draws the same positions.

        Args:
            mode: True for training, False for eval.

        Returns:
            The module itself.
        """
        if not mode:
            self.generator.manual_seed(self.params.eval_seed)
        return super().train(mode)

    def _sample(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Sorted random positions for the real tokens of each row ``(B, L)``; pads keep theirs."""
        n, width = self.params.max_len, positions.shape[1]
        real = mask.bool()
        lengths = real.sum(-1)
        if width > n:  # legal only when the columns past n are padding (a batch bucketed for capture)
            if torch.compiler.is_compiling():
                torch._assert_async((lengths <= n).all(), f"a sequence exceeds randomized.max_len {n}")
            elif int(lengths.max()) > n:
                raise DataError(f"sequence length {int(lengths.max())} exceeds randomized.max_len {n}")
        cols = min(width, n)
        drawn = sorted_subsets(lengths, cols, n, None if self.training else self.generator)
        drawn = torch.nn.functional.pad(drawn, (0, width - cols), value=float(n))
        rank = (real.long().cumsum(-1) - 1).clamp(0, cols - 1)  # k-th real token gets the k-th drawn position
        return torch.where(real, drawn.gather(1, rank).to(positions.dtype), positions)

    def forward(self, positions: Tensor, mask: Tensor) -> Tensor:
        """Random ordered positions for the real tokens of each row (training, and eval with
        ``eval: sample``); pads keep theirs. ``eval: sequential`` leaves eval positions unchanged.

        Args:
            positions: float positions ``(B, L)``.
            mask: ``(B, L)``, True at real tokens.

        Returns:
            The positions ``(B, L)``.

        Raises:
            DataError: a sequence longer than N (``max_len``).
        """
        if not self.training and not self.params.sampled_in_eval:
            return positions
        return self._sample(positions, mask)

    def pair(self, src_pos: Tensor, src_mask: Tensor, tgt_pos: Tensor, tgt_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Source and target positions drawn independently, as :meth:`forward` draws them.

        Args:
            src_pos: float source positions ``(B, Ls)``.
            src_mask: ``(B, Ls)``, True at real source tokens.
            tgt_pos: float target positions ``(B, Lt)``.
            tgt_mask: ``(B, Lt)``, True at real target tokens.

        Returns:
            The source ``(B, Ls)`` and target ``(B, Lt)`` positions.
        """
        return self.forward(src_pos, src_mask), self.forward(tgt_pos, tgt_mask)

    def eval_target(self, tgt_pos: Tensor, mask: Tensor | None = None) -> Tensor:
        """Eval positions of a whole causal target (a full teacher-forced pass): each row draws as many
        positions as it has real tokens.

        Args:
            tgt_pos: float target positions ``(B, T)``.
            mask: ``(B, T)``, True at real tokens; None: every token is real.

        Returns:
            The positions ``(B, T)``.
        """
        return self.forward(tgt_pos, torch.ones_like(tgt_pos, dtype=torch.bool) if mask is None else mask)

    def decode_positions(self, horizon: int, device: torch.device | str) -> Tensor:
        """Eval positions of target steps 0..horizon−1: one sorted draw of ``horizon`` positions, read
        one step at a time (a finished hypothesis uses a prefix of it); steps past N get N, N+1, ….

        Args:
            horizon: how many target steps.
            device: where the positions are returned.

        Returns:
            Float positions ``(1, horizon)``.
        """
        if not self.params.sampled_in_eval:
            return torch.arange(horizon, device=device, dtype=torch.float32)[None]
        n = self.params.max_len
        drawn = sorted_subsets(torch.tensor([min(horizon, n)]), min(horizon, n), n, self.generator)
        beyond = torch.arange(n, max(horizon, n), dtype=drawn.dtype)[None]  # steps past N: N, N+1, … (never trained)
        return torch.cat((drawn, beyond[:, : horizon - drawn.shape[1]]), 1).to(device)
