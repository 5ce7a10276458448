"""``posenc.tasks.translation.prepare``: dataset settings, truncation, α, idempotence and atomicity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posenc.data.corpora import load_toy
from posenc.data.spm import Tokenizer
from posenc.errors import DataError
from posenc.runs.fingerprint import data_fingerprint
from posenc.tasks.translation import prepare as prep
from posenc.tasks.translation.prepare import load_meta, prepare
from posenc.tasks.translation.spec import SPEC
from tests.helpers.tiny import hidden_leftovers, read
from tests.tasks.translation.conftest import TOY_OPTIONS, toy_data


def _lengths(tok: Tokenizer, lines: list[str]) -> list[int]:
    return [len(tok.encode(s)) for s in lines]


def test_meta_counts_tokens_and_alpha(toy_prepared: Path) -> None:
    meta = load_meta(toy_prepared)
    tok = Tokenizer.from_file(toy_prepared / "spm.model")
    for split in ("train", "valid", "test"):
        src, tgt = _lengths(tok, read(toy_prepared / f"{split}.src")), _lengths(tok, read(toy_prepared / f"{split}.tgt"))
        assert meta[split] == {"pairs": len(src), "src_tokens": sum(src), "tgt_tokens": sum(tgt),
                               "max_src_len": max(src), "max_tgt_len": max(tgt)}
    assert meta["alpha"] == meta["train"]["tgt_tokens"] / meta["train"]["src_tokens"]
    assert meta["vocab_size"] == tok.vocab_size == 40


def test_prepare_is_idempotent(toy_prepared: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in toy_prepared.iterdir()}
    # the same data config (training/translation-time limits aside) reuses the directory
    assert prepare(toy_data(max_source_len=7, max_train_len=9), toy_prepared) == toy_prepared
    assert {p.name: p.stat().st_mtime_ns for p in toy_prepared.iterdir()} == before


def test_prepared_data_of_another_config_is_never_reused(toy_prepared: Path) -> None:
    """The data fingerprint is stored and checked before any write."""
    before = {p.name: p.read_bytes() for p in toy_prepared.iterdir()}
    assert json.loads((toy_prepared / "fingerprint.json").read_text()) == data_fingerprint(toy_data(), SPEC)
    with pytest.raises(DataError, match=r"vocab_size \(40 -> 64\)"):
        prepare(toy_data(vocab_size=64), toy_prepared)
    assert {p.name: p.read_bytes() for p in toy_prepared.iterdir()} == before


def test_extrapolate_filters_training_pairs_only(tmp_path: Path) -> None:
    out = prepare(toy_data(setting="extrapolate", max_len=16), tmp_path / "x")
    tok = Tokenizer.from_file(out / "spm.model")
    corpus = load_toy(**TOY_OPTIONS)
    keep = [p for p in corpus.train if len(tok.encode(p.src)) <= 16 and len(tok.encode(p.tgt)) <= 16]
    assert 0 < len(keep) < len(corpus.train)
    assert read(out / "train.src") == [p.src for p in keep]
    assert read(out / "train.tgt") == [p.tgt for p in keep]
    assert read(out / "test.src") == [p.src for p in corpus.test]  # test keeps every length
    meta = load_meta(out)
    assert meta["train"]["max_src_len"] <= 16 and meta["train"]["max_tgt_len"] <= 16


def test_interpolate_joins_groups_of_one_document(tmp_path: Path) -> None:
    options = {**TOY_OPTIONS, "n_test": 25}  # docs of 10 sentences: 10, 10, 5
    out = prepare(toy_data(setting="interpolate", group=3, options=options), tmp_path / "i")
    test = load_toy(**options).test
    expected = []
    for start in (0, 10):  # 3 runs of 3 per full document, then its 10th sentence alone (kept, as in the paper)
        expected += [test[start + k: start + min(k + 3, 10)] for k in (0, 3, 6, 9)]
    expected += [test[20:23], test[23:25]]  # the 5-sentence document: a run of 3, then the last 2
    assert read(out / "test.src") == [" <sep> ".join(p.src for p in run) for run in expected]
    assert read(out / "test.tgt") == [" <sep> ".join(p.tgt for p in run) for run in expected]
    assert read(out / "test.doc") == [f"{run[0].doc}\t{run[0].idx}" for run in expected]
    tok = Tokenizer.from_file(out / "spm.model")
    assert tok.encode(read(out / "test.src")[0]).count(tok.sep_id) == 2


def test_length_split_short_keeps_the_shortest_third(tmp_path: Path) -> None:
    out = prepare(toy_data(length_split="short"), tmp_path / "s")
    tok = Tokenizer.from_file(out / "spm.model")
    train = load_toy(**TOY_OPTIONS).train
    kept = read(out / "train.src")
    assert kept == [p.src for p in train if p.src in set(kept)]  # corpus order
    dropped = [p.src for p in train if p.src not in set(kept)]
    assert max(_lengths(tok, kept)) <= min(_lengths(tok, dropped))
    total = sum(_lengths(tok, [p.src for p in train]))
    assert abs(sum(_lengths(tok, kept)) - total / 3) <= max(_lengths(tok, kept))


def test_max_pairs_truncate_after_the_setting(tmp_path: Path) -> None:
    out = prepare(toy_data(max_train_pairs=7, max_test_pairs=3), tmp_path / "t")
    corpus = load_toy(**TOY_OPTIONS)
    assert read(out / "train.src") == [p.src for p in corpus.train[:7]]
    assert read(out / "test.src") == [p.src for p in corpus.test[:3]]
    assert read(out / "valid.src") == [p.src for p in corpus.valid]
    assert json.loads((out / "meta.json").read_text())["train"]["pairs"] == 7


def test_failure_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error after the temporary directory was filled (vocabulary trained) removes it."""
    def boom(*args, **kwargs):
        raise DataError("boom")

    monkeypatch.setattr(prep, "apply_setting", boom)
    with pytest.raises(DataError, match="boom"):
        prepare(toy_data(), tmp_path / "data")
    assert not (tmp_path / "data").exists()
    assert hidden_leftovers(tmp_path) == []


