"""Tests for posenc.data.spm: cached joint SentencePiece training and the Tokenizer."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import sentencepiece as spm

from posenc.data import spm as spm_module
from posenc.data.corpora import load_toy
from posenc.data.spm import SEP, Tokenizer, train_spm
from posenc.errors import ConfigError, DataError

TEXTS = [
    "a man is riding a horse .", "ein Mann reitet ein Pferd .",
    "two dogs play in the snow .", "zwei Hunde spielen im Schnee .",
    "a woman reads a book in the park .", "eine Frau liest ein Buch im Park .",
] * 20


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_spm(TEXTS, tmp_path_factory.mktemp("spm"), vocab_size=60)


def test_cached_model_is_reused(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mtime = model.stat().st_mtime_ns
    assert model.name.startswith("spm_unigram_60_") and model.with_suffix(".vocab").is_file()

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the model is cached")

    monkeypatch.setattr(spm_module.spm.SentencePieceTrainer, "train", no_training)
    assert train_spm(iter(TEXTS), model.parent, vocab_size=60) == model
    assert model.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in model.parent.iterdir()) == [model.name, model.with_suffix(".vocab").name]


def test_cache_key_depends_on_text_and_params(model: Path) -> None:
    other = train_spm(TEXTS[:-1], model.parent, vocab_size=60)
    bpe = train_spm(TEXTS, model.parent, vocab_size=60, model_type="bpe")
    assert len({model, other, bpe}) == 3 and bpe.name.startswith("spm_bpe_60_")


def test_fixed_special_ids(model: Path) -> None:
    tok = Tokenizer.from_file(model)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.sep_id) == (0, 1, 2, 3, 4)
    assert tok.pieces[:5] == ["<pad>", "<unk>", "<s>", "</s>", SEP]
    assert tok.vocab_size == len(tok.pieces) == len(tok) <= 60


def test_encode_decode_round_trip(model: Path) -> None:
    tok = Tokenizer(model)
    for text in TEXTS[:6]:
        ids = tok.encode(text)
        assert ids and min(ids) > 4 and tok.decode(ids) == text
        assert tok.decode([tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]) == text
    joined = "a man <sep> ein Mann"
    ids = tok.encode(joined)
    assert ids.count(tok.sep_id) == 1 and tok.decode(ids) == joined
    assert "".join(tok.tokenize("a man")).replace("\u2581", " ").strip() == "a man"
    with pytest.raises(ValueError, match="token id 999 out of range"):
        tok.decode([999])


def test_pickle_round_trip(model: Path) -> None:
    tok = pickle.loads(pickle.dumps(Tokenizer(model)))
    assert tok.encode(TEXTS[0]) == Tokenizer(model).encode(TEXTS[0]) and tok.path == model


def test_tiny_corpus_gets_smaller_vocab(tmp_path: Path) -> None:
    toy = load_toy(n_train=50, n_valid=0, n_test=0)
    texts = [p.src for p in toy.train] + [p.tgt for p in toy.train]
    tok = Tokenizer(train_spm(texts, tmp_path, vocab_size=500))
    assert 40 < tok.vocab_size < 500
    assert tok.decode(tok.encode(toy.train[0].tgt)) == toy.train[0].tgt


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown SentencePiece model_type 'word'"):
        train_spm(TEXTS, tmp_path, 60, model_type="word")
    with pytest.raises(ConfigError, match="Vocabulary size is smaller than required_chars. 10 vs 35"):
        train_spm(TEXTS, tmp_path, 10)
    with pytest.raises(DataError, match="no non-empty training text"):
        train_spm(["", " "], tmp_path, 60)
    assert list(tmp_path.iterdir()) == []  # failed training leaves nothing behind


def test_tokenizer_rejects_foreign_models(tmp_path: Path) -> None:
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match=r"junk\.model: not a SentencePiece model"):
        Tokenizer(tmp_path / "junk.model")
    with pytest.raises(DataError, match=r"missing\.model: cannot read"):
        Tokenizer(tmp_path / "missing.model")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXTS), model_prefix=str(tmp_path / "std"),
                                   vocab_size=40, minloglevel=2)
    with pytest.raises(DataError, match=r"std\.model: pad id is -1, expected 0"):
        Tokenizer(tmp_path / "std.model")


# ------------------------------------------------------------------ a poisoned cache

def test_a_truncated_cache_entry_is_dropped_with_one_warning_and_rebuilt(tmp_path: Path) -> None:
    path = train_spm(TEXTS, tmp_path, vocab_size=60)
    pieces = Tokenizer(path).pieces
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # what a full disk (ulimit -f) left behind
    with pytest.warns(UserWarning) as record:
        again = train_spm(TEXTS, tmp_path, vocab_size=60)
    assert [str(w.message) for w in record] == [f"{path}: unreadable SentencePiece cache entry; removed and rebuilt"]
    assert again == path and Tokenizer(path).pieces == pieces
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.with_suffix(".vocab").name]


def test_a_trained_model_that_does_not_load_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = spm_module._run_trainer

    def truncated_write(texts, prefix: Path, options) -> None:  # the trainer's write hit a full disk
        real(texts, prefix, options)
        model = prefix.with_suffix(".model")
        model.write_bytes(model.read_bytes()[:100])

    monkeypatch.setattr(spm_module, "_run_trainer", truncated_write)
    with pytest.raises(DataError, match="just trained does not load") as err:
        train_spm(TEXTS, tmp_path, vocab_size=60)
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []
