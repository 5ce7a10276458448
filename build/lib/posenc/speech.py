"""CAPE speech experiment (CAPE §5.2, Fig. 5): CTC on FSDD digits, WER/CER by duration bucket.

Train on single digits and pairs (≤ ``data.max_train_duration`` s), evaluate on the official
test clips and on test clips concatenated to fixed durations (default 1, 2, 4, 8, 16 s), for
each position method in ``methods``. Writes ``results.csv`` and ``wer_by_duration.png``.

    python -m posenc.speech --config configs/speech/fsdd_small.yaml [key=value ...]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from posenc.config import load_config, require
from posenc.data import speech as sd
from posenc.errors import PosencError
from posenc.models.ctc import CTCModel, CTCModelConfig, ctc_loss, greedy_decode


# ----------------------------------------------------------------------------- config
@dataclass
class SpeechDataConfig:
    path: str = ""  # "" → $POSENC_FSDD, else ../shared/data/fsdd
    sample_rate: int = 8000
    window_ms: float = 25.0
    hop_ms: float = 10.0
    padding_free: bool = False
    max_train_words: int = 3
    surround_boundary: bool = True
    max_train_duration: float = 2.0
    gap_min: float = 0.1
    gap_max: float = 0.3
    noise_std: float = 0.002
    eval_durations: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    eval_count: int = 40
    eval_clips: bool = True
    limit: int = 0  # > 0: first N recordings of each split only (tests)
    seed: int = 1234

    def __post_init__(self) -> None:
        require(self.sample_rate > 0, f"data.sample_rate must be > 0, got {self.sample_rate}")
        require(0 < self.hop_ms <= self.window_ms, f"data.hop_ms must be in (0, window_ms], got {self.hop_ms}")
        require(self.max_train_words >= 1, f"data.max_train_words must be >= 1, got {self.max_train_words}")
        require(0.0 <= self.gap_min <= self.gap_max, f"data: need 0 <= gap_min <= gap_max, got {self.gap_min}, {self.gap_max}")
        require(self.max_train_duration > 0 and self.noise_std >= 0, "data.max_train_duration must be > 0 and data.noise_std >= 0")
        require(all(d > 0 for d in self.eval_durations), f"data.eval_durations must be > 0, got {self.eval_durations}")
        require(self.eval_count >= 1 and self.limit >= 0, "data.eval_count must be >= 1 and data.limit >= 0")

    @property
    def hop(self) -> float:
        """Hop in samples (may be fractional)."""
        return self.hop_ms * self.sample_rate / 1000

    @property
    def win(self) -> int:
        return sd.window_samples(self.window_ms, self.sample_rate)


@dataclass
class SpeechTrainConfig:
    steps: int = 600
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 60
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 0  # 0: leave torch's default
    log_every: int = 50
    eval_batch: int = 16

    def __post_init__(self) -> None:
        require(self.steps >= 1 and self.batch_size >= 1, "train.steps and train.batch_size must be >= 1")
        require(self.lr > 0 and self.warmup >= 0 and self.weight_decay >= 0, "train.lr must be > 0, train.warmup and weight_decay >= 0")
        require(self.grad_clip >= 0 and self.threads >= 0 and self.log_every >= 1 and self.eval_batch >= 1, "train: bad grad_clip/threads/log_every/eval_batch")


@dataclass
class SpeechConfig:
    data: SpeechDataConfig = field(default_factory=SpeechDataConfig)
    model: CTCModelConfig = field(default_factory=CTCModelConfig)
    train: SpeechTrainConfig = field(default_factory=SpeechTrainConfig)
    methods: list[str] = field(default_factory=list)  # run_experiment: one model per name
    out_dir: str = "runs/speech"
    task: str = "speech"  # lets `posenc experiment` pick this schema

    def __post_init__(self) -> None:
        require(self.task == "speech", f"task must be 'speech' for a SpeechConfig, got {self.task!r}")
        p = self.model.position
        half = self.data.hop_ms / 1000 * self.model.downsample / 2
        for name in [p.name, *self.methods]:
            if replace(p, name=name).methods.augment == "cape":  # validates the name, too
                # CAPE §5.2: local shift at most half the frame spacing, so frames keep their order.
                require(p.cape.max_local_shift <= half + 1e-12,
                        f"model.position.cape.max_local_shift {p.cape.max_local_shift} s exceeds half the output frame spacing ({half:g} s) and could reorder frames")


def with_method(cfg: SpeechConfig, method: str) -> SpeechConfig:
    """A copy of ``cfg`` whose model uses position method ``method`` (same params blocks)."""
    return replace(cfg, model=replace(cfg.model, position=replace(cfg.model.position, name=method)))


# ----------------------------------------------------------------------------- metrics
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


# ----------------------------------------------------------------------------- training
def build_model(cfg: SpeechConfig) -> CTCModel:
    d = cfg.data
    return CTCModel(cfg.model, d.win // 2 + 1, sd.CharVocab().size, d.hop_ms / 1000)


def training_utterance(pool: Sequence[sd.Clip], d: SpeechDataConfig, rng: np.random.Generator) -> sd.Utterance:
    """1..``max_train_words`` random clips (uniform count), dropping clips from the end until the
    utterance fits ``max_train_duration`` (one clip always stays); lead/trail noise
    ~ U(0, gap_max), inner gaps ~ U(gap_min, gap_max)."""
    clips = [pool[int(rng.integers(len(pool)))] for _ in range(int(rng.integers(1, d.max_train_words + 1)))]
    gaps = [float(rng.uniform(0, d.gap_max))] + [float(rng.uniform(d.gap_min, d.gap_max)) for _ in clips[1:]]
    trail = float(rng.uniform(0, d.gap_max))
    while len(clips) > 1 and sum(c.samples for c in clips) / d.sample_rate + sum(gaps) + trail > d.max_train_duration:
        clips, gaps = clips[:-1], gaps[:-1]
    return sd.compose(clips, gaps, trail, d.sample_rate, d.noise_std, rng)


def training_batches(pool: Sequence[sd.Clip], cfg: SpeechConfig, pool_batches: int = 8) -> Iterator[sd.SpeechBatch]:
    """Endless batches; ``pool_batches`` batches are drawn at a time, sorted by length and cut,
    so that a batch holds similar durations (less padding; hops close to nominal when padding-free)."""
    d, vocab = cfg.data, sd.CharVocab()
    rng = np.random.default_rng([cfg.train.seed, d.seed])
    bs = cfg.train.batch_size
    while True:
        utts = sorted((training_utterance(pool, d, rng) for _ in range(bs * pool_batches)), key=lambda u: u.wave.shape[0])
        for k in rng.permutation(pool_batches):
            yield sd.collate(utts[k * bs : (k + 1) * bs], vocab, d.sample_rate, d.hop, d.win, d.padding_free, d.surround_boundary)


def lr_at(step: int, t: SpeechTrainConfig) -> float:
    """Linear warmup to ``lr``, then cosine decay to 0.05·lr at the last step."""
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    frac = (step - t.warmup) / max(1, t.steps - t.warmup)
    return t.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))


@dataclass
class TrainResult:
    model: CTCModel
    losses: list[float]
    seconds: float


def train_ctc(cfg: SpeechConfig, data: sd.Fsdd | None = None, log: Any = print) -> TrainResult:
    """Train one CTC model for ``cfg.train.steps`` steps on FSDD train clips (CPU)."""
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    data = data or sd.load_fsdd(cfg.data.path, cfg.data.sample_rate, cfg.data.limit)
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    batches, losses, start = training_batches(data.train, cfg), [], time.perf_counter()
    model.train()
    for step in range(t.steps):
        batch = next(batches)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, t)
        loss = ctc_loss(model(batch.features, batch.times, batch.mask), batch.targets, batch.target_lengths)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if t.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        losses.append(loss.item())
        if log and (step + 1) % t.log_every == 0:
            log(f"[{cfg.model.position.name}] step {step + 1}/{t.steps} loss {np.mean(losses[-t.log_every:]):.3f} ({time.perf_counter() - start:.0f}s)")
    return TrainResult(model, losses, time.perf_counter() - start)


# ----------------------------------------------------------------------------- evaluation
def eval_sets(cfg: SpeechConfig, data: sd.Fsdd) -> dict[str, list[sd.Utterance]]:
    """Bucket name → utterances: ``clips`` (official test clips as recorded) and ``{d}s``."""
    d = cfg.data
    sets: dict[str, list[sd.Utterance]] = {}
    if d.eval_clips:
        sets["clips"] = [sd.Utterance(c.wave, c.text) for c in data.test]
    for dur in d.eval_durations:
        sets[f"{dur:g}s"] = sd.duration_set(data.test, dur, d.eval_count, d.sample_rate, (d.gap_min, d.gap_max), d.noise_std, d.seed)
    return sets


@torch.no_grad()
def transcribe(model: CTCModel, utts: Sequence[sd.Utterance], d: SpeechDataConfig, batch_size: int = 16) -> list[str]:
    """Greedy CTC transcripts (eval mode, padded batches in length order)."""
    vocab, was = sd.CharVocab(), model.training
    model.eval()
    order = sorted(range(len(utts)), key=lambda i: utts[i].wave.shape[0])
    hyps: dict[int, str] = {}
    for k in range(0, len(order), batch_size):
        idx = order[k : k + batch_size]
        b = sd.collate([utts[i] for i in idx], vocab, d.sample_rate, d.hop, d.win, padding_free=False)
        for i, ids in zip(idx, greedy_decode(model(b.features, b.times, b.mask))):
            hyps[i] = vocab.decode(ids)
    model.train(was)
    return [hyps[i] for i in range(len(utts))]


def evaluate_by_duration(model: CTCModel, cfg: SpeechConfig, sets: dict[str, list[sd.Utterance]],
                         method: str = "") -> list[dict[str, Any]]:
    """One row per bucket: method, bucket, mean duration (s), utterances, words, WER, CER (%)."""
    rows = []
    for name, utts in sets.items():
        hyps = transcribe(model, utts, cfg.data, cfg.train.eval_batch)
        refs = [u.text for u in utts]
        rows.append({
            "method": method or cfg.model.position.name, "bucket": name,
            "duration_s": round(float(np.mean([u.duration(cfg.data.sample_rate) for u in utts])), 3),
            "utterances": len(utts), "words": sum(len(r.split()) for r in refs),
            "wer": round(100 * wer(refs, hyps), 2), "cer": round(100 * cer(refs, hyps), 2),
        })
    return rows


# ----------------------------------------------------------------------------- outputs
def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot_wer(rows: Sequence[dict[str, Any]], path: Path, train_max: float | None = None) -> None:
    """WER vs duration (log x) per method, fixed-duration buckets only (CAPE Fig. 5 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = [(r["duration_s"], r["wer"]) for r in rows if r["method"] == method and r["bucket"] != "clips"]
        ax.plot(*zip(*pts), marker="o", label=method)
    if train_max:
        ax.axvline(train_max, color="grey", ls="--", lw=1, label="longest training")
    ax.set(xscale="log", xlabel="utterance duration (s)", ylabel="WER (%)", title="FSDD CTC: WER by duration")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_experiment(cfg: SpeechConfig, log: Any = print) -> list[dict[str, Any]]:
    """Train and evaluate one model per method (``cfg.methods``, or the configured position)."""
    data = sd.load_fsdd(cfg.data.path, cfg.data.sample_rate, cfg.data.limit)
    sets = eval_sets(cfg, data)
    out, rows = Path(cfg.out_dir), []
    for method in cfg.methods or [cfg.model.position.name]:
        mcfg = with_method(cfg, method)
        res = train_ctc(mcfg, data, log)
        t0 = time.perf_counter()
        new = evaluate_by_duration(res.model, mcfg, sets, method)
        for r in new:
            r.update(train_s=round(res.seconds, 1), final_loss=round(float(np.mean(res.losses[-20:])), 4),
                     params=sum(p.numel() for p in res.model.parameters()))
        rows += new
        log(f"[{method}] trained {res.seconds:.0f}s, eval {time.perf_counter() - t0:.0f}s: "
            + ", ".join(f"{r['bucket']} WER {r['wer']}" for r in new))
        write_csv(rows, out / "results.csv")
    plot_wer(rows, out / "wer_by_duration.png", cfg.data.max_train_duration)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m posenc.speech", description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="YAML config (configs/speech/*.yaml)")
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.steps=100")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(SpeechConfig, args.config, args.overrides)
        rows = run_experiment(cfg)
    except PosencError as err:
        print(f"error: {err}")
        return 2
    for r in rows:
        print(f"{r['method']:>12} {r['bucket']:>6} {r['duration_s']:6.2f}s WER {r['wer']:6.2f} CER {r['cer']:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
