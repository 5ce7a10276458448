"""Free Spoken Digit Dataset (FSDD) for CTC speech recognition, and log-spectrogram features.

Shape legend: N samples, T feature frames, F frequency bins, B batch, S target characters.

* Files ``recordings/{digit}_{speaker}_{index}.wav`` (8 kHz mono); the official split puts
  index 0-4 in test and 5-49 in train. Transcripts are the digit words ("zero" .. "nine").
* Characters: CTC blank (id 0), space (1), ``a``-``z`` (2-27).
* Long utterances (CAPE §5.2 evaluates by duration bins, Fig. 5): clips are joined with short
  gaps of low-level Gaussian noise (a digital-zero gap would give ``log 0`` features), and the
  transcripts with spaces. :func:`compose_to_duration` fills an exact requested duration.
* Features: Hann-windowed power spectrum of frames of ``win`` samples every ``hop`` samples
  (``hop`` may be fractional, for the padding-free batching of CAPE §5.2.2: frame ``j`` starts
  at sample ``round(j·hop)``), ``log(power + 1e-8)``, then per-utterance mean/variance
  normalisation of every frequency bin. The centre of frame ``j`` is
  ``(start_j + win/2) / sample_rate`` seconds (sample ``k`` spans ``[k, k+1) / sample_rate``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import soundfile as sf
import torch
from torch import Tensor

from posenc.errors import DataError

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DEFAULT_FSDD = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "fsdd"
_NAME = re.compile(r"^(\d)_([A-Za-z0-9]+)_(\d+)\.wav$")
LOG_FLOOR = 1e-8


# ----------------------------------------------------------------------------- characters
class CharVocab:
    """CTC blank (0), space (1) and the 26 lower-case letters (2-27)."""

    chars = " abcdefghijklmnopqrstuvwxyz"

    def __init__(self) -> None:
        self.index = {c: i + 1 for i, c in enumerate(self.chars)}

    @property
    def size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> list[int]:
        bad = sorted({c for c in text if c not in self.index})
        if bad:
            raise DataError(f"transcript {text!r}: characters {''.join(bad)!r} are not in the vocabulary (a-z, space)")
        return [self.index[c] for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids → text; the blank and unknown ids are dropped, runs of spaces collapsed."""
        text = "".join(self.chars[i - 1] for i in ids if 1 <= i <= len(self.chars))
        return " ".join(text.split())


# ----------------------------------------------------------------------------- files
@dataclass(frozen=True)
class Clip:
    """One recording: ``wave (N,)`` float32 in [-1, 1] at ``sample_rate``."""

    wave: Tensor
    text: str
    digit: int
    speaker: str
    index: int
    path: Path

    @property
    def samples(self) -> int:
        return int(self.wave.shape[0])


def fsdd_root(path: str | os.PathLike[str] | None = None) -> Path:
    """The FSDD directory: ``path`` if given, else ``$POSENC_FSDD``, else ``../shared/data/fsdd``."""
    if path:
        return Path(path)
    env = os.environ.get("POSENC_FSDD")
    return Path(env) if env else DEFAULT_FSDD


#: How to get the Free Spoken Digit Dataset and point posenc at it (the one-line DataError's advice).
FSDD_HINT = ("clone https://github.com/Jakobovski/free-spoken-digit-dataset (its recordings/ folder), "
             "then set data.path or $POSENC_FSDD to that directory")


def check_fsdd(path: str | os.PathLike[str] | None = None) -> None:
    """Whether the FSDD recordings are at hand (``path`` resolved as :func:`fsdd_root` does), without
    reading any: a one-line DataError naming the missing directory and how to get it. The experiment
    runner calls it once per setting before any run starts."""
    list_recordings(fsdd_root(path))


def parse_name(path: Path) -> tuple[int, str, int]:
    """``{digit}_{speaker}_{index}.wav`` → (digit, speaker, index); DataError otherwise."""
    m = _NAME.match(path.name)
    if m is None:
        raise DataError(f"{path}: file name is not {{digit}}_{{speaker}}_{{index}}.wav")
    return int(m.group(1)), m.group(2), int(m.group(3))


