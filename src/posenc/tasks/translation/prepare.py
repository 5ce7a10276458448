"""``posenc prepare``: corpus → dataset setting → joint SentencePiece → prepared directory.

A prepared directory holds ``{train,valid,test}.{src,tgt}`` (raw text, one pair per line),
``{split}.doc`` (document id and index of each pair, for analyses that need neighbours),
``spm.model`` and ``meta.json`` (sizes, token counts, CAPE's α = target/source tokens and the
tokenizer's content identity, :meth:`~posenc.data.spm.Tokenizer.identity`).
A grid keeps the SentencePiece model its runs train with in a ``tokenizers/`` directory that is
committed with its results (:func:`tokenizer_name`): a prepare given that directory uses the model
there instead of training one, trains and pins one only where none is, and never reuses a
prepared directory made with another model, so every machine's runs of the grid share one tokenizer.
Everything is written to a temporary directory first and renamed into place (a new directory)
or moved into an existing empty one (which stays: a symlink's target, a mount point), so an
interrupted or failed prepare leaves nothing that reads as prepared. The directory is marked as posenc's
(``.posenc-run``, kind ``data``); an existing directory that is neither empty nor posenc's
prepared data is never written into or replaced (:func:`posenc.runs.ownership.check_target`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from posenc.config import to_dict
from posenc.data import settings
from posenc.data.corpora import Corpus, Pair, load_corpus
from posenc.data.spm import Tokenizer, train_spm
from posenc.data.text import write_lines_atomic
from posenc.errors import DataError, RunDirError
from posenc.files import naming_os_errors
from posenc.processes import pid_alive
from posenc.runs.fingerprint import data_fingerprint, describe_diff, diff_keys
from posenc.runs.lock import missing_directories, remove_created
from posenc.runs.ownership import MARKER_NAME, check_target, read_marker, write_marker
from posenc.runs.run import read_json_dict
from posenc.tasks.translation.config import DataConfig
from posenc.tasks.translation.spec import SPEC, SPM_CACHE_NAME

FINGERPRINT_NAME = "fingerprint.json"

SPLITS = ("train", "valid", "test")
#: Every file posenc writes into a prepared directory: nothing else there is ever replaced.
DATA_FILES = frozenset({f"{s}.{e}" for s in SPLITS for e in ("src", "tgt", "doc")}
                       | {"spm.model", "meta.json", FINGERPRINT_NAME, MARKER_NAME})
#: The directory of a grid's committed SentencePiece models (beside its results).
TOKENIZERS_DIR = "tokenizers"
#: The build directory of a prepare into an existing directory (inside it, named with the pid).
_TMP_RE = re.compile(r"^\.prepare-(\d+)-[\w]+$")


def tokenizer_name(cfg: DataConfig) -> str:
    """File name of the SentencePiece model ``cfg``'s data are tokenized with, from what its
    training depends on (the corpus and its loader options, the model type and size; not the
    setting: every setting of a corpus shares the model trained on its full training split),
    e.g. ``multi30k-unigram4000-5d0c3a1e.model``."""
    key = json.dumps({"corpus": cfg.corpus, "options": cfg.options, "spm_type": cfg.spm_type,
                      "vocab_size": cfg.vocab_size}, sort_keys=True, default=str)
    corpus = re.sub(r"[^\w.-]", "_", cfg.corpus)[:40]
    return f"{corpus}-{cfg.spm_type}{cfg.vocab_size}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.model"


def pinned_tokenizer(cfg: DataConfig, tokenizers: str | Path | None) -> Tokenizer | None:
    """The committed SentencePiece model for ``cfg`` in the directory ``tokenizers`` (None when
    there is none); a file there that is not a usable model is a one-line DataError."""
    if tokenizers is None:
        return None
    path = Path(tokenizers) / tokenizer_name(cfg)
    return Tokenizer.from_file(path) if path.is_file() else None


def _pin(model: Path, cfg: DataConfig, tokenizers: str | Path | None) -> None:
    """Copy the model ``model`` into ``tokenizers`` as ``cfg``'s committed tokenizer, unless one is
    there (a pinned model is never replaced)."""
    if tokenizers is None or (Path(tokenizers) / tokenizer_name(cfg)).exists():
        return
    Path(tokenizers).mkdir(parents=True, exist_ok=True)
    target = Path(tokenizers) / tokenizer_name(cfg)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with naming_os_errors(target):
        shutil.copyfile(model, tmp)
        os.replace(tmp, target)


def apply_setting(corpus: Corpus, cfg: DataConfig, tok: Tokenizer) -> Corpus:
    """VANILLA / EXTRAPOLATE / INTERPOLATE (SHAPE §4) and Neishi's length-controlled split."""
    length = lambda text: len(tok.encode(text))  # noqa: E731
    train, valid, test = corpus.train, corpus.valid, corpus.test
    if cfg.setting == "extrapolate":
        train = settings.extrapolate(train, cfg.max_len, length_fn=length)
    elif cfg.setting == "interpolate":
        train, valid, test = (settings.interpolate(s, cfg.group) for s in (train, valid, test))
    if cfg.length_split:
        splits, _ = settings.length_controlled(train, 3, length_fn=length)
        train = splits[cfg.length_split]
    return Corpus(train, valid, test, corpus.meta)


