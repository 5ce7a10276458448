"""Streaming translation of text lines and files with bounded memory.

Shape legend: B sentences in a batch, S longest source in the batch.

The input is consumed lazily, ``chunk_lines`` lines at a time. Each chunk is sorted by source
length and cut into batches of at most ``batch_tokens`` padded source tokens (``B * S``; beam
search multiplies the decoder rows by the beam size K, so a batch also keeps ``B * K <=``
:data:`DECODER_ROWS` and ``B * K * S <=`` :data:`DECODER_TOKENS`, and K <= :data:`MAX_BEAM`),
decoded, put back into input order and yielded, so memory does not grow with the input size and
outputs appear chunk by chunk.

Source format (must match how the model was trained, ``data.batching.collate``): the
tokenizer's ids as they are, optionally preceded by BOS (``prepend_src_bos``); no EOS. A line
whose source is empty (no tokens, no BOS) is not decoded and gives an empty output line.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from posenc.data.text import iter_lines, open_binary
from posenc.decoding.search import beam_search, greedy_search
from posenc.errors import ConfigError, DataError
from posenc.files import atomic_output

__all__ = ["Tokenizer", "read_lines_lazily", "source_ids", "read_stdin_lines", "translate_file", "translate_lines",
           "write_translations"]


#: Largest beam: beam search keeps ``B * K`` decoder rows, each with a ``(V,)`` score row and a
#: cache per layer, so the beam bounds decoding memory (``--beam 100000`` asked for 38 GB).
MAX_BEAM = 256
#: Decoder rows ``B * K`` per batch: with ``MAX_BEAM`` at least 64 sentences; the defaults
#: (4,000 padded source tokens, beam 4: at most 16,000 rows) never reach it.
DECODER_ROWS = 1 << 14
#: Decoder tokens ``B * K * S`` per batch (the batch's token budget shrinks to this over ``K``);
#: the defaults (4,096 tokens at beam <= 16) never reach it.
DECODER_TOKENS = 1 << 16
#: The shortest ``max_source_len``: the BOS (where the run prepends one) and one token (no source EOS).
MIN_SOURCE_LEN = 2


class Tokenizer(Protocol):
    pad_id: int
    bos_id: int
    eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


def source_ids(
    tokenizer: Tokenizer, line: str, number: int, max_source_len: int, too_long: str, prepend_src_bos: bool
) -> list[int]:
    """Token ids of one source line (optionally BOS first), at most ``max_source_len``."""
    ids = tokenizer.encode(line)
    specials = 1 if prepend_src_bos else 0
    if len(ids) + specials > max_source_len:
        msg = f"input line {number}: {len(ids) + specials} source tokens exceed max_source_len={max_source_len}"
        if too_long == "error":
            raise DataError(f"{msg} (posenc translate --too-long truncate cuts such lines)")
        warnings.warn(f"{msg}; truncated", stacklevel=3)
        ids = ids[: max_source_len - specials]
    return [tokenizer.bos_id, *ids] if prepend_src_bos else ids


def _length_batches(lengths: list[int], batch_tokens: int, max_sentences: int | None = None) -> list[list[int]]:
    """Group indices, longest first, so each batch has ``len(batch) * max_len <= batch_tokens``
    and at most ``max_sentences`` sentences.

    A single sentence longer than ``batch_tokens`` forms a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    limit = max_sentences or len(lengths)
    batches: list[list[int]] = []
    for i in order:
        fits = batches and len(batches[-1]) < limit
        if fits and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _pad(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Right-pad token lists into ``src`` ``(B, S)`` long and ``mask`` ``(B, S)`` bool."""
    width = max(len(s) for s in seqs)
    src = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(seqs):
        src[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in seqs])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return src.to(device), mask.to(device)


def _decode_batch(
    model: nn.Module, tokenizer: Tokenizer, seqs: list[list[int]], device: torch.device, opts: dict[str, Any]
) -> list[str]:
    """Translate one batch of source id lists; returns the best hypotheses as text."""
    src, mask = _pad(seqs, tokenizer.pad_id, device)
    common = dict(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_len_a=opts["max_len_a"],
                  max_len_b=opts["max_len_b"], cuda_graph=opts["cuda_graph"])
    if opts["beam"] == 1:  # identical to beam search with K = 1, without the bookkeeping
        outputs = greedy_search(model, src, mask, **common)
    else:
        hyps = beam_search(model, src, mask, beam=opts["beam"], length_penalty=opts["length_penalty"], **common)
        outputs = [h[0].tokens if h else [] for h in hyps]
    # A line break inside a hypothesis would break the line alignment of the output.
    return [tokenizer.decode(ids).replace("\r", " ").replace("\n", " ") for ids in outputs]


def _translate_chunk(
    model: nn.Module, tokenizer: Tokenizer, seqs: list[list[int]], batch_tokens: int, device: torch.device,
    opts: dict[str, Any],
) -> list[str]:
    """Translate source id lists in length-sorted batches; outputs in the order of ``seqs``."""
    outputs: list[str] = [""] * len(seqs)  # empty sources stay empty
    nonempty = [i for i, s in enumerate(seqs) if s]
    on_decoded = opts.get("on_decoded") or (lambda n: None)
    on_decoded(len(seqs) - len(nonempty))
    budget = min(batch_tokens, DECODER_TOKENS // opts["beam"])
    for sub in _length_batches([len(seqs[i]) for i in nonempty], budget, DECODER_ROWS // opts["beam"]):
        batch = [nonempty[j] for j in sub]
        for i, text in zip(batch, _decode_batch(model, tokenizer, [seqs[i] for i in batch], device, opts)):
            outputs[i] = text
        on_decoded(len(batch))
    return outputs


def _check_options(beam: int, batch_tokens: int, chunk_lines: int, max_source_len: int, too_long: str) -> None:
    if beam < 1 or batch_tokens < 1 or chunk_lines < 1:
        raise ConfigError(f"beam, batch_tokens and chunk_lines must be >= 1, got {beam}, {batch_tokens}, {chunk_lines}")
    if beam > MAX_BEAM:
        raise ConfigError(f"beam {beam} is over the limit of {MAX_BEAM} (decoding memory grows with batch x beam)")
    if max_source_len < MIN_SOURCE_LEN:
        raise ConfigError(f"max_source_len must be >= {MIN_SOURCE_LEN}, got {max_source_len}")  # room for BOS + 1
    if too_long not in ("error", "truncate"):
        raise ConfigError(f"too_long must be 'error' or 'truncate', got {too_long!r}")


def _model_device(model: nn.Module) -> torch.device:
    for tensor in list(model.parameters()) + list(model.buffers()):
        return tensor.device
    return torch.device("cpu")


def translate_lines(
    model: nn.Module,
    tokenizer: Tokenizer,
    lines: Iterable[str],
    *,
    beam: int = 4,
    batch_tokens: int = 4096,
    device: torch.device | str | None = None,
    chunk_lines: int = 2000,
    max_source_len: int = 1024,
    too_long: str = "error",
    length_penalty: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    prepend_src_bos: bool = False,
    cuda_graph: bool = False,
    on_decoded: Callable[[int], None] | None = None,
) -> Iterator[str]:
    """Translate ``lines`` lazily; yields one output line per input line, in input order.

    Args:
        model: a model with the ``encode/init_state/step`` protocol, already on ``device``
            (default: the device of its parameters); it is put in eval mode while iterating.
        beam: beam size (1 = greedy search).
        batch_tokens: bound on padded source tokens per batch.
        chunk_lines: lines read, sorted and decoded together.
        max_source_len: longest allowed source in tokens (counting the BOS if prepended).
        too_long: ``"error"`` → :class:`DataError` naming the 1-based line number;
            ``"truncate"`` → keep the first tokens and emit a :class:`UserWarning`.
        cuda_graph: on CUDA, capture each batch's decoding step as a CUDA graph and replay it
            (``posenc.decoding.graphs``; same outputs, fewer kernel launches).
        on_decoded: called with the number of lines of each batch as soon as it is decoded
            (before its chunk is yielded): progress reporting on long inputs.
    """
    _check_options(beam, batch_tokens, chunk_lines, max_source_len, too_long)
    device = torch.device(device) if device is not None else _model_device(model)
    opts = dict(beam=beam, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                cuda_graph=cuda_graph, on_decoded=on_decoded)
    numbered = enumerate(lines, start=1)
    was_training = model.training
    model.eval()
    try:
        while chunk := list(islice(numbered, chunk_lines)):
            seqs = [source_ids(tokenizer, line, n, max_source_len, too_long, prepend_src_bos) for n, line in chunk]
            yield from _translate_chunk(model, tokenizer, seqs, batch_tokens, device, opts)
    finally:
        model.train(was_training)


def read_lines_lazily(path: str | os.PathLike[str], too_long: str = "error") -> Iterator[str]:
    """Yield the lines of a UTF-8 file (``.gz`` decompressed) without terminators, one at a time,
    through the bounded reader :func:`posenc.data.text.iter_lines` (``too_long``: its option for a
    line over :data:`~posenc.data.text.MAX_LINE_BYTES`).

    Raises:
        DataError: missing, unreadable or directory path, an over-long line or invalid UTF-8 (naming
        the file and the 1-based line).
    """
    with open_binary(path) as f:
        yield from iter_lines(f, str(path), too_long=too_long)


def read_stdin_lines(too_long: str = "error") -> Iterator[str]:
    """The lines of standard input, read like :func:`read_lines_lazily` (``<stdin>`` in errors)."""
    if sys.stdin is None:  # the process was started with stdin closed
        raise DataError("<stdin>: standard input is closed; give --input FILE")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream substituted for stdin (tests): already decoded
        return (line.rstrip("\n").rstrip("\r") for line in sys.stdin)
    return iter_lines(stream, "<stdin>", too_long=too_long)


def translate_file(
    model: nn.Module,
    tokenizer: Tokenizer,
    in_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    **options: Any,
) -> int:
    """Translate ``in_path`` line by line into ``out_path``; returns the number of lines.

    Streams through :func:`translate_lines` (``options`` are its keyword arguments). The output
    is written atomically
    (:func:`write_translations`), so an interrupted run never leaves a partial output file.
    """
    return write_translations(model, tokenizer, read_lines_lazily(in_path), out_path, **options)


def write_translations(
    model: nn.Module,
    tokenizer: Tokenizer,
    lines: Iterable[str],
    out_path: str | os.PathLike[str],
    follow_symlink: bool = False,
    **options: Any,
) -> int:
    """Translate ``lines`` into ``out_path``; returns the number of lines. The output goes to a
    temporary file next to ``out_path``, renamed over it only when every line is done (an old
    ``out_path`` stays intact on any failure; its directory must exist). ``follow_symlink`` (an
    output the user named): a symlink ``out_path`` stays and its target gets the lines
    (:func:`posenc.files.atomic_output`). ``options`` are :func:`translate_lines`'s."""
    target = Path(out_path)
    if target.is_dir():
        raise DataError(f"{target}: is a directory; give an output file name")
    count = 0
    outputs = translate_lines(model, tokenizer, lines, **options)  # lazy: each line is decoded as it is written
    try:
        with atomic_output(target, follow_symlink=follow_symlink) as f:  # its directory must exist: none is created
            for text in outputs:
                f.write(text + "\n")
                count += 1
    except OSError as err:  # creating, writing or renaming the output (inputs were opened before)
        raise DataError(f"cannot write {target}: {err.strerror or err}") from None
    return count