def load_wave(path: Path, sample_rate: int = 8000) -> Tensor:
    """Read a mono WAV with soundfile → float32 ``(N,)``; DataError on any problem."""
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.SoundFileError, RuntimeError, OSError) as err:
        msg = " ".join(str(err).split())
        raise DataError(f"{path}: cannot read audio ({msg})") from None
    if sr != sample_rate:
        raise DataError(f"{path}: sample rate {sr} Hz, expected {sample_rate} Hz")
    if data.shape[1] != 1:
        raise DataError(f"{path}: {data.shape[1]} channels, expected mono")
    if data.shape[0] == 0:
        raise DataError(f"{path}: no audio samples")
    return torch.from_numpy(np.ascontiguousarray(data[:, 0]))


def list_recordings(root: Path) -> list[Path]:
    """Sorted ``*.wav`` files of ``root/recordings``; DataError when there are none."""
    rec = root / "recordings"
    if not rec.is_dir():
        raise DataError(f"FSDD recordings not found at {rec}: {FSDD_HINT}")
    files = sorted(rec.glob("*.wav"))
    if not files:
        raise DataError(f"{rec}: no .wav files")
    return files


FIRST_TRAIN_INDEX = 5  # official split: index 0-4 test, 5-49 train


def is_test(index: int) -> bool:
    """Official FSDD split: recordings 0-4 of every (digit, speaker) are the test set."""
    return index < FIRST_TRAIN_INDEX


def hold_out(clips: Sequence[Clip], per_pair: int) -> tuple[list[Clip], list[Clip]]:
    """Split training recordings into (kept, held out): held out are the ``per_pair`` lowest training
    indices (5 .. 4 + per_pair) of every (digit, speaker); both keep the order of ``clips``."""
    held = [c for c in clips if c.index < FIRST_TRAIN_INDEX + per_pair]
    return [c for c in clips if c.index >= FIRST_TRAIN_INDEX + per_pair], held


@dataclass
class Fsdd:
    train: list[Clip]
    test: list[Clip]


def load_fsdd(root: str | os.PathLike[str] | None = None, sample_rate: int = 8000, limit: int = 0) -> Fsdd:
    """Load every recording (or the first ``limit`` of each split, in file order) into memory."""
    train: list[Clip] = []
    test: list[Clip] = []
    for path in list_recordings(fsdd_root(root)):
        digit, speaker, index = parse_name(path)
        split = test if is_test(index) else train
        if limit and len(split) >= limit:
            continue
        split.append(Clip(load_wave(path, sample_rate), DIGIT_WORDS[digit], digit, speaker, index, path))
    if not train or not test:
        raise DataError(f"{fsdd_root(root)}: need both train (index >= 5) and test (index 0-4) recordings")
    return Fsdd(train, test)


# ----------------------------------------------------------------------------- composition
@dataclass
class Utterance:
    """Audio ``wave (N,)`` with its transcript (digit words joined by single spaces)."""

    wave: Tensor
    text: str

    def duration(self, sample_rate: int) -> float:
        return self.wave.shape[0] / sample_rate


def noise(n: int, std: float, rng: np.random.Generator) -> Tensor:
    """``(n,)`` Gaussian "silence" of standard deviation ``std`` (a dither floor)."""
    return torch.from_numpy(rng.normal(0.0, std, size=n).astype(np.float32))


def compose(clips: Sequence[Clip], gaps: Sequence[float], trail: float, sample_rate: int,
            noise_std: float, rng: np.random.Generator) -> Utterance:
    """``gap_0 clip_0 gap_1 clip_1 ... trail``: ``gaps[i]`` seconds of noise before clip ``i``."""
    if len(gaps) != len(clips) or not clips:
        raise DataError(f"compose: need one gap per clip, got {len(gaps)} gaps for {len(clips)} clips")
    parts: list[Tensor] = []
    for gap, clip in zip(gaps, clips):
        parts += [noise(round(gap * sample_rate), noise_std, rng), clip.wave]
    parts.append(noise(round(trail * sample_rate), noise_std, rng))
    return Utterance(torch.cat(parts), " ".join(c.text for c in clips))


