"""Speech task: config validation, WER/CER, training sampler, tiny training run through the one
Trainer, the experiment's CSV/PNG."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from posenc.config import from_dict, load_config
from posenc.data import speech as sd
from posenc.errors import ConfigError, DataError
from posenc.experiments.runner import run_experiment
from posenc.models.ctc import ctc_loss
from posenc.tasks.base import Task, run_task
from posenc.tasks.speech import (
    TASK,
    SpeechConfig,
    SpeechExperimentConfig,
    SpeechTask,
    build_model,
    cer,
    ctc_sums,
    eval_sets,
    evaluate_by_duration,
    training_utterance,
    wer,
)

SR = 8000
POS = {"sinusoidal": {"scale": 30.0}, "learned": {"max_positions": 16}, "shaw": {"k": 4},
       "cape": {"max_global_shift": 60.0, "max_local_shift": 0.02, "max_global_scaling": 1.1}}
TINY_MODEL = {"d_model": 32, "heads": 4, "layers": 1, "d_ff": 64, "dropout": 0.0, "conv_channels": 32, "conv_kernel": 3}


def tone(digit: int, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A synthetic "word": two tones specific to the digit, with a little noise."""
    t = np.arange(int(seconds * SR)) / SR
    wave = 0.3 * np.sin(2 * np.pi * (300 + 250 * digit) * t) + 0.2 * np.sin(2 * np.pi * (3500 - 250 * digit) * t)
    return (wave + rng.normal(0, 0.01, t.shape)).astype(np.float32)


def synthetic_fsdd(per_digit_train: int = 4) -> sd.Fsdd:
    rng = np.random.default_rng(0)

    def clip(d: int, i: int) -> sd.Clip:
        w = torch.from_numpy(tone(d, rng.uniform(0.3, 0.5), rng))
        return sd.Clip(w, sd.DIGIT_WORDS[d], d, "synth", i, Path(f"{d}_synth_{i}.wav"))

    return sd.Fsdd([clip(d, 5 + i) for d in range(10) for i in range(per_digit_train)], [clip(d, 0) for d in range(10)])


def config(**over) -> SpeechConfig:
    data = {"eval_durations": [1.0, 2.0], "eval_count": 3, "batch_size": 8, **over.pop("data", {})}
    model = {**TINY_MODEL, "position": {**POS, "name": over.pop("method", "cape")}}
    train = {"max_steps": 40, "lr": 3e-3, "warmup": 5, "log_every": 1, "device": "cpu", **over.pop("train", {})}
    return from_dict(SpeechConfig, {"data": data, "model": model, "train": train, **over})


def test_wer_cer_on_hand_made_strings() -> None:
    refs, hyps = ["one two three", "four"], ["one too three", ""]
    assert wer(refs, hyps) == pytest.approx(2 / 4)  # 1 substitution + 1 deletion over 4 words
    assert cer(refs, hyps) == pytest.approx(5 / 17)  # w→o, then 4 deleted letters over 17 chars
    assert wer(["six six"], ["six six six"]) == pytest.approx(1 / 2)
    assert wer(["nine"], ["nine"]) == 0.0 and cer(["nine"], ["nie"]) == pytest.approx(1 / 4)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="max_local_shift 0.05 s exceeds half the output frame spacing"):
        from_dict(SpeechConfig, {"model": {"position": {"name": "cape", "cape": {"max_local_shift": 0.05}}}})
    exp = from_dict(SpeechExperimentConfig, {
        "base": {"model": {"position": {"name": "nopos", "cape": {"max_local_shift": 0.05}}}},
        "methods": {"nopos": {}, "cape": {"model.position.name": "cape"}, "wavelet": {"model.position.name": "wavelet"}}})
    cells = TASK.experiment(exp).cells()
    TASK.experiment(exp).run_config(cells[0])
    with pytest.raises(ConfigError, match="cape.max_local_shift"):  # also when cape is only in a method
        TASK.experiment(exp).run_config(cells[1])
    with pytest.raises(ConfigError, match="unknown position method"):
        TASK.experiment(exp).run_config(cells[2])
    with pytest.raises(ConfigError, match="model: unknown option for SpeechExperimentConfig"):
        from_dict(SpeechExperimentConfig, {"methods": ["cape"], "model": {"d_model": 16}})
    with pytest.raises(ConfigError, match="hop_ms"):
        from_dict(SpeechConfig, {"data": {"hop_ms": 30.0}})


