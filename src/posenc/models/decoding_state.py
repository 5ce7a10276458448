"""Incremental-decoding state: the typed per-model states (:class:`Seq2SeqState`,
:class:`LMState`) and their step bookkeeping (:class:`Steps`, :class:`FixedSteps`, :class:`Unbatched`).
Beam search selects rows of any of them with :func:`posenc.decoding.search.reorder_state`.

Every tensor of a state has the batch on dim 0, except :class:`Unbatched` entries (a device step
counter, the positions of every step). The step bookkeeping is a :class:`Steps` (positions grown by
one column per step) or, for fixed shapes (CUDA graphs), a :class:`FixedSteps` (a device step
counter and preallocated positions).

Shape legend: B batch, S source length, T_max the decoding horizon, N rows (batch × beam),
H heads, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.models.attention import may_attend_mask
from posenc.models.layers import DecoderLayerCache, SelfCache
from posenc.positions import Augmentation

__all__ = ["FixedSteps", "LMState", "Seq2SeqState", "Steps", "Unbatched"]


class Unbatched:
    """A decoding-state entry without a batch dimension (a device step counter, the positions of
    every step): :func:`~posenc.decoding.search.reorder_state` leaves it alone; ``value`` is updated in place only.

    Args:
        value: the tensor.
    """

    def __init__(self, value: Tensor) -> None:
        self.value = value


@dataclass
class Steps:
    """Step bookkeeping of incremental decoding.

    Args:
        positions: the positions ``(B, t)`` of the steps so far.
        decode_positions: the eval positions ``(1, T_max)`` of every step (static states, and
            randomized positions sampled at eval: Ruoss et al. 2023 sample them for the whole
            horizon), or None.
        step: t, the steps taken.
    """

    positions: Tensor
    decode_positions: Unbatched | None = None
    step: int = 0

    def query(self, augment: Augmentation, rows: int, device: torch.device, given: Tensor | None = None) -> Tensor:
        """The position of this step.

        Args:
            augment: the model's augmentation (its eval transform).
            rows: B.
            device: where the positions are.
            given: the caller's own position ids ``(B,)`` for this step (e.g. position coupling), or None.

        Returns:
            ``(B, 1)``: the eval transform of ``given``, else column t of ``decode_positions``, else
            the eval transform of t.

        Raises:
            ConfigError: ``given`` ids with positions drawn for the whole horizon, or randomized
                positions sampled at eval without a horizon.
        """
        t = self.step
        if given is not None:
            if self.decode_positions is not None or augment.needs_decode_horizon:
                raise ConfigError("given position ids with positions drawn for the whole decoding horizon (randomized "
                                  "eval sampling, static state): not supported")
            return augment.eval_target(given.to(device=device, dtype=torch.float32).reshape(rows, 1))
        if self.decode_positions is not None:
            return self.decode_positions.value[:, t : t + 1].expand(rows, 1)
        if augment.needs_decode_horizon:
            raise ConfigError("randomized positions sampled at eval need a decoding horizon: "
                              "use init_static_state(..., max_len) or model.position.randomized.eval=sequential")
        return augment.eval_target(torch.full((rows, 1), float(t), device=device))

    def attend(self, augment: Augmentation, rows: int, device: torch.device,
               given: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """This step's positions and mask; appends the query position to ``positions``.

        Args:
            augment: the model's augmentation.
            rows: B.
            device: where the tensors are.
            given: this step's own position ids ``(B,)``, or None.

        Returns:
            Query positions ``(B, 1)``, key positions ``(B, t+1)`` (this step's appended) and the
            causal mask ``(B, 1, 1, t+1)``.
        """
        q_pos = self.query(augment, rows, device, given)
        self.positions = torch.cat((self.positions, q_pos), 1)  # (B, t+1)
        real = torch.ones(rows, self.step + 1, dtype=torch.bool, device=device)
        return q_pos, self.positions, may_attend_mask(real, 1, causal=True, offset=self.step)

    def advance(self) -> None:
        """Count one step taken."""
        self.step += 1


@dataclass
class FixedSteps(Steps):
    """:class:`Steps` with every shape independent of the step (capturable as one CUDA graph): the
    step index is the device counter ``counter (1,)`` and keys live in fixed
    :class:`~posenc.models.attention.KVCache` buffers ``(N, H, T_max, Dh)``; ``decode_positions``
    holds the positions of all T_max steps.

    Args:
        counter: the device step counter ``(1,)`` long.
    """

    counter: Unbatched = field(default_factory=lambda: Unbatched(torch.zeros(1, dtype=torch.long)))

    def attend(self, augment: Augmentation, rows: int, device: torch.device,
               given: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Query positions ``(N, 1)``, key positions ``(N, T_max)`` and the causal mask ``(N, 1, 1, T_max)``
        of the step ``t = counter``, all computed on the device (``given`` position ids: refused, the
        positions of a static state are fixed for every step).

        Key slots after ``t`` are masked; the last slot's position is replaced by the query's (it is
        masked unless it is the query itself), so hooks that transform the newest key by the last key
        position (RoPE) see the right one.

        Args:
            augment: the model's augmentation (not read: the positions are fixed).
            rows: N.
            device: where the tensors are (the counter's device is used).
            given: must be None.

        Returns:
            Query positions ``(N, 1)``, key positions ``(N, T_max)`` and the mask ``(N, 1, 1, T_max)``.

        Raises:
            ConfigError: ``given`` position ids.
        """
        if given is not None:
            raise ConfigError("given position ids in a static (CUDA-graph) decoding state: not supported")
        assert self.decode_positions is not None
        t, positions = self.counter.value, self.decode_positions.value  # (1,), (1, T_max)
        slots = torch.arange(positions.shape[1], device=t.device)
        q_pos = positions.index_select(1, t)  # (1, 1)
        k_pos = torch.where(slots == positions.shape[1] - 1, q_pos, positions)
        allowed = (slots <= t)[None, None, None, :]
        return q_pos.expand(rows, 1), k_pos.expand(rows, -1), allowed.expand(rows, 1, 1, -1)

    def advance(self) -> None:
        """Count one step taken, on the device counter and the host's."""
        self.counter.value.add_(1)
        self.step += 1


@dataclass
class Seq2SeqState:
    """Incremental decoding state of :class:`~posenc.models.seq2seq.Seq2SeqTransformer` (batch on
    dim 0 of every tensor): one cache per decoder layer, the source mask ``(B, S)``, the input
    position method's own state (the GRU's hidden state) and the step bookkeeping (:class:`Steps`,
    or :class:`FixedSteps` for a fixed-shape state).

    Args:
        layers: one cache per decoder layer.
        memory_mask: ``(B, S)``, True at real source tokens.
        steps: the step bookkeeping.
        input: the input position method's own state (the GRU's hidden state).
    """

    layers: list[DecoderLayerCache]
    memory_mask: Tensor
    steps: Steps
    input: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class LMState:
    """Incremental decoding state of :class:`~posenc.models.lm.DecoderLM` (batch on dim 0 of every
    tensor).

    Args:
        layers: one self-attention cache per layer.
        steps: the step bookkeeping.
        input: the input position method's own state.
    """

    layers: list[SelfCache]
    steps: Steps
    input: dict[str, Tensor] = field(default_factory=dict)