def test_empty_training_split_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no training pairs"):
        prepare(toy_data(options={"n_train": 0}), tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_load_meta_names_the_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a prepared data directory"):
        load_meta(tmp_path)


def test_concurrent_prepare_of_the_same_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks preparing at once: the one that finishes second must reuse the first's result."""
    original = prep.apply_setting
    out = tmp_path / "data"
    calls: list[Path | None] = []

    def other_rank_finishes_first(*args, **kwargs):
        if not calls:
            calls.append(None)
            calls[0] = prepare(toy_data(), out)  # the other rank, start to end, in between
        return original(*args, **kwargs)

    monkeypatch.setattr(prep, "apply_setting", other_rank_finishes_first)
    assert prepare(toy_data(), out) == out
    assert calls == [out] and load_meta(out)["train"]["pairs"] == TOY_OPTIONS["n_train"]
    assert hidden_leftovers(tmp_path) == []


def test_every_configurable_arch_has_a_builder() -> None:
    """RunConfig validates ``arch`` against the names the translation task can build (and only those)."""
    from posenc.tasks.translation import config, train

    assert set(config.ARCHS) == set(train.ARCHS)


def test_train_rebuilds_a_truncated_spm_cache_entry(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A full disk during prepare left a truncated model in ``.spm-cache`` and no prepared data: a
    later train (here --no-resume) drops the entry with one warning and rebuilds it instead of
    failing."""
    import shutil

    from tests.helpers.tiny import TINY, TOY, cli

    run = tmp_path / "run"
    assert cli(capsys, "prepare", f"out_dir={run}", *TOY, *TINY)[0] == 0
    (entry,) = (run / ".spm-cache").glob("*.model")
    entry.write_bytes(entry.read_bytes()[:200])
    shutil.rmtree(run / "data")
    with pytest.warns(UserWarning, match="unreadable SentencePiece cache entry") as record:
        code, _, err = cli(capsys, "train", "--no-resume", f"out_dir={run}", *TOY, *TINY)
    assert code == 0, err
    assert len([w for w in record if "SentencePiece cache" in str(w.message)]) == 1
    assert Tokenizer.from_file(entry).vocab_size == Tokenizer.from_file(run / "data" / "spm.model").vocab_size
