"""FSDD loading, split, composition to fixed durations, features and collation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from posenc.data import speech as sd
from posenc.errors import DataError

SR = 8000


def fsdd_dir(shared_data: Path) -> Path:
    root = shared_data / "fsdd"
    if not (root / "recordings").is_dir():
        pytest.skip(f"FSDD recordings not found at {root / 'recordings'}")
    return root


def fake_clip(n: int, text: str = "one", value: float = 0.5) -> sd.Clip:
    return sd.Clip(torch.full((n,), value), text, sd.DIGIT_WORDS.index(text), "x", 0, Path(f"{text}.wav"))


def test_reads_real_files_with_rate_and_transcript(shared_data: Path) -> None:
    root = fsdd_dir(shared_data)
    path = root / "recordings" / "7_george_3.wav"
    wave = sd.load_wave(path, SR)
    ref, ref_sr = sf.read(str(path), dtype="float32")
    assert ref_sr == SR and wave.dtype == torch.float32 and wave.ndim == 1
    assert torch.equal(wave, torch.from_numpy(ref))
    assert sd.parse_name(path) == (7, "george", 3)
    with pytest.raises(DataError, match="sample rate 8000 Hz, expected 16000"):
        sd.load_wave(path, 16000)


def test_official_split_and_transcripts(shared_data: Path) -> None:
    data = sd.load_fsdd(fsdd_dir(shared_data), SR, limit=60)
    assert len(data.train) == 60 and len(data.test) == 60
    assert all(c.index <= 4 for c in data.test) and all(c.index >= 5 for c in data.train)
    for c in data.train + data.test:
        assert c.text == sd.DIGIT_WORDS[int(c.path.name[0])]
        assert c.digit == int(c.path.name[0]) and c.speaker == c.path.name.split("_")[1]


def test_env_variable_and_missing_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSENC_FSDD", str(tmp_path / "elsewhere"))
    assert sd.fsdd_root() == tmp_path / "elsewhere"
    assert sd.fsdd_root(str(tmp_path)) == tmp_path
    with pytest.raises(DataError, match="FSDD recordings not found"):
        sd.load_fsdd()


def test_bad_files_are_data_errors(tmp_path: Path) -> None:
    (tmp_path / "recordings").mkdir()
    bad = tmp_path / "recordings" / "3_bob_1.wav"
    bad.write_bytes(b"RIFF this is not audio")
    with pytest.raises(DataError, match="3_bob_1.wav: cannot read audio") as err:
        sd.load_fsdd(tmp_path)
    assert "\n" not in str(err.value)
    stereo = tmp_path / "st.wav"
    sf.write(str(stereo), np.zeros((100, 2), dtype=np.float32), SR)
    with pytest.raises(DataError, match="2 channels, expected mono"):
        sd.load_wave(stereo, SR)
    with pytest.raises(DataError, match="is not"):
        sd.parse_name(Path("three.wav"))


def test_vocab_round_trip() -> None:
    v = sd.CharVocab()
    assert v.size == 28 and v.encode("one two") == [16, 15, 6, 1, 21, 24, 16]
    assert v.decode([0, 16, 15, 6, 1, 1, 0, 21, 24, 16]) == "one two"
    with pytest.raises(DataError, match="'7'"):
        v.encode("7 seven")


def test_compose_to_duration_exact_length_and_joined_text() -> None:
    pool = [fake_clip(2400, "one"), fake_clip(3200, "two"), fake_clip(4000, "six")]
    rng = np.random.default_rng(0)
    for dur in (1.0, 2.0, 4.0, 8.0):
        u = sd.compose_to_duration(pool, dur, SR, (0.1, 0.3), 0.0, rng)
        assert u.wave.shape[0] == round(dur * SR)
        words = u.text.split(" ")
        assert all(w in ("one", "two", "six") for w in words)
        # every clip is inside, in order, as a run of its constant value (noise_std 0 → zeros)
        assert int((u.wave != 0).sum()) == sum({"one": 2400, "two": 3200, "six": 4000}[w] for w in words)
        # gaps ≥ 0.1 s → at most ⌊dur / (0.1 + 0.3)⌋ clips; and the rest cannot fit another
        assert 1 <= len(words) <= dur / 0.4
    with pytest.raises(DataError, match="no clip fits"):
        sd.compose_to_duration(pool, 0.25, SR, (0.1, 0.3), 0.0, rng)


def test_compose_gaps_and_transcript() -> None:
    a, b = fake_clip(800, "one", 1.0), fake_clip(400, "two", 2.0)
    u = sd.compose([a, b], [0.1, 0.2], 0.05, SR, 0.0, np.random.default_rng(0))
    assert u.text == "one two" and u.wave.shape[0] == 800 + 800 + 1600 + 400 + 400
    assert torch.all(u.wave[800:1600] == 1.0) and torch.all(u.wave[3200:3600] == 2.0)
    assert torch.all(u.wave[:800] == 0) and torch.all(u.wave[1600:3200] == 0)


def test_log_spectrogram_matches_torch_stft_and_frame_times() -> None:
    wave = torch.randn(4321)
    feats = sd.log_spectrogram(wave, 80, 200)
    ref = torch.stft(wave, 200, 80, 200, torch.hann_window(200), center=False, return_complex=True)
    assert feats.shape == (1 + (4321 - 200) // 80, 101)
    assert torch.allclose(feats, torch.log(ref.abs().square() + sd.LOG_FLOOR).t(), atol=1e-4)
    times = sd.frame_times(3, 80, 200, SR)
    assert torch.allclose(times, torch.tensor([0.0125, 0.0225, 0.0325], dtype=torch.float64))


def test_normalize_per_utterance() -> None:
    x = torch.randn(50, 7) * 3 + 5
    y = sd.normalize(x)
    assert torch.allclose(y.mean(0), torch.zeros(7), atol=1e-5)
    assert torch.allclose(y.std(0, unbiased=False), torch.ones(7), atol=1e-3)


def test_collate_padding_and_padding_free() -> None:
    utts = [sd.Utterance(torch.randn(n), t) for n, t in ((8000, "one two"), (4000, "six"), (6000, "nine"))]
    b = sd.collate(utts, sd.CharVocab(), SR, 80, 200)
    assert b.features.shape == (3, 98, 101) and b.mask.sum(1).tolist() == [98, 48, 73]
    assert b.target_lengths.tolist() == [7, 3, 4] and b.targets[1, 3:].eq(0).all()
    assert torch.allclose(b.durations, torch.tensor([1.0, 0.5, 0.75]))
    free = sd.collate(utts, sd.CharVocab(), SR, 80, 200, padding_free=True)
    assert free.features.shape == (3, 48, 101) and bool(free.mask.all())
    # positions stay tied to time: the last frame of every row ends at its last sample
    last_end = free.times[:, -1] + 200 / 2 / SR
    assert torch.allclose(last_end, free.durations, atol=1e-6)
    hops = (free.times[:, 1] - free.times[:, 0]) * SR
    assert torch.all(hops >= 80 - 1e-3)  # stretched hops are never shorter than nominal