def _truncate(corpus: Corpus, cfg: DataConfig) -> Corpus:
    cut = lambda pairs, n: pairs[:n] if n else pairs  # noqa: E731
    return Corpus(
        cut(corpus.train, cfg.max_train_pairs),
        cut(corpus.valid, cfg.max_valid_pairs),
        cut(corpus.test, cfg.max_test_pairs),
        corpus.meta,
    )


def _write_split(directory: Path, split: str, pairs: list[Pair]) -> None:
    write_lines_atomic(directory / f"{split}.src", (p.src for p in pairs))
    write_lines_atomic(directory / f"{split}.tgt", (p.tgt for p in pairs))
    write_lines_atomic(directory / f"{split}.doc", (f"{p.doc}\t{p.idx}" for p in pairs))


def _token_stats(tok: Tokenizer, pairs: list[Pair]) -> dict[str, int]:
    src = [len(tok.encode(p.src)) for p in pairs]
    tgt = [len(tok.encode(p.tgt)) for p in pairs]
    return {"pairs": len(pairs), "src_tokens": sum(src), "tgt_tokens": sum(tgt),
            "max_src_len": max(src, default=0), "max_tgt_len": max(tgt, default=0)}


def _fill(tmp: Path, out: Path) -> None:
    """Move the files built in ``tmp`` (inside ``out``) into the existing directory ``out``, which
    stays where it is (a user's empty directory, a link's target, a mount point): only if every
    entry of ``out`` is posenc's. ``meta.json`` goes first and comes back last, so an interrupted
    fill reads as unprepared and is rebuilt."""
    foreign = sorted(p.name for p in out.iterdir() if p.name not in DATA_FILES and not _TMP_RE.match(p.name))
    if foreign:
        raise RunDirError(f"{out} holds files posenc did not write ({foreign[0]!r}); "
                          "move them away before rebuilding it, or use another directory")
    for name in ("meta.json", FINGERPRINT_NAME):
        (out / name).unlink(missing_ok=True)
    for f in sorted(tmp.iterdir(), key=lambda f: f.name == "meta.json"):
        os.replace(f, out / f.name)
    tmp.rmdir()


