"""Checks of a CTranslate2 export directory before and while CTranslate2 opens it.

An export (serving/ctranslate2.py writes it) is untrusted input, like a run directory. In the order
:func:`~posenc.serving.exported.load_export` makes them: its description ``posenc_export.json``
is checked against :class:`ExportInfo` (a JSON object, every key present with its type, the stored
beam within decoding's cap, ``max_source_len`` room for a BOS and a token and within the exported
position tables); ``config.json``, ``model.bin`` and ``spm.model`` must be the files ``posenc
export`` wrote (their sizes, then their sha256, recorded in the description), before any of them
is parsed: a valid file of another export, or a configuration that decodes wrongly, such as
swapped special tokens, is told apart so; then what the files mean is checked against the
export's ``spm.model``, whatever the recorded checksums say (they are the export's claim about
itself): ``config.json`` must be a JSON object whose special tokens (unk, bos, decoder start, eos)
are the model's pieces at posenc's ids, with no source BOS/EOS added by the engine, and the
vocabulary must be the model's pieces (the pad among them); any error of the engine opening
``model.bin`` becomes one line naming the file (a :class:`ConfigError`, exit 2).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.config import from_dict
from posenc.data.spm import BOS_ID, EOS_ID, UNK_ID
from posenc.decoding.config import DecodeConfig
from posenc.decoding.translate import MAX_BEAM, MIN_SOURCE_LEN
from posenc.errors import ConfigError
from posenc.files import sha256_of
from posenc.runs.ownership import EXPORT_MANIFEST

#: The files of an export whose size and sha256 ``posenc export`` records (:func:`file_checksums`).
CHECKED_FILES = ("config.json", "model.bin", "spm.model")
#: The vocabulary files CTranslate2 may have written (a shared one, or one per side).
VOCABULARIES = tuple(f"{side}_vocabulary.{ext}" for side in ("shared", "source", "target") for ext in ("json", "txt"))


@dataclass
class ExportInfo:
    """``posenc_export.json``: what ``translate --engine ctranslate2`` reads (the four keys without
    a default, every ``decode`` key required too) and where the export came from."""

    format: str
    max_source_len: int
    prepend_src_bos: bool
    decode: DecodeConfig
    ctranslate2_version: str = ""
    quantization: str = ""
    run: str = ""
    checkpoint: str = ""
    position: str = ""
    position_offsets: list[int] = field(default_factory=list)
    position_rows: int = 0
    #: Where ``decode.length_penalty`` was read: the run's tuned α or its config's.
    length_penalty_from: str = ""
    #: :data:`CHECKED_FILES` → ``{"bytes": size, "sha256": hex digest}`` as written; translate trusts
    #: no file of the export without them (:func:`check_files`)
    files: dict[str, Any] = field(default_factory=dict)


def _missing(data: dict[str, Any]) -> list[str]:
    """The required keys of :class:`ExportInfo` (``decode.*`` included) that ``data`` lacks."""
    out = [f.name for f in dataclasses.fields(ExportInfo)
           if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in data]
    if isinstance(data.get("decode"), dict):
        out += [f"decode.{f.name}" for f in dataclasses.fields(DecodeConfig) if f.name not in data["decode"]]
    return out


def read_manifest(path: Path) -> dict[str, Any]:
    """The description ``path`` as a dict, checked against :class:`ExportInfo`; a one-line
    ConfigError naming ``path`` and the key for anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable JSON description of an export ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = _missing(data)
    if missing:
        raise ConfigError(f"{path}: missing key {missing[0]!r} (write the export again with posenc export)")
    beam = data["decode"].get("beam") if isinstance(data.get("decode"), dict) else None
    if type(beam) is int and beam > MAX_BEAM:  # before DecodeConfig's own range check, which names no limit
        raise ConfigError(f"{path}: decode.beam {beam} is over the limit of {MAX_BEAM} (decoding memory "
                          "grows with batch x beam)")
    try:
        info = from_dict(ExportInfo, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    if info.format != "ctranslate2":
        raise ConfigError(f"{path}: format must be 'ctranslate2', got {info.format!r}")
    if info.max_source_len < MIN_SOURCE_LEN:  # as decoding/translate.py refuses it for the run itself
        raise ConfigError(f"{path}: max_source_len must be >= {MIN_SOURCE_LEN} (a BOS where the run prepends one "
                          f"and a token), got {info.max_source_len}")
    if info.position_rows < 0 or 0 < info.position_rows <= info.max_source_len:  # 0: an export that kept none
        raise ConfigError(f"{path}: position_rows {info.position_rows} does not cover max_source_len "
                          f"{info.max_source_len} (the exported position tables are shorter than a source)")
    return data


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{path}: not readable JSON ({err})") from None


#: CTranslate2's special-token keys in ``config.json`` → posenc's id (data/spm.py) whose piece in the
#: export's ``spm.model`` each must name. CTranslate2 names no pad token: the pad is the vocabulary's
#: entry at PAD_ID, which the vocabulary check compares with the model's piece there.
SPECIAL_TOKENS = {"eos_token": EOS_ID, "bos_token": BOS_ID, "decoder_start_token": BOS_ID, "unk_token": UNK_ID}


def check_engine_files(directory: Path, pieces: list[str]) -> None:
    """What the engine reads means what the export's ``spm.model`` (``pieces``, by id) defines,
    whatever checksums the description records: ``config.json`` is a JSON object whose special
    tokens are the model's (:func:`check_special_tokens`), and every vocabulary file lists exactly
    ``pieces``; a one-line ConfigError naming the file otherwise."""
    config = directory / "config.json"
    if config.exists():
        settings = _read_json(config)
        if not isinstance(settings, dict):
            raise ConfigError(f"{config}: expected a JSON object (CTranslate2's model configuration)")
        check_special_tokens(config, settings, pieces)
    found = [directory / name for name in VOCABULARIES if (directory / name).exists()]
    if not found:
        raise ConfigError(f"{directory}: no vocabulary file ({VOCABULARIES[0]}); write the export again")
    for path in found:
        if path.suffix == ".json":
            tokens = _read_json(path)
        else:
            tokens = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if tokens != pieces:
            diff = _vocabulary_diff(tokens, pieces)
            raise ConfigError(f"{path}: not the vocabulary of the export's spm.model ({diff})")


def check_special_tokens(path: Path, config: dict[str, Any], pieces: list[str]) -> None:
    """Each of :data:`SPECIAL_TOKENS` in ``config`` (the parsed ``path``) is the piece the export's
    SentencePiece model defines at that id, and the engine adds no source BOS/EOS of its own (posenc
    writes the source's BOS itself, ``prepend_src_bos``): a configuration of swapped tokens decodes
    wrongly without an engine error, so it is refused in one line even where the checksums agree."""
    again = "write the export again with posenc export"
    for key, index in SPECIAL_TOKENS.items():
        want = pieces[index] if index < len(pieces) else None
        if config.get(key) != want:
            raise ConfigError(f"{path}: {key} is {config.get(key)!r}, but the export's spm.model defines "
                              f"{want!r} (id {index}); {again}")
    for key in ("add_source_bos", "add_source_eos"):
        if config.get(key, False) is not False:
            raise ConfigError(f"{path}: {key} is {config[key]!r}, expected false (posenc adds the source's "
                              f"special tokens itself); {again}")


def _vocabulary_diff(tokens: Any, pieces: list[str]) -> str:
    """Where a vocabulary file's entries ``tokens`` first differ from the model's ``pieces``."""
    if not isinstance(tokens, list) or len(tokens) != len(pieces):
        size = len(tokens) if isinstance(tokens, list) else type(tokens).__name__
        return f"{size} entries, {len(pieces)} pieces in spm.model"
    first = next(i for i, (a, b) in enumerate(zip(tokens, pieces)) if a != b)
    return f"entry {first} is {tokens[first]!r}, piece {first} of spm.model is {pieces[first]!r}"


def open_translator(ct2: Any, directory: Path, **options: Any) -> Any:
    """``ctranslate2.Translator(directory, **options)``; an engine error (a truncated, empty or
    foreign model.bin) as a one-line ConfigError naming the file."""
    try:
        return ct2.Translator(str(directory), **options)
    except (RuntimeError, ValueError, OSError) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        name = "config.json" if "json" in text.lower() else "model.bin"
        raise ConfigError(f"{directory / name}: CTranslate2 cannot load the export ({text})") from None


def file_checksum(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex digest}`` of ``path``, as an export's description records it."""
    return {"bytes": path.stat().st_size, "sha256": sha256_of(path)}


def file_checksums(directory: Path) -> dict[str, dict[str, Any]]:
    """The checksums of an export's :data:`CHECKED_FILES` in ``directory``, as its description records them."""
    return {name: file_checksum(directory / name) for name in CHECKED_FILES}


def check_files(directory: Path, recorded: Any) -> None:
    """Each of :data:`CHECKED_FILES` is the file ``posenc export`` wrote (``recorded``: the
    description's ``files``), else a one-line ConfigError naming the file. Every size is compared
    before any file is hashed, so a truncated or replaced file is told without reading the others;
    a description without checksums is refused, since nothing else tells a valid file of another
    export from this one's."""
    manifest = directory / EXPORT_MANIFEST
    again = "write the export again with posenc export"
    if not isinstance(recorded, dict) or not recorded:
        raise ConfigError(f"{manifest}: records no checksum of {', '.join(CHECKED_FILES)}; {again}")
    wrote = {name: _recorded(manifest, recorded, name, again) for name in CHECKED_FILES}
    for name in CHECKED_FILES:
        path = directory / name
        if not path.is_file():
            raise ConfigError(f"{path}: missing; {again}")
        size = path.stat().st_size
        if size != wrote[name]["bytes"]:
            raise ConfigError(f"{path}: not the file posenc export wrote ({size} bytes, {wrote[name]['bytes']} "
                              f"written); {again}")
    for name in CHECKED_FILES:
        if sha256_of(directory / name) != wrote[name]["sha256"]:
            raise ConfigError(f"{directory / name}: not the file posenc export wrote (same size, another sha256); "
                              f"{again}")


def _recorded(manifest: Path, recorded: dict[str, Any], name: str, again: str) -> dict[str, Any]:
    """The description's ``files.<name>`` (size and sha256), or a one-line ConfigError."""
    wrote = recorded.get(name)
    if not isinstance(wrote, dict) or not {"bytes", "sha256"} <= set(wrote):
        raise ConfigError(f"{manifest}: no checksum of {name} (files.{name}: bytes, sha256); {again}")
    return wrote
