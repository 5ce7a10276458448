"""CTC acoustic model: strided 1-D convolutions with GLU → Transformer encoder → linear head.

Shape legend: B batch, T input (spectrogram) frames, F frequency bins, L output frames
(T downsampled by the product of the conv strides), D model width, C conv channels,
V characters (CTC blank = 0), S target characters.

Follows CAPE §5.2 (acoustic model of Likhomanenko et al. 2020 [30]: conv front end with GLU,
Transformer layers, a linear layer, CTC loss), scaled down; the Transformer layers are the
translation models' :class:`Encoder` stack. Positions (CAPE §3 "Positional encoding for sound")
are one tensor per utterance, in the unit the configured methods read (no method names here):

* seconds of each output frame's centre for continuous methods (``sinusoidal``, ``cape``: with
  ``sinusoidal.scale = 30`` giving ω_k = 30·10000^(−2k/K));
* the integer frame index ``n`` for methods that read integers (``learned``, looked up as
  E(n mod N) with ``learned.wrap``, CAPE §5.2: abspos for long sequences) and for attention-level
  methods (``rpe``, Shaw et al. 2018: clipped distances between frame indices).

A continuous input method cannot be combined with an attention-level method (they would need
two position tensors). The frame index of an output frame is ``round((t − t_first) / (hop · Π
strides))`` with the *nominal* hop, so that with the padding-free batching of §5.2.2 (per-batch
hop) the index still follows time, as the seconds do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.config import require
from posenc.models.config import ModelConfig
from posenc.models.transformer import Encoder
from posenc.positions import PositionConfig, build_augmentation, registry
from posenc.positions.cape import CapeParams
from posenc.positions.learned import LearnedParams
from posenc.positions.shaw import ShawParams
from posenc.positions.sinusoidal import SinusoidalParams


def speech_positions(name: str = "cape") -> PositionConfig:
    """Speech defaults (CAPE §3, §5.2) for 10 ms hop × 4 downsampling (40 ms output frames):
    ω_k = 30·10000^(−2k/K); global shift ±60 s, local shift ±20 ms (half the frame spacing),
    λmax = 1.1; learned table of 40 frames (1.6 s); Shaw clipping at 32 frames (1.28 s).

    Args:
        name: the position setting's name (``cape``, ``ape``, ``abspos``, ``rpe``, ...).

    Returns:
        The position config with those defaults in every method's block.
    """
    return PositionConfig(
        name=name, sinusoidal=SinusoidalParams(scale=30.0), learned=LearnedParams(max_positions=40, wrap=True),
        shaw=ShawParams(k=32), cape=CapeParams(max_global_shift=60.0, max_local_shift=0.02, max_global_scaling=1.1),
    )


@dataclass
class CTCModelConfig:
    """The acoustic model of a speech run (its ``model`` section).

    Args:
        d_model: model width D, even.
        heads: attention heads (D divisible by them).
        layers: Transformer layers.
        d_ff: feed-forward hidden width.
        dropout: dropout of the Transformer layers.
        norm: layer-norm placement, ``pre`` or ``post``.
        conv_channels: channels C of the hidden conv layers.
        conv_kernel: conv kernel width, odd (frame centres stay on input frames).
        conv_strides: one stride per conv layer; their product is the downsampling.
        position: the position methods (:func:`speech_positions` by default).

    Raises:
        ConfigError: a value out of range, or a continuous input method with an attention method.
    """

    d_model: int = 96
    heads: int = 4
    layers: int = 3
    d_ff: int = 256
    dropout: float = 0.1
    norm: str = "pre"
    conv_channels: int = 96
    conv_kernel: int = 5
    conv_strides: list[int] = field(default_factory=lambda: [2, 2])
    position: PositionConfig = field(default_factory=speech_positions)

    def __post_init__(self) -> None:
        require(self.d_model > 0 and self.d_model % 2 == 0,
                f"model.d_model must be positive and even, got {self.d_model}")
        require(self.heads >= 1 and self.d_model % self.heads == 0,
                f"model.d_model {self.d_model} is not divisible by model.heads {self.heads}")
        require(self.layers >= 0 and self.d_ff >= 1 and self.conv_channels >= 1,
                "model.layers must be >= 0, model.d_ff and model.conv_channels >= 1")
        require(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), got {self.dropout}")
        require(self.norm in ("pre", "post"), f"model.norm must be 'pre' or 'post', got {self.norm!r}")
        require(self.conv_kernel >= 1 and self.conv_kernel % 2 == 1,
                f"model.conv_kernel must be odd (frame centres stay on input frames), got {self.conv_kernel}")
        require(len(self.conv_strides) >= 1 and all(s >= 1 for s in self.conv_strides),
                f"model.conv_strides must be a non-empty list of integers >= 1, got {self.conv_strides}")
        self.position.refuse_task_ids("a speech model")
        methods = self.position.methods
        require(methods.attention is None or self.frame_positions,
                f"model.position {self.position.name!r}: a continuous input method (seconds) cannot be combined "
                "with an attention method (frames)")

    @property
    def frame_positions(self) -> bool:
        """True: positions are integer frame indices; False: seconds (see the module docstring)."""
        methods = self.position.methods
        reads_integers = getattr(registry.INPUT[methods.input].builder, "integer_positions", False)
        reads_nothing = not registry.INPUT[methods.input].builder.uses_positions
        return bool(reads_integers or (methods.attention is not None and reads_nothing))

    def encoder_config(self) -> ModelConfig:
        """The encoder stack's config (no attention dropout, ReLU).

        Returns:
            A model config whose encoder stack is the acoustic model's Transformer.
        """
        return ModelConfig(
            encoder_layers=self.layers, decoder_layers=1, d_model=self.d_model, heads=self.heads, d_ff=self.d_ff,
            dropout=self.dropout, attention_dropout=0.0, activation="relu", norm=self.norm, position=self.position,
        )

    @property
    def downsample(self) -> int:
        """Input frames per output frame: the product of the conv strides."""
        return math.prod(self.conv_strides)


@dataclass
class CTCOutput:
    """The acoustic model's output.

    Args:
        log_probs: per-frame log-probabilities ``(B, L, V)``, float32.
        mask: ``(B, L)``, True at valid output frames.
        times: seconds of the output frame centres ``(B, L)``.
    """

    log_probs: Tensor
    mask: Tensor
    times: Tensor

    @property
    def lengths(self) -> Tensor:
        """Valid output frames per utterance ``(B,)``."""
        return self.mask.sum(-1)


class GLUFrontEnd(nn.Module):
    """Conv1d(C_in, 2·C_out, k, stride s, padding k//2) + GLU per layer; ``(B, T, F)`` → ``(B, L, D)``.

    With an odd kernel and padding k//2, output frame i of a layer is centred on its input frame
    s·i, so output frame i of the stack is centred on input frame (Π s)·i. Padded frames are
    zeroed after every layer so that a padded batch gives the same valid outputs as one utterance.

    Args:
        n_features: input features F per frame.
        cfg: the model config (channels, kernel, strides, D).
    """

    def __init__(self, n_features: int, cfg: CTCModelConfig) -> None:
        super().__init__()
        sizes = [n_features] + [cfg.conv_channels] * (len(cfg.conv_strides) - 1) + [cfg.d_model]
        self.convs = nn.ModuleList(
            nn.Conv1d(c_in, 2 * c_out, cfg.conv_kernel, stride=s, padding=cfg.conv_kernel // 2)
            for c_in, c_out, s in zip(sizes[:-1], sizes[1:], cfg.conv_strides)
        )
        self.strides = list(cfg.conv_strides)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Downsample and embed the spectrogram.

        Args:
            x: features ``(B, T, F)``.
            mask: ``(B, T)``, True at valid input frames.

        Returns:
            Frame embeddings ``(B, L, D)`` and their validity mask ``(B, L)``.
        """
        h = (x * mask[..., None]).transpose(1, 2)  # (B, F, T)
        for conv, s in zip(self.convs, self.strides):
            h = F.glu(conv(h), dim=1)
            mask = mask[:, ::s]  # valid length ⌈T/s⌉ = floor((T − 1)/s) + 1
            h = h * mask[:, None, :]
        return h.transpose(1, 2), mask


class CTCModel(nn.Module):
    """Acoustic model: conv front end, Transformer encoder, linear head.

    Args:
        cfg: the model config.
        n_features: input features F per frame.
        vocab_size: characters V, the CTC blank included.
        hop_seconds: the nominal input frame hop, which converts seconds to frame indices.

    Raises:
        ConfigError: no features, fewer than 2 characters or a hop that is not positive.
    """

    def __init__(self, cfg: CTCModelConfig, n_features: int, vocab_size: int, hop_seconds: float) -> None:
        super().__init__()
        require(n_features >= 1 and vocab_size >= 2 and hop_seconds > 0,
                "CTCModel: need n_features >= 1, vocab_size >= 2, hop_seconds > 0")
        self.cfg, self.spacing = cfg, hop_seconds * cfg.downsample
        self.frontend = GLUFrontEnd(n_features, cfg)
        self.encoder = Encoder(cfg.encoder_config())
        self.augment = build_augmentation(cfg.position)
        self.head = nn.Linear(cfg.d_model, vocab_size)

    def output_times(self, times: Tensor) -> Tensor:
        """Output frame centres: output frame i is centred on input frame (Π s)·i.

        Args:
            times: input frame centres ``(B, T)``, seconds.

        Returns:
            Output frame centres ``(B, L)``, seconds.
        """
        return times[:, :: self.cfg.downsample]

    def frame_index(self, times: Tensor) -> Tensor:
        """The nominal output frame index of each time.

        Args:
            times: output frame centres ``(B, L)``, seconds.

        Returns:
            Frame indices ``(B, L)``, integers as floats, 0 at each row's first frame.
        """
        return torch.round((times - times[:, :1]) / self.spacing)

    def positions(self, times: Tensor, mask: Tensor) -> Tensor:
        """Positions of the output frames: frame indices or seconds, augmented (CAPE in training;
        mean normalisation in eval) when the config has an augmentation.

        Args:
            times: output frame centres ``(B, L)``, seconds.
            mask: ``(B, L)``, True at valid frames.

        Returns:
            Float positions ``(B, L)``.
        """
        pos = self.frame_index(times) if self.cfg.frame_positions else times
        return self.augment(pos, mask)

    def forward(self, features: Tensor, times: Tensor, mask: Tensor) -> CTCOutput:
        """Per-frame character log-probabilities.

        Args:
            features: spectrogram features ``(B, T, F)``.
            times: input frame centres ``(B, T)``, seconds.
            mask: ``(B, T)``, True at valid input frames.

        Returns:
            Log-probabilities ``(B, L, V)`` with their mask and times.
        """
        x, out_mask = self.frontend(features, mask)  # (B, L, D)
        out_times = self.output_times(times)
        h = self.encoder(x, self.positions(out_times, out_mask), out_mask)  # (B, L, D)
        logits = self.head(h)
        return CTCOutput(torch.log_softmax(logits.float(), dim=-1), out_mask, out_times)


def ctc_loss(out: CTCOutput, targets: Tensor, target_lengths: Tensor, blank: int = 0) -> Tensor:
    """Mean CTC loss (per target character, then over the batch); infeasible rows count 0.

    Args:
        out: the model's output.
        targets: concatenated or padded character ids (``F.ctc_loss``'s ``targets``).
        target_lengths: characters per utterance ``(B,)``.
        blank: the blank id.

    Returns:
        The scalar loss.
    """
    return F.ctc_loss(
        out.log_probs.transpose(0, 1), targets, out.lengths, target_lengths,
        blank=blank, reduction="mean", zero_infinity=True,
    )


def greedy_decode(out: CTCOutput, blank: int = 0) -> list[list[int]]:
    """Best path: argmax per valid frame, merge repeats, drop blanks.

    Args:
        out: the model's output.
        blank: the blank id.

    Returns:
        Character ids per utterance.
    """
    best = out.log_probs.argmax(-1)  # (B, L)
    result: list[list[int]] = []
    for row, n in zip(best.tolist(), out.lengths.tolist()):
        ids, prev = [], None
        for tok in row[:n]:
            if tok != prev and tok != blank:
                ids.append(tok)
            prev = tok
        result.append(ids)
    return result