def _remove_stale_builds(out: Path) -> None:
    """Delete the ``.prepare-PID-*`` build directories that dead processes left in ``out``."""
    for p in out.iterdir():
        m = _TMP_RE.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _publish(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; if another process (e.g. a torchrun rank) won the race, keep its copy."""
    try:
        tmp.rename(out)
    except OSError:
        if not (out / "meta.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def check_prepared(cfg: DataConfig, out: str | Path) -> bool:
    """Whether ``out`` already holds data prepared for ``cfg`` (False when absent); a directory
    prepared for another data config is a one-line DataError naming the differing keys."""
    out = Path(out)
    if not (out / "meta.json").is_file():
        return False
    saved = stored_data_fingerprint(out)
    new = data_fingerprint(cfg, SPEC)
    if diff_keys(saved, new):
        raise DataError(
            f"{out} holds data prepared for another data config: {describe_diff({'data': saved}, {'data': new})}; "
            "use another directory (or --no-resume for a run's own data)"
        )
    return True


def stored_data_fingerprint(out: Path) -> dict[str, Any]:
    hint = "use another directory (or --no-resume to rebuild it)"
    if (out / FINGERPRINT_NAME).is_file():
        return read_json_dict(out / FINGERPRINT_NAME, hint)
    data = read_json_dict(out / "meta.json", hint).get("data", {})
    if not isinstance(data, dict):
        raise RunDirError(f"{out / 'meta.json'}: no data config; {hint}")
    return data_fingerprint(DataConfig(**{k: v for k, v in data.items() if k in DataConfig.__dataclass_fields__}), SPEC)


def prepare(cfg: DataConfig, out: str | Path, cache_dir: str | Path | None = None, replace: bool = False,
            tokenizers: str | Path | None = None, pin: bool = True) -> Path:
    """Build the prepared directory ``out`` for ``cfg``; returns its path. Idempotent.

    Args:
        cfg: the data config (corpus, setting, vocabulary).
        out: the prepared directory (created, or filled when it is empty or posenc's data).
        cache_dir: the SentencePiece cache (default: ``.spm-cache`` beside ``out``).
        replace: rebuild an ``out`` prepared for another data config instead of refusing it.
        tokenizers: a grid's directory of committed SentencePiece models (:func:`tokenizer_name`):
            its model for ``cfg`` is used instead of training one, and an ``out`` prepared with
            another model is rebuilt with it; ``None``: the model is trained (or taken from the cache).
        pin: with ``tokenizers``, copy the model into it when it holds none for ``cfg`` yet.

    Returns:
        ``out`` as given.

    An existing ``out`` prepared for another data config is an error, or with ``replace`` is
    rebuilt. A symlink to a directory is followed (the data go to its target; the link stays).
    A new directory is built aside and renamed into place; an existing (empty or posenc's) one is
    claimed with the marker and filled in place (:func:`_fill`). Permissions follow the umask.
    A failure removes the directories this call created that it left empty (the parents of
    ``out``, the SentencePiece cache unless it holds an entry that was completed).
    """
    given = Path(out)
    out = given.resolve() if given.is_symlink() and given.is_dir() else given
    check_target(out, "data", "prepared data directory")
    pinned = pinned_tokenizer(cfg, tokenizers)
    if _prepared_for(cfg, out, replace) and (pinned is None or _identity_of(out) == pinned.identity):
        if pin:
            _pin(out / "spm.model", cfg, tokenizers)
        return given
    corpus = load_corpus(cfg.corpus, **cfg.options)
    if not corpus.train:
        raise DataError(f"corpus {cfg.corpus!r} has no training pairs")
    cache = Path(cache_dir) if cache_dir else given.parent / SPM_CACHE_NAME
    created = missing_directories(cache) + missing_directories(out.parent)
    try:
        if out.is_dir():
            _prepare_in_place(cfg, corpus, out, cache, pinned)
        else:
            _prepare_new(cfg, corpus, out, cache, pinned)
    except BaseException:
        remove_created(created)  # those left empty: a cache entry that was completed stays
        raise
    if pin:
        _pin(out / "spm.model", cfg, tokenizers)
    return given


def _prepared_for(cfg: DataConfig, out: Path, replace: bool) -> bool:
    """Whether ``out`` holds data prepared for ``cfg``: another config's data are an error
    (:func:`check_prepared`), or with ``replace`` are to be rebuilt (False)."""
    if not replace:
        return check_prepared(cfg, out)
    return (out / "meta.json").is_file() and not diff_keys(stored_data_fingerprint(out), data_fingerprint(cfg, SPEC))


def _identity_of(out: Path) -> str | None:
    """The content identity of the SentencePiece model of the prepared directory ``out``."""
    meta = read_json_dict(out / "meta.json", "use another directory (or --no-resume to rebuild it)")
    if isinstance(meta.get("tokenizer"), str):
        return meta["tokenizer"]
    return Tokenizer.from_file(out / "spm.model").identity if (out / "spm.model").is_file() else None


def _prepare_new(cfg: DataConfig, corpus: Corpus, out: Path, cache: Path, pinned: Tokenizer | None) -> None:
    """Build a new ``out`` in a hidden sibling and rename it into place (mode: the umask's)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _build(cfg, corpus, tmp, cache, pinned)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp made it 0700
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _prepare_in_place(cfg: DataConfig, corpus: Corpus, out: Path, cache: Path, pinned: Tokenizer | None) -> None:
    """Fill the existing directory ``out`` (empty, or posenc's data): marked first, built in a
    ``.prepare-PID-*`` directory inside it, moved in by :func:`_fill`; a failure removes what
    this call added."""
    claimed = read_marker(out) != "data"
    _remove_stale_builds(out)
    write_marker(out, "data")
    tmp = Path(tempfile.mkdtemp(prefix=f".prepare-{os.getpid()}-", dir=out))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        _build(cfg, corpus, tmp, cache, pinned)
        _fill(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if claimed and not (out / "meta.json").is_file():
            (out / MARKER_NAME).unlink(missing_ok=True)
        raise


def _build(cfg: DataConfig, corpus: Corpus, tmp: Path, cache: Path, pinned: Tokenizer | None) -> None:
    """Every file of a prepared directory for ``cfg`` written into ``tmp``, tokenized with the
    ``pinned`` model or else one trained on the corpus's training split."""
    if pinned is not None:
        spm_path = pinned.path
    else:
        texts = [p.src for p in corpus.train] + [p.tgt for p in corpus.train]
        spm_path = train_spm(texts, cache, cfg.vocab_size, model_type=cfg.spm_type)
    with naming_os_errors(tmp / "spm.model"):
        shutil.copyfile(spm_path, tmp / "spm.model")
    tok = Tokenizer.from_file(tmp / "spm.model")
    corpus = _truncate(apply_setting(corpus, cfg, tok), cfg)
    meta: dict[str, Any] = {"data": to_dict(cfg), "corpus_meta": corpus.meta, "vocab_size": tok.vocab_size,
                            "tokenizer": tok.identity}
    for split in SPLITS:
        pairs = getattr(corpus, split)
        _write_split(tmp, split, pairs)
        meta[split] = _token_stats(tok, pairs)
    train = meta["train"]
    meta["alpha"] = train["tgt_tokens"] / max(train["src_tokens"], 1)  # CAPE §5.3
    with naming_os_errors(tmp / "meta.json"):
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    with naming_os_errors(tmp / FINGERPRINT_NAME):
        (tmp / FINGERPRINT_NAME).write_text(json.dumps(data_fingerprint(cfg, SPEC), indent=1), encoding="utf-8")
    write_marker(tmp, "data")


def load_meta(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise DataError(f"{data_dir}: not a prepared data directory (no meta.json); run `posenc prepare` first")
    return json.loads(path.read_text(encoding="utf-8"))