def test_training_utterances_respect_duration_and_word_limits() -> None:
    data, cfg = synthetic_fsdd(), config(data={"max_train_duration": 1.0, "max_train_words": 3})
    rng = np.random.default_rng(1)
    counts = set()
    for _ in range(200):
        u = training_utterance(data.train, cfg.data, rng)
        words = u.text.split(" ")
        counts.add(len(words))
        assert len(words) == 1 or u.duration(SR) <= 1.0 + 1e-9
        assert all(w in sd.DIGIT_WORDS for w in words)
    assert counts == {1, 2}  # 3 clips (≥ 0.3 s each, 2 gaps ≥ 0.1 s) never fit 1 s; 2 clips can


def test_ctc_sums_over_the_batch_equal_the_mean_loss_times_b() -> None:
    data, cfg = synthetic_fsdd(), config()
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    batch = SpeechTask(data).train_batches(cfg, 0, 0, 1)[0]
    with torch.no_grad():
        out = model(batch.features, batch.times, batch.mask)
        mean = float(ctc_loss(out, batch.targets, batch.target_lengths))
        summed = float(ctc_sums(out, batch.targets, batch.target_lengths))
    assert summed == pytest.approx(mean * batch.targets.shape[0], rel=1e-5)


def test_epochs_are_pure_functions_of_their_number() -> None:
    task, cfg = SpeechTask(synthetic_fsdd()), config()
    a, b, other = (task.train_batches(cfg, e, 0, 1) for e in (3, 3, 4))
    assert len(a) == cfg.data.pool_batches and [x.texts for x in a] == [x.texts for x in b]
    assert all(torch.equal(x.features, y.features) for x, y in zip(a, b))
    assert [x.texts for x in a] != [x.texts for x in other]
    halves = [task.train_batches(cfg, 3, r, 2) for r in (0, 1)]
    assert sorted(t for h in halves for x in h for t in x.texts) == sorted(t for x in a for t in x.texts)


def test_tiny_training_run_decreases_ctc_loss(tmp_path: Path) -> None:
    data, cfg = synthetic_fsdd(), config()
    assert isinstance(SpeechTask(), Task)
    probe = sd.collate([sd.Utterance(c.wave, c.text) for c in data.test], sd.CharVocab(), SR, cfg.data.hop, cfg.data.win, surround=True)
    torch.manual_seed(cfg.train.seed)
    initial = build_model(cfg).eval()  # run_task seeds and builds the same initial model
    with torch.no_grad():
        before = float(ctc_loss(initial(probe.features, probe.times, probe.mask), probe.targets, probe.target_lengths))
    run = run_task(SpeechTask(data), cfg, tmp_path)
    with torch.no_grad():
        after = float(ctc_loss(run.model(probe.features, probe.times, probe.mask), probe.targets, probe.target_lengths))
    losses = [r["loss"] for r in run.result.train]
    assert len(losses) == 40 and np.isfinite(losses).all() and not run.model.training
    assert after < 0.7 * before
    rows = run.metrics["rows"]
    assert rows == evaluate_by_duration(run.model, cfg, eval_sets(cfg, data))
    assert [r["bucket"] for r in rows] == ["clips", "1s", "2s"]
    assert [r["utterances"] for r in rows] == [10, 3, 3] and rows[1]["duration_s"] == 1.0
    assert all(0.0 <= r["cer"] and 0.0 <= r["wer"] for r in rows)


