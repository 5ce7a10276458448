"""An export written by :func:`posenc.serving.ctranslate2.export_run`, opened and translated with
through ``ctranslate2.Translator`` (``posenc translate --engine ctranslate2``).

:func:`load_export` checks the export's files before any is parsed and returns an
:class:`Exported`; its :meth:`~Exported.translate_lines` reads sources in posenc's format (BOS,
``max_source_len``, ``too_long``: :func:`posenc.decoding.translate.source_ids`) and its
:meth:`~Exported.decode_options` are the run's own, stored with the export.

Engine constants (docs/performance.md): CTranslate2's length penalty divides by ``|y|^α``, not
GNMT's ``((5+|y|)/6)^α``, so beam outputs equal posenc's at α = 0 only; its maximum decoding
length cuts a hypothesis without scoring EOS where posenc forces EOS at its limit (the limit is
posenc's per-sentence ``floor(a·|x| + b)``: sentences are decoded in groups of equal limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby, islice
from pathlib import Path
from typing import Any

from posenc.data.spm import Tokenizer
from posenc.decoding.translate import source_ids
from posenc.errors import ConfigError
from posenc.files import atomic_output
from posenc.runs.ownership import check_user_output
from posenc.serving.ctranslate2 import EXPORT_INFO, require_ctranslate2
from posenc.serving.validate import check_engine_files, check_files, open_translator, read_manifest


@dataclass
class Exported:
    """A loaded export: the CTranslate2 translator, posenc's tokenizer, the export's description
    (``export.json``: its decoding options, source BOS, ``max_source_len``) and its directory."""

    translator: Any
    tokenizer: Tokenizer
    info: dict[str, Any]
    path: Path = Path(".")

    def __post_init__(self) -> None:
        self.vocab = self.tokenizer.pieces  # id → piece
        self.index = {p: i for i, p in enumerate(self.vocab)}

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.vocab[i] for i in ids]

    def ids(self, pieces: list[str]) -> list[int]:
        return [self.index.get(p, self.tokenizer.unk_id) for p in pieces]

    def decode_options(self, beam: int | None = None) -> dict[str, Any]:
        """The run's decoding options stored with the export (``beam`` overridden when given),
        as keyword arguments of :meth:`translate_lines`; its GNMT α is used as CTranslate2's α
        (``|y|^α``: equal outputs at α = 0 only)."""
        dc = dict(self.info["decode"])
        return dict(beam=beam or dc["beam"], length_penalty=dc["length_penalty"], max_len_a=dc["max_len_a"],
                    max_len_b=dc["max_len_b"], batch_tokens=dc["batch_tokens"])

    def translate_lines(self, lines: Iterable[str], *, beam: int = 4, length_penalty: float = 0.0,
                        max_len_a: float = 1.2, max_len_b: float = 10, batch_tokens: int = 4096,
                        chunk_lines: int = 2000, too_long: str = "error",
                        on_decoded: Callable[[int], None] | None = None) -> Iterator[str]:
        """Translate ``lines`` lazily; one output line per input line, in order.

        Args:
            lines: source sentences (plain text).
            beam, length_penalty: beam size and CTranslate2's α (score / |y|^α).
            max_len_a, max_len_b: the output limit ``floor(a·|x| + b)`` per sentence, posenc's.
            batch_tokens: CTranslate2's batch size in tokens; chunk_lines: lines read at a time.
            too_long: ``error`` or ``truncate`` for a source over the export's ``max_source_len``.
            on_decoded: called with the number of lines each chunk adds (progress).
        Returns:
            An iterator over the translations, one per input line (an empty line for an empty one).
        """
        if beam < 1 or batch_tokens < 1 or chunk_lines < 1:
            raise ConfigError(f"beam, batch_tokens and chunk_lines must be >= 1, got {beam}, {batch_tokens}, "
                              f"{chunk_lines}")
        opts = dict(beam=beam, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                    batch_tokens=batch_tokens)
        bos, longest = bool(self.info["prepend_src_bos"]), int(self.info["max_source_len"])
        numbered = enumerate(lines, start=1)
        while chunk := list(islice(numbered, chunk_lines)):
            seqs = [source_ids(self.tokenizer, line, n, longest, too_long, bos) for n, line in chunk]
            yield from self._decode_chunk(seqs, opts)
            if on_decoded is not None:
                on_decoded(len(seqs))

    def write_translations(self, lines: Iterable[str], out_path: str | Path, **options: Any) -> int:
        """:meth:`translate_lines` into ``out_path``, written atomically (an old file stays intact
        on any failure; no directory is created for it, none inside a posenc directory:
        ownership.check_user_output); returns the number of lines."""
        target = Path(out_path)
        check_user_output(target, "output")
        count = 0
        with atomic_output(target, follow_symlink=True) as f:  # a user's symlink stays: its target gets the lines
            for text in self.translate_lines(lines, **options):
                f.write(text + "\n")
                count += 1
        return count

    def _decode_chunk(self, seqs: list[list[int]], opts: dict[str, Any]) -> list[str]:
        """Best hypotheses of ``seqs`` as text, in order; sentences of one output limit per call."""
        out = [""] * len(seqs)
        limit = lambda i: math.floor(opts["max_len_a"] * len(seqs[i]) + opts["max_len_b"])  # noqa: E731
        todo = sorted((i for i, s in enumerate(seqs) if s), key=limit)
        for cap, group in groupby(todo, key=limit):
            rows = list(group)
            try:
                results = self.translator.translate_batch(
                    [self.pieces(seqs[i]) for i in rows], beam_size=opts["beam"],
                    length_penalty=opts["length_penalty"], max_decoding_length=max(cap, 1), min_decoding_length=0,
                    max_input_length=0, max_batch_size=opts["batch_tokens"], batch_type="tokens", num_hypotheses=1)
            except (RuntimeError, ValueError) as err:  # a model.bin that loaded but cannot decode
                bad = self.path / "model.bin"
                raise ConfigError(f"{bad}: CTranslate2 failed to translate with it ({err})") from None
            for i, res in zip(rows, results):
                text = self.tokenizer.decode(self.ids(res.hypotheses[0]))
                out[i] = text.replace("\r", " ").replace("\n", " ")
        return out


def load_export(
    directory: str | Path, device: str = "cpu", threads: int = 0, compute_type: str = "default"
) -> Exported:
    """Open an export written by :func:`~posenc.serving.ctranslate2.export_run`, its files checked
    first (serving/validate.py): a one-line ConfigError naming the file for a missing, tampered or
    foreign one. ``device`` is ``cpu``, ``cuda`` or ``cuda:N``; ``threads`` 0 is CTranslate2's default."""
    ct2, directory = require_ctranslate2(), Path(directory)
    info_path = directory / EXPORT_INFO
    if not info_path.is_file():
        raise ConfigError(f"{directory} is not a posenc CTranslate2 export (no {EXPORT_INFO}; "
                          "write one with posenc export --run R --format ctranslate2 --out DIR)")
    info = read_manifest(info_path)
    check_files(directory, info.get("files"))  # before any is parsed: the files export wrote, not edited
    tokenizer = Tokenizer.from_file(directory / "spm.model")
    check_engine_files(directory, tokenizer.pieces)
    kind, _, index = device.partition(":")  # cpu, cuda or cuda:N
    translator = open_translator(ct2, directory, device=kind, device_index=int(index or 0), compute_type=compute_type,
                                 intra_threads=threads)
    return Exported(translator, tokenizer, info, directory)