def compose_to_duration(pool: Sequence[Clip], duration: float, sample_rate: int, gap: tuple[float, float],
                        noise_std: float, rng: np.random.Generator) -> Utterance:
    """An utterance of exactly ``round(duration·sample_rate)`` samples from random clips of ``pool``.

    Clips are appended (each after a gap ~ U(gap)) while one still fits; the rest is trailing
    noise. DataError when not even one clip fits.
    """
    total = round(duration * sample_rate)
    lengths = np.array([c.samples for c in pool])
    chosen: list[Clip] = []
    gaps: list[float] = []
    used = 0
    while True:
        g = float(rng.uniform(*gap))
        fits = np.flatnonzero(lengths <= total - used - round(g * sample_rate))
        if fits.size == 0:
            break
        clip = pool[int(rng.choice(fits))]
        chosen.append(clip)
        gaps.append(g)
        used += round(g * sample_rate) + clip.samples
    if not chosen:
        raise DataError(f"no clip fits in {duration} s (shortest clip {lengths.min() / sample_rate:.2f} s)")
    utt = compose(chosen, gaps, 0.0, sample_rate, noise_std, rng)
    pad = noise(total - utt.wave.shape[0], noise_std, rng)
    return Utterance(torch.cat((utt.wave, pad)), utt.text)


def duration_set(pool: Sequence[Clip], duration: float, count: int, sample_rate: int,
                 gap: tuple[float, float], noise_std: float, seed: int) -> list[Utterance]:
    """``count`` utterances of exactly ``duration`` seconds (deterministic for a seed)."""
    rng = np.random.default_rng([seed, round(duration * 1000)])
    return [compose_to_duration(pool, duration, sample_rate, gap, noise_std, rng) for _ in range(count)]


# ----------------------------------------------------------------------------- features
def window_samples(window_ms: float, sample_rate: int) -> int:
    return round(window_ms * sample_rate / 1000)


def num_frames(n_samples: int, hop: float, win: int) -> int:
    """Frames of ``win`` samples every ``hop`` samples fully inside the signal (at least 1)."""
    if n_samples <= win:
        return 1
    return 1 + math.floor((n_samples - win) / hop + 1e-9)


def frame_starts(n_frames: int, hop: float) -> Tensor:
    """First sample of every frame, ``round(j·hop)``, long ``(T,)``."""
    return torch.round(torch.arange(n_frames, dtype=torch.float64) * hop).long()


def frame_times(n_frames: int, hop: float, win: int, sample_rate: int) -> Tensor:
    """Centre time (s) of every frame, float64 ``(T,)``: ``(round(j·hop) + win/2) / sample_rate``."""
    return (frame_starts(n_frames, hop).double() + win / 2) / sample_rate


def log_spectrogram(wave: Tensor, hop: float, win: int, n_frames: int | None = None) -> Tensor:
    """``wave (N,)`` → log power spectrum ``(T, win//2 + 1)`` with a periodic Hann window.

    Equals ``log(|torch.stft(wave, win, hop, center=False)|² + 1e-8)`` for an integer hop; a
    fractional hop rounds each frame's start. Signals shorter than a window are zero-padded.
    """
    if wave.shape[0] < win:
        wave = torch.nn.functional.pad(wave, (0, win - wave.shape[0]))
    t = num_frames(wave.shape[0], hop, win) if n_frames is None else n_frames
    starts = frame_starts(t, hop)
    if int(starts[-1]) + win > wave.shape[0]:
        raise DataError(f"{t} frames of hop {hop:.3f} need {int(starts[-1]) + win} samples, signal has {wave.shape[0]}")
    frames = wave[starts[:, None] + torch.arange(win)]  # (T, win)
    spec = torch.fft.rfft(frames * torch.hann_window(win, dtype=wave.dtype), dim=-1)
    return torch.log(spec.real.square() + spec.imag.square() + LOG_FLOOR)


