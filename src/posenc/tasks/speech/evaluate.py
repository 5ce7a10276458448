"""WER/CER of a CTC model per utterance-duration bucket (CAPE §5.2, Fig. 5): the official FSDD
test clips and test clips concatenated to fixed durations."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from posenc.data import speech as sd
from posenc.errors import PosencError
from posenc.models.ctc import greedy_decode
from posenc.tasks.speech.config import SpeechConfig, SpeechDataConfig


def _jiwer() -> Any:
    try:
        import jiwer
    except ImportError:
        raise PosencError("WER/CER need the 'jiwer' package (pip install jiwer)") from None
    return jiwer


def wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Corpus word error rate: total word edits / total reference words (jiwer)."""
    return float(_jiwer().wer(list(refs), [h if h.strip() else "" for h in hyps]))


def cer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Corpus character error rate (spaces count as characters), via jiwer."""
    return float(_jiwer().cer(list(refs), list(hyps)))


def eval_sets(cfg: SpeechConfig, data: sd.Fsdd) -> dict[str, list[sd.Utterance]]:
    """Bucket name → utterances: ``clips`` (official test clips as recorded) and ``{d}s``."""
    d = cfg.data
    sets: dict[str, list[sd.Utterance]] = {}
    if d.eval_clips:
        sets["clips"] = [sd.Utterance(c.wave, c.text) for c in data.test]
    for dur in d.eval_durations:
        sets[f"{dur:g}s"] = sd.duration_set(data.test, dur, d.eval_count, d.sample_rate, (d.gap_min, d.gap_max),
                                            d.noise_std, d.seed)
    return sets


@torch.no_grad()
def transcribe(model: nn.Module, utts: Sequence[sd.Utterance], d: SpeechDataConfig, batch_size: int = 16) -> list[str]:
    """Greedy CTC transcripts (eval mode, padded batches in length order)."""
    vocab, was = sd.CharVocab(), model.training
    device = next(model.parameters()).device
    model.eval()
    order = sorted(range(len(utts)), key=lambda i: utts[i].wave.shape[0])
    hyps: dict[int, str] = {}
    for k in range(0, len(order), batch_size):
        idx = order[k: k + batch_size]
        b = sd.collate([utts[i] for i in idx], vocab, d.sample_rate, d.hop, d.win, padding_free=False).to(device)
        for i, ids in zip(idx, greedy_decode(model(b.features, b.times, b.mask))):
            hyps[i] = vocab.decode(ids)
    model.train(was)
    return [hyps[i] for i in range(len(utts))]


def evaluate_by_duration(model: nn.Module, cfg: SpeechConfig, sets: dict[str, list[sd.Utterance]],
                         method: str = "") -> list[dict[str, Any]]:
    """One row per bucket: method, bucket, mean duration (s), utterances, words, WER, CER (%)."""
    rows = []
    for name, utts in sets.items():
        hyps = transcribe(model, utts, cfg.data, cfg.data.eval_batch)
        refs = [u.text for u in utts]
        rows.append({
            "method": method or cfg.model.position.name, "bucket": name,
            "duration_s": round(float(np.mean([u.duration(cfg.data.sample_rate) for u in utts])), 3),
            "utterances": len(utts), "words": sum(len(r.split()) for r in refs),
            "wer": round(100 * wer(refs, hyps), 2), "cer": round(100 * cer(refs, hyps), 2),
        })
    return rows
