"""GRU as the positional encoder (Neishi & Yoshinaga 2019, §4, Eq. 8): h_i = GRU(wv_i, h_{i-1}).

Shape legend: B batch, L sequence length, D model width, N GRU layers.

The GRU output replaces the embedding + positional-encoding layer, in the encoder and in the
decoder. It is uni-directional, so with right padding the outputs at real tokens do not depend
on padding: the whole padded batch goes through **one** ``nn.GRU`` call (cuDNN on CUDA: one
input-projection GEMM for all steps, then the recurrence inside cuDNN; no Python loop over time,
no packing). Incremental decoding feeds one step at a time through the same call and carries the
hidden state in ``state["h"]`` with shape ``(B, N, D)`` (batch first, so beam search can reorder it).

Precision. Under CUDA autocast PyTorch runs every cuDNN RNN in **float16** whatever the autocast
dtype (its autocast rule for ``_cudnn_rnn`` casts the input and re-flattens fp16 copies of the
weights on every call), and bf16 autocast trains without loss scaling, so fp16 gradients of the
recurrence could underflow. By default (``gru.autocast: false``) the GRU therefore runs outside
autocast in the weights' dtype (float32; cuDNN may use TF32 tensor cores), on the flat weight
buffer ``nn.GRU`` keeps, and returns float32 like the sinusoidal layer. ``gru.autocast: true``
follows autocast (fp16 in cuDNN) for speed comparisons.

CUDA graph (``gru.cuda_graph: true``, off by default). The cuDNN recurrence launches a few
kernels per time step from the host; in training the full pass (forward and backward) can instead
be captured once per input shape with ``torch.cuda.make_graphed_callables`` and replayed as one
launch each way. Costs: a capture (and a device sync) per new (B, L), a private memory pool per
graph (at most ``MAX_GRAPHS`` shapes per module are kept), and the graph's output and input
gradient are static buffers, so one module may run one graphed pass per backward (as in training).
Meant for fixed or bucketed shapes (the benchmark); eval, no-grad and decoding run eagerly.

Overlap. The recurrence is sequential in L (L dependent steps of small (B, D)×(D, 3D) GEMMs), so
it is latency-bound on a GPU. The decoder's input layer does not depend on the encoder, so the
seq2seq model calls :meth:`GRUPosition.prefetch` on the target embeddings before running the
encoder: on CUDA the decoder GRU then runs on a high-priority side stream, overlapping the
encoder (and, since autograd runs a backward op on its forward op's stream, its backward overlaps
the encoder's backward). The following ``forward`` on the same tensor waits for and returns it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.config import require
from posenc.positions.base import InputPosition
from posenc.positions.registry import register

#: Captured CUDA graphs of the training full pass, per module: key (shape, ...) → graphed callable.
_GRAPHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Shapes kept per module (oldest evicted): each graph holds its own memory pool.
MAX_GRAPHS = 4

#: One high-priority side stream per CUDA device for prefetched GRU passes (created on first use).
_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The high-priority side stream of a CUDA device (created on first use, then reused).

    Args:
        device: a CUDA device (no index: the current one).

    Returns:
        The device's side stream.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(device=index, priority=-1)
    return _SIDE_STREAMS[index]


@dataclass
class GRUParams:
    """Options of the GRU input method (each field's meaning in the ``#:`` comment above it)."""

    #: stacked GRU layers per side (the paper uses one)
    num_layers: int = 1
    #: `false`: the GRU runs in float32 outside autocast; `true`: it follows CUDA autocast, which PyTorch runs
    #: as cuDNN **fp16** even under bf16 autocast
    autocast: bool = False
    #: CUDA-graph the training full pass (forward + backward) per input shape: one replay instead of per-step
    #: kernel launches; for fixed or bucketed shapes (one capture and memory pool per shape, at most 4 kept)
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        require(self.num_layers >= 1, f"gru.num_layers must be >= 1, got {self.num_layers}")
        require(isinstance(self.autocast, bool), f"gru.autocast must be true or false, got {self.autocast!r}")
        require(isinstance(self.cuda_graph, bool), f"gru.cuda_graph must be true or false, got {self.cuda_graph!r}")
        require(not (self.cuda_graph and self.autocast), "gru.cuda_graph needs gru.autocast: false")


class FullPass(nn.Module):
    """The training full pass ``x (B, L, D) → out (B, L, D)`` as a module, so that CUDA-graph
    capture (``torch.cuda.make_graphed_callables``) sees the GRU's parameters.

    Args:
        gru: the batch-first GRU it runs.
    """

    def __init__(self, gru: nn.GRU) -> None:
        super().__init__()
        self.gru = gru

    def forward(self, x: Tensor) -> Tensor:
        """The GRU over a whole sequence from a zero state.

        Args:
            x: embeddings ``(B, L, D)``.

        Returns:
            The outputs ``(B, L, D)``.
        """
        return self.gru(x)[0]


@register("input", "gru", GRUParams,
          paper="Neishi & Yoshinaga 2019", what="a GRU over the embeddings as positional encoder (RNN-Transformer)")
class GRUPosition(InputPosition):
    """A uni-directional GRU over the embeddings: its outputs replace embeddings + positions.

    Args:
        d_model: model width D (the GRU's input and hidden size).
        params: the method's options.
    """

    capturable = False
    capture_blocker = "torch.compile does not trace nn.GRU (a graph break; its own CUDA graph: gru.cuda_graph)"
    ct2_refusal = "an RNN over the embeddings"

    def __init__(self, d_model: int, params: GRUParams, **_: Any) -> None:
        super().__init__()
        self.params = params
        self.gru = nn.GRU(d_model, d_model, num_layers=params.num_layers, batch_first=True)
        self._pending: tuple[Tensor, Tensor, torch.cuda.Stream | None] | None = None

    def run(self, x: Tensor, h0: Tensor | None, full: bool = False) -> tuple[Tensor, Tensor | None]:
        """One GRU call, in the weights' dtype outside autocast unless ``autocast`` is set.

        Args:
            x: embeddings ``(B, L, D)``.
            h0: the initial hidden state ``(N, B, D)``, or None (zeros).
            full: a whole-sequence pass whose final state is not needed (may be CUDA-graphed).

        Returns:
            The outputs ``(B, L, D)`` and the final hidden state ``(N, B, D)`` (None from a graphed pass).
        """
        if self.params.autocast:
            return self.gru(x.contiguous(), h0)
        dtype = self.gru.weight_ih_l0.dtype
        with torch.autocast(x.device.type, enabled=False):
            x, h0 = x.to(dtype).contiguous(), None if h0 is None else h0.to(dtype)
            if full and self.params.cuda_graph and x.is_cuda and self.training and torch.is_grad_enabled():
                return self.graphed(x)(x), None
            return self.gru(x, h0)

    def graphed(self, x: Tensor) -> Any:
        """The CUDA-graphed full pass for ``x``'s shape (captured on first use; autocast is off here).

        Args:
            x: embeddings ``(B, L, D)`` on CUDA, in the weights' dtype.

        Returns:
            The graphed callable: ``x (B, L, D)`` → outputs ``(B, L, D)``.
        """
        key = (tuple(x.shape), x.dtype, x.device, x.requires_grad, self.gru.weight_ih_l0.data_ptr())
        graphs = _GRAPHS.setdefault(self, {})
        if key not in graphs:
            if len(graphs) >= MAX_GRAPHS:
                graphs.pop(next(iter(graphs)))
            sample = x.detach().clone().requires_grad_(x.requires_grad)
            graphs[key] = torch.cuda.make_graphed_callables(FullPass(self.gru), (sample,))
            if not getattr(self, "_fresh_grads", False):
                # the graph hands out its static gradient buffers; AccumulateGrad could keep one as
                # p.grad, which the next replay would overwrite (gradient accumulation): copy first
                for p in self.gru.parameters():
                    p.register_hook(torch.clone)
                self._fresh_grads = True
        return graphs[key]

    def prefetch(self, x: Tensor, positions: Tensor, mask: Tensor) -> None:
        """Start the full pass of ``x`` now; the next ``forward(x, ...)`` returns it.

        CUDA: on the side stream (after the current stream's pending work, which produced ``x``).
        Skipped while ``torch.compile`` traces (streams stay out of graphs; Dynamo leaves nn.GRU
        to eager by default, so the GRU is a graph break either way).

        Args:
            x: embeddings ``(B, L, D)``.
            positions: float positions ``(B, L)`` (not read: the GRU counts steps itself).
            mask: ``(B, L)`` (not read).
        """
        if torch.compiler.is_compiling():
            return
        if not x.is_cuda:
            self._pending = (x, self.run(x, None, full=True)[0], None)
            return
        side = side_stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            out = self.run(x, None, full=True)[0]
        x.record_stream(side)  # x's memory must outlive its use on the side stream
        self._pending = (x, out, side)

    def _collect(self, out: Tensor, side: torch.cuda.Stream | None) -> Tensor:
        """The prefetched output, made safe to use on the current stream."""
        if side is not None:
            current = torch.cuda.current_stream(out.device)
            current.wait_stream(side)
            out.record_stream(current)
        return out

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, state: dict | None = None) -> Tensor:
        """The GRU outputs at every step (the prefetched ones when :meth:`prefetch` ran on ``x``).

        Args:
            x: embeddings ``(B, L, D)`` (decoding: the new steps only).
            positions: float positions ``(B, L)`` (not read).
            mask: ``(B, L)`` (not read: right padding does not reach real tokens).
            state: incremental decoding's dict, carrying ``h`` ``(B, N, D)`` between calls; None for
                a full pass.

        Returns:
            The outputs ``(B, L, D)``.
        """
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is x and state is None:
            return self._collect(pending[1], pending[2])
        h0 = None
        if state is not None and "h" in state:
            h0 = state["h"].transpose(0, 1).contiguous()  # (N, B, D)
        out, h = self.run(x, h0, full=state is None)
        if state is not None:
            state["h"] = h.transpose(0, 1)
        return out