def test_experiment_writes_csv_and_plot(tmp_path: Path) -> None:
    rec = tmp_path / "fsdd" / "recordings"
    rec.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for d in range(10):
        for i in range(7):
            sf.write(str(rec / f"{d}_synth_{i}.wav"), tone(d, 0.35, rng), SR, subtype="PCM_16")
    base = {"data": {"path": str(tmp_path / "fsdd"), "eval_durations": [1.0], "eval_count": 2, "batch_size": 4},
            "train": {"max_steps": 2},
            "model": {"d_model": 16, "heads": 2, "layers": 1, "conv_channels": 8,
                      "position": {**POS, "learned": {"max_positions": 40, "wrap": True}}}}
    spec = {"task": "speech", "name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
            "methods": {"cape": {"model.position.name": "cape"}, "learned": {"model.position.name": "learned"}}}
    (tmp_path / "speech.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    report = run_experiment(str(tmp_path / "speech.yaml"), jobs=1)  # the shared grid runner
    with (report / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["method"], r["bucket"], r["utterances"]) for r in rows] == [
        ("cape", "clips", "50"), ("cape", "1s", "2"), ("learned", "clips", "50"), ("learned", "1s", "2")]
    assert (report / "wer_by_duration.png").stat().st_size > 1000
    assert (tmp_path / "out" / "cape" / "seed0" / "checkpoints" / "ckpt_00000002").is_dir()
    with pytest.raises(DataError, match="FSDD recordings not found"):
        run_experiment(str(tmp_path / "speech.yaml"), ["out_dir=" + str(tmp_path / "other"),
                                                       "base.data.path=" + str(tmp_path / "missing")])


def test_shipped_config_loads() -> None:
    exp = load_config(SpeechExperimentConfig, Path(__file__).resolve().parents[2] / "src" / "posenc" / "configs" / "speech" / "fsdd_small.yaml")
    cfg = TASK.experiment(exp).run_config(TASK.experiment(exp).cells()[0])
    assert (cfg.train.schedule, cfg.train.lr_floor, cfg.train.clip_norm, cfg.data.batch_size) == ("cosine", 0.05, 1.0, 16)
    assert cfg.model.position.learned.wrap  # E(t mod 40): test utterances are 10× the table


def test_wer_curves_average_seeds_per_duration() -> None:
    """Two seeds of one method give one curve: the mean WER per duration with the seeds' range,
    sorted by duration, the natural-length clips bucket left out."""
    from posenc.tasks.speech.report import wer_curves

    rows = [{"method": "cape", "bucket": b, "duration_s": d, "wer": w}
            for b, d, w in [("4s", 4.0, 30.0), ("1s", 1.0, 10.0), ("clips", 0.5, 5.0)]]
    rows += [{"method": "cape", "bucket": "1s", "duration_s": 1.0, "wer": 20.0},
             {"method": "cape", "bucket": "4s", "duration_s": 4.0, "wer": 50.0},
             {"method": "ape", "bucket": "1s", "duration_s": 1.0, "wer": 7.0}]
    assert wer_curves(rows) == {"cape": [(1.0, 15.0, 10.0, 20.0), (4.0, 40.0, 30.0, 50.0)], "ape": [(1.0, 7.0, 7.0, 7.0)]}


def test_report_summary_is_mean_and_sd_over_seeds(tmp_path: Path) -> None:
    """README.md of the speech report on hand-made results: WER mean ± sample sd over seeds per
    bucket and the mean over buckets longer than the training maximum (4 s, 8 s here)."""
    from posenc.tasks.speech.report import write_summary

    def run(method: str, seed: int, wers: dict[str, float]) -> dict:
        durations = {"clips": 0.43, "2s": 2.0, "4s": 4.0, "8s": 8.0, "16s": 16.0}
        rows = [{"bucket": b, "duration_s": durations[b], "wer": w} for b, w in wers.items()]
        return {"method": method, "seed": seed, "metrics": {"rows": rows},
                "summary": {"steps": 500, "status": "still improving"}}

    results = [run("cape", 0, {"clips": 10.0, "2s": 20.0, "4s": 30.0, "8s": 50.0, "16s": 70.0}),
               run("cape", 1, {"clips": 12.0, "2s": 22.0, "4s": 40.0, "8s": 60.0, "16s": 80.0}),
               run("rpe", 0, {"clips": 9.0, "2s": 19.0, "4s": 25.0, "8s": 35.0, "16s": 45.0})]
    text = write_summary("fsdd", results, 2.0, tmp_path)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == text
    assert "4s, 8s, 16s are durations never seen in training" in text  # in bucket order, not as text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    # cape unseen per seed: (30+50+70)/3 = 50, (40+60+80)/3 = 60 -> 55.0 ± 7.1
    assert rows == ["| cape | 11.0 ± 1.4 | 21.0 ± 1.4 | 35.0 ± 7.1 | 55.0 ± 7.1 | 75.0 ± 7.1 | 55.0 ± 7.1 | 500 "
                    "| still improving |", "| rpe | 9.0 | 19.0 | 25.0 | 35.0 | 45.0 | 35.0 | 500 | still improving |"]
