"""Joint SentencePiece vocabulary: cached training and a small :class:`Tokenizer` wrapper.

Every model has the fixed special ids ``pad=0, unk=1, bos=2, eos=3`` and the user-defined
symbol ``<sep>`` (id 4), which the INTERPOLATE setting uses to join sentences.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from posenc.errors import ConfigError, DataError

__all__ = ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "SEP", "Tokenizer", "spm_cache_key", "tokenizer_identity",
           "train_spm"]

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SEP = "<sep>"
MODEL_TYPES = ("unigram", "bpe")
_CACHE_VERSION = 1  # bump when the trainer options below change


def _trainer_options(vocab_size: int, model_type: str, character_coverage: float) -> dict[str, Any]:
    """SentencePiece trainer options (everything except the input and model prefix)."""
    return {
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_piece": "<pad>",
        "unk_piece": "<unk>",
        "bos_piece": "<s>",
        "eos_piece": "</s>",
        "user_defined_symbols": [SEP],
        "minloglevel": 2,
    }


def spm_cache_key(texts: Sequence[str], vocab_size: int, model_type: str,
                  character_coverage: float) -> str:
    """sha256 hex digest of the training texts (in order) and the training parameters."""
    h = hashlib.sha256()
    params = {"v": _CACHE_VERSION, "vocab_size": vocab_size, "model_type": model_type,
              "character_coverage": character_coverage}
    h.update(json.dumps(params, sort_keys=True).encode())
    for text in texts:
        h.update(b"\n")
        h.update(text.encode("utf-8", errors="surrogatepass"))
    return h.hexdigest()


#: The trainer_spec fields a SentencePiece model reads when it encodes or decodes: the rest (the
#: input, ``model_prefix`` (a temporary path), thread count, sampling sizes, ...) only shaped the
#: training and so stay out of the identity.
ENCODING_TRAINER_FIELDS = (
    "model_type", "vocab_size", "byte_fallback", "treat_whitespace_as_suffix", "allow_whitespace_only_pieces",
    "split_by_unicode_script", "split_by_number", "split_by_whitespace", "split_digits", "max_sentencepiece_length",
    "unk_id", "bos_id", "eos_id", "pad_id", "unk_piece", "bos_piece", "eos_piece", "pad_piece", "unk_surface",
    "control_symbols", "user_defined_symbols",
)


def tokenizer_identity(proto: bytes) -> str:
    """sha256 hex digest of what a serialized SentencePiece model tokenizes with: its pieces (text,
    score, type), normaliser and denormaliser specs, and the encoding options of its trainer spec
    (:data:`ENCODING_TRAINER_FIELDS`), serialized deterministically. Two models with the same pieces
    have the same identity on every machine, whatever path or thread count trained them (unlike a
    hash of the file, which embeds the training's temporary ``model_prefix``).

    Raises:
        DataError: ``proto`` is not a SentencePiece model.
    """
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    model = model_pb2.ModelProto()
    try:
        model.ParseFromString(proto)
    except DecodeError:
        raise DataError("not a SentencePiece model") from None
    canonical = model_pb2.ModelProto()
    canonical.pieces.extend(model.pieces)
    canonical.normalizer_spec.CopyFrom(model.normalizer_spec)
    if model.HasField("denormalizer_spec"):
        canonical.denormalizer_spec.CopyFrom(model.denormalizer_spec)
    for name in ENCODING_TRAINER_FIELDS:
        value = getattr(model.trainer_spec, name)
        if isinstance(value, (str, int, float, bool)):
            if model.trainer_spec.HasField(name):
                setattr(canonical.trainer_spec, name, value)
        else:
            getattr(canonical.trainer_spec, name).extend(value)
    return hashlib.sha256(canonical.SerializeToString(deterministic=True)).hexdigest()


def _check_train_args(texts: Sequence[str], vocab_size: int, model_type: str,
                      character_coverage: float) -> None:
    if model_type not in MODEL_TYPES:
        raise ConfigError(f"unknown SentencePiece model_type {model_type!r}; use one of {list(MODEL_TYPES)}")
    if not isinstance(vocab_size, int) or vocab_size < 8:
        raise ConfigError(f"vocab_size must be an integer >= 8, got {vocab_size!r}")
    if not 0.0 < character_coverage <= 1.0:
        raise ConfigError(f"character_coverage must be in (0, 1], got {character_coverage}")
    if not any(t.strip() for t in texts):
        raise DataError("cannot train SentencePiece: no non-empty training text")


def _run_trainer(texts: Sequence[str], prefix: Path, options: dict[str, Any]) -> None:
    """Train once with a hard vocabulary limit; retry with a soft one if the data is too small."""
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(prefix),
                                       hard_vocab_limit=True, **options)
    except RuntimeError as e:
        if "Vocabulary size too high" not in str(e):
            reason = str(e).splitlines()[0].split("] ", 1)[-1]
            raise ConfigError(f"SentencePiece training failed: {reason}") from None
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(prefix),
                                       hard_vocab_limit=False, **options)


def _loads(path: Path) -> bool:
    """Whether ``path`` holds a SentencePiece model :class:`Tokenizer` accepts (ids, ``<sep>``)."""
    try:
        Tokenizer(path)
    except DataError:
        return False
    return True


def _cached(model_path: Path) -> bool:
    """Whether the cache holds a valid ``model_path``; a bad entry (e.g. truncated by a full disk)
    is removed with one warning, so it is rebuilt."""
    if not model_path.is_file():
        return False
    if _loads(model_path):
        return True
    warnings.warn(f"{model_path}: unreadable SentencePiece cache entry; removed and rebuilt", stacklevel=3)
    for path in (model_path, model_path.with_suffix(".vocab")):
        path.unlink(missing_ok=True)
    return False


def _fsync(path: Path) -> None:
    """Flush ``path``'s content to disk (before it is renamed into the cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def train_spm(
    texts: Iterable[str],
    model_prefix_dir: str | os.PathLike[str],
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
) -> Path:
    """Train a joint SentencePiece model on ``texts`` once and return the ``.model`` path.

    The file is ``<model_prefix_dir>/spm_<model_type>_<vocab_size>_<key16>.model`` where the
    key is :func:`spm_cache_key`; if it exists and loads it is reused without training (an entry
    that does not load is removed with a warning and trained again). Training writes to a
    temporary directory; the model is loaded and fsynced there before it is renamed into place,
    so neither a crash nor a full disk leaves a broken cache entry. If ``vocab_size`` is too large
    for the data, the vocabulary is smaller (``hard_vocab_limit=False``); check
    ``Tokenizer.vocab_size``.

    Raises:
        DataError: the trained model does not load (e.g. the disk filled up while it was written).
    """
    texts = list(texts)
    _check_train_args(texts, vocab_size, model_type, character_coverage)
    key = spm_cache_key(texts, vocab_size, model_type, character_coverage)
    directory = Path(model_prefix_dir)
    stem = f"spm_{model_type}_{vocab_size}_{key[:16]}"
    model_path = directory / f"{stem}.model"
    if _cached(model_path):
        return model_path
    directory.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(dir=directory, prefix=f".{stem}."))
    try:
        _run_trainer(texts, tmp_dir / stem, _trainer_options(vocab_size, model_type, character_coverage))
        trained = tmp_dir / f"{stem}.model"
        if not _loads(trained):
            raise DataError(f"{model_path}: the SentencePiece model just trained does not load (disk full?); "
                            "nothing was cached")
        for suffix in (".vocab", ".model"):  # the model last: its presence marks a complete entry
            _fsync(tmp_dir / f"{stem}{suffix}")
            os.replace(tmp_dir / f"{stem}{suffix}", directory / f"{stem}{suffix}")
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return model_path