def normalize(feats: Tensor) -> Tensor:
    """Per-utterance mean/variance normalisation of every bin over time: ``(T, F)`` → ``(T, F)``."""
    mean = feats.mean(0, keepdim=True)
    std = feats.std(0, unbiased=False, keepdim=True)
    return (feats - mean) / (std + 1e-5)


@dataclass
class SpeechBatch:
    """Padded batch: ``features (B, T, F)``, ``times (B, T)`` seconds, ``mask (B, T)`` (True = real
    frame), ``targets (B, S)`` char ids (0-padded), ``target_lengths (B,)``, ``durations (B,)`` s."""

    features: Tensor
    times: Tensor
    mask: Tensor
    targets: Tensor
    target_lengths: Tensor
    texts: list[str]
    durations: Tensor

    def to(self, device: torch.device | str) -> SpeechBatch:
        move = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()}
        return SpeechBatch(**move)


def batch_hops(lengths: Sequence[int], hop: float, win: int, padding_free: bool) -> tuple[list[float], int | None]:
    """Per-utterance hops and a shared frame count.

    Padded batching: every hop is ``hop`` and frame counts differ (None). Padding-free (CAPE
    §5.2.2): the frame count is that of the *shortest* utterance at ``hop``, and every utterance
    gets the hop ``(N_b − win)/(T − 1) >= hop`` that yields exactly that many frames.
    Deviation: the hop is fractional (frame starts are rounded) instead of an integer STFT hop.
    """
    if not padding_free:
        return [hop] * len(lengths), None
    t = num_frames(min(lengths), hop, win)
    if t == 1:
        return [hop] * len(lengths), 1
    return [max(n - win, 0) / (t - 1) if n > win else hop for n in lengths], t


def collate(utts: Sequence[Utterance], vocab: CharVocab, sample_rate: int, hop: float, win: int,
            padding_free: bool = False, surround: bool = False) -> SpeechBatch:
    """Features, frame times and CTC targets of ``utts``; see :func:`batch_hops`.

    ``surround`` adds a word boundary (space) before and after every target, as letter-based
    CTC models in wav2letter do (CAPE §5.2 uses letters plus a word-boundary token); the
    leading/trailing silence of an utterance then has a label. Decoding strips it again.
    """
    hops, shared = batch_hops([u.wave.shape[0] for u in utts], hop, win, padding_free)
    feats = [normalize(log_spectrogram(u.wave, h, win, shared)) for u, h in zip(utts, hops)]
    times = [frame_times(f.shape[0], h, win, sample_rate) for f, h in zip(feats, hops)]
    b, t_max = len(utts), max(f.shape[0] for f in feats)
    features = feats[0].new_zeros(b, t_max, feats[0].shape[1])
    time_pad = torch.zeros(b, t_max, dtype=torch.float64)
    mask = torch.zeros(b, t_max, dtype=torch.bool)
    ids = [vocab.encode(f" {u.text} " if surround else u.text) for u in utts]
    targets = torch.zeros(b, max(1, max(len(i) for i in ids)), dtype=torch.long)
    for row, (f, tm, i) in enumerate(zip(feats, times, ids)):
        features[row, : f.shape[0]], time_pad[row, : f.shape[0]], mask[row, : f.shape[0]] = f, tm, True
        targets[row, : len(i)] = torch.tensor(i, dtype=torch.long)
    return SpeechBatch(
        features, time_pad.float(), mask, targets, torch.tensor([len(i) for i in ids]),
        [u.text for u in utts], torch.tensor([u.wave.shape[0] / sample_rate for u in utts]),
    )
