"""The speech task's validation split (``data.valid_size``): held-out training recordings, never
trained on, give a fixed set of utterances built like training ones (the patience signal)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from posenc.data import speech as sd
from posenc.errors import ConfigError, DataError
from posenc.runs.fingerprint import fingerprint
from posenc.tasks.speech import SpeechTask, training_utterance
from tests.tasks.test_speech import SR, config, synthetic_fsdd, tone


def marked_fsdd() -> sd.Fsdd:
    """Training indices 5 and 6 (held out by ``valid_holdout: 2``) are all "nine"; indices 7-10 are
    digits 0-8, so a batch's transcripts tell which recordings it was built from."""
    rng = np.random.default_rng(1)

    def clip(d: int, i: int) -> sd.Clip:
        w = torch.from_numpy(tone(d, rng.uniform(0.3, 0.5), rng))
        return sd.Clip(w, sd.DIGIT_WORDS[d], d, f"s{i}", i, Path(f"{d}_s{i}_{i}.wav"))

    train = [clip(9, i) for i in (5, 6)] + [clip(d, i) for d in range(9) for i in (7, 8, 9, 10)]
    return sd.Fsdd(train, [clip(d, 0) for d in range(10)])


def words(batches: list[sd.SpeechBatch]) -> set[str]:
    return {w for b in batches for t in b.texts for w in t.split()}


def test_hold_out_splits_by_training_index() -> None:
    data = marked_fsdd()
    kept, held = sd.hold_out(data.train, 2)
    assert [c.index for c in held] == [5, 6] and {c.index for c in kept} == {7, 8, 9, 10}
    assert len(kept) + len(held) == len(data.train)


def test_held_out_recordings_never_reach_training_batches() -> None:
    task, cfg = SpeechTask(marked_fsdd()), config(data={"valid_size": 20, "valid_holdout": 2})
    trained = words([b for e in range(6) for b in task.train_batches(cfg, e, 0, 1)])
    assert "nine" not in trained and len(trained) == 9
    valid = task.valid_batches(cfg)
    assert valid is not None and words(valid) == {"nine"}
    # without a validation split the same recordings are trained on
    assert "nine" in words([b for e in range(6) for b in SpeechTask(marked_fsdd()).train_batches(config(), e, 0, 1)])


def test_validation_batches_are_fixed_and_within_the_training_duration() -> None:
    data = marked_fsdd()
    cfg = config(data={"valid_size": 21, "eval_batch": 4, "max_train_words": 3, "max_train_duration": 1.2})
    a = SpeechTask(data).valid_batches(cfg)
    b = SpeechTask(data).valid_batches(config(data={"valid_size": 21, "eval_batch": 4, "max_train_words": 3,
                                                    "max_train_duration": 1.2}, train={"seed": 7}))
    assert a is not None and b is not None
    assert [len(x.texts) for x in a] == [4, 4, 4, 4, 4, 1]
    assert [x.texts for x in a] == [x.texts for x in b]  # the same set for every model seed
    assert all(torch.equal(x.features, y.features) and torch.equal(x.mask, y.mask) for x, y in zip(a, b))
    durations = torch.cat([x.durations for x in a])
    assert float(durations.max()) <= 1.2 + 1 / SR and torch.equal(durations, durations.sort().values)
    assert max(len(t.split()) for x in a for t in x.texts) >= 2  # multi-word, like training utterances
    other = SpeechTask(data).valid_batches(config(data={"valid_size": 21, "eval_batch": 4, "seed": 5,
                                                        "max_train_duration": 1.2}))
    assert other is not None and [x.texts for x in other] != [x.texts for x in a]


def old_train_batches(data: sd.Fsdd, cfg, epoch: int) -> list[sd.SpeechBatch]:
    """Training batches as built before the validation split existed (every training recording)."""
    d, bs = cfg.data, cfg.data.batch_size
    rng = np.random.default_rng([cfg.train.seed, d.seed, epoch])
    utts = sorted((training_utterance(data.train, d, rng) for _ in range(bs * d.pool_batches)),
                  key=lambda u: u.wave.shape[0])
    return [sd.collate(utts[k * bs: (k + 1) * bs], sd.CharVocab(), d.sample_rate, d.hop, d.win, d.padding_free,
                       d.surround_boundary) for k in rng.permutation(d.pool_batches)]


def test_valid_size_zero_trains_on_exactly_the_old_batches() -> None:
    data, cfg = synthetic_fsdd(), config()
    task = SpeechTask(data)
    assert cfg.data.valid_size == 0 and task.valid_batches(cfg) is None
    for epoch in (0, 3):
        new, old = task.train_batches(cfg, epoch, 0, 1), old_train_batches(data, cfg, epoch)
        assert [b.texts for b in new] == [b.texts for b in old]
        assert all(torch.equal(x.features, y.features) and torch.equal(x.targets, y.targets) for x, y in zip(new, old))


def test_validation_split_refusals() -> None:
    with pytest.raises(ConfigError, match="data.valid_size must be >= 0"):
        config(data={"valid_size": -1})
    with pytest.raises(ConfigError, match="valid_holdout >= 1"):
        config(data={"valid_size": 4, "valid_holdout": 0})
    only_late = sd.Fsdd([c for c in marked_fsdd().train if c.index >= 7], marked_fsdd().test)
    with pytest.raises(DataError, match="0 held-out recordings"):
        SpeechTask(only_late).check(config(data={"valid_size": 4}))


def test_fingerprint_names_the_validation_split_only_when_there_is_one() -> None:
    """Without a split the options change nothing, so runs from before they existed stay fresh; with
    one, the held-out recordings change the training data and both options determine the run."""
    plain, split = fingerprint(config())["data"], fingerprint(config(data={"valid_size": 8}))["data"]
    assert "valid_size" not in plain and "valid_holdout" not in plain
    assert (split["valid_size"], split["valid_holdout"]) == (8, 2)
    assert {k: v for k, v in split.items() if not k.startswith("valid_")} == plain