class Tokenizer:
    """A SentencePiece model with the fixed special ids (pad 0, unk 1, bos 2, eos 3, <sep>)."""

    def __init__(self, model_path: str | os.PathLike[str]) -> None:
        self.path = Path(model_path)
        try:
            proto = self.path.read_bytes()
        except OSError as e:
            raise DataError(f"{self.path}: cannot read SentencePiece model ({e.strerror})") from None
        self._load(proto)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load a ``.model`` file written by :func:`train_spm`."""
        return cls(path)

    def _load(self, proto: bytes) -> None:
        sp = spm.SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError):
            raise DataError(f"{self.path}: not a SentencePiece model") from None
        expected = {"pad": (sp.pad_id(), PAD_ID), "unk": (sp.unk_id(), UNK_ID),
                    "bos": (sp.bos_id(), BOS_ID), "eos": (sp.eos_id(), EOS_ID)}
        for name, (got, want) in expected.items():
            if got != want:
                raise DataError(f"{self.path}: {name} id is {got}, expected {want}")
        sep = sp.piece_to_id(SEP)
        if sep == sp.unk_id():
            raise DataError(f"{self.path}: vocabulary has no {SEP} symbol")
        self._sp, self._proto, self.sep_id = sp, proto, sep

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "proto": self._proto}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self._load(state["proto"])

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special ones included (ids are 0..vocab_size-1)."""
        return self._sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def sha256(self) -> str:
        """sha256 hex digest of the model file's bytes (stored with checkpoints to tell vocabularies apart)."""
        return hashlib.sha256(self._proto).hexdigest()

    @property
    def identity(self) -> str:
        """Content hash of the model (:func:`tokenizer_identity`): equal for two files with the same
        pieces, normalisation and encoding options, wherever they were trained. Runs record it
        (``summary.json`` ``tokenizer``) so that only runs of one tokenizer are compared."""
        return tokenizer_identity(self._proto)

    @property
    def pieces(self) -> list[str]:
        """All vocabulary pieces, indexed by id."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def encode(self, text: str) -> list[int]:
        """Text -> piece ids, without BOS/EOS (those are added by batching)."""
        return self._sp.encode(text, out_type=int)

    def tokenize(self, text: str) -> list[str]:
        """Text -> pieces (strings), e.g. for length counting or inspection."""
        return self._sp.encode(text, out_type=str)

    def decode(self, ids: Sequence[int]) -> str:
        """Piece ids -> text; pad/bos/eos ids are ignored, ``<sep>`` is kept as text."""
        n = self.vocab_size
        kept = []
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise ValueError(f"token id {i} out of range 0..{n - 1}")
            if i not in (PAD_ID, BOS_ID, EOS_ID):
                kept.append(i)
        return self._sp.decode(kept)

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"
