"""Streaming translation with a copy model: order, laziness, over-long lines, atomic files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest

from posenc.decoding import translate_file, translate_lines
from posenc.errors import DataError
from tests.helpers.dummies import CopyModel, WordTokenizer

WORDS = "the a cat dog sat on mat ran far away quickly".split()


@pytest.fixture
def tok() -> WordTokenizer:
    return WordTokenizer(WORDS)


@pytest.fixture
def model(tok: WordTokenizer) -> CopyModel:
    return CopyModel(tok.bos_id, tok.eos_id, tok.vocab_size)


def sentences(n: int) -> list[str]:
    """n lines with lengths 0..12 in a scrambled order, all different."""
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range((i * 7) % 13)) + f" {WORDS[i % 11]}" for i in range(n)]


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("prepend_bos", [False, True])
def test_output_order_matches_input(model: CopyModel, tok: WordTokenizer, beam: int, prepend_bos: bool) -> None:
    lines = sentences(23)
    lines[4:4] = ["", "   "]  # empty sources give empty outputs
    out = list(
        translate_lines(model, tok, lines, beam=beam, batch_tokens=20, chunk_lines=5, prepend_src_bos=prepend_bos)
    )
    assert out == [" ".join(line.split()) for line in lines]


def test_streams_from_a_generator(model: CopyModel, tok: WordTokenizer) -> None:
    consumed = []

    def source() -> Iterator[str]:
        for i, line in enumerate(sentences(50)):
            if i >= 8:
                raise AssertionError("input read beyond the second chunk")
            consumed.append(i)
            yield line

    first = list(islice(translate_lines(model, tok, source(), beam=2, chunk_lines=4), 5))
    assert first == [" ".join(s.split()) for s in sentences(5)]
    assert len(consumed) == 8  # two chunks of 4 lines, nothing more


def test_too_long_line_error_names_line(model: CopyModel, tok: WordTokenizer) -> None:
    lines = ["the cat", "a dog", "the cat sat on the mat", "dog"]
    with pytest.raises(DataError, match=r"^input line 3: 6 source tokens exceed max_source_len=5 \(posenc translate --too-long truncate cuts such lines\)$"):
        list(translate_lines(model, tok, lines, beam=2, max_source_len=5))


def test_too_long_line_truncates_with_warning(model: CopyModel, tok: WordTokenizer) -> None:
    lines = ["the cat", "the cat sat on the mat"]
    with pytest.warns(UserWarning, match="input line 2"):
        out = list(translate_lines(model, tok, lines, beam=2, max_source_len=5, too_long="truncate"))
    assert out == ["the cat", "the cat sat on the"]


def test_restores_training_mode(model: CopyModel, tok: WordTokenizer) -> None:
    model.train()
    assert list(translate_lines(model, tok, ["a cat"], beam=1)) == ["a cat"]
    assert model.training


def test_translate_file_writes_all_lines(model: CopyModel, tok: WordTokenizer, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    lines = sentences(12)
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "sub" / "out.txt"
    with pytest.raises(DataError, match="cannot write"):  # its directory must exist: none is created
        translate_file(model, tok, src, out, beam=2, chunk_lines=5)
    assert not out.parent.exists()
    out.parent.mkdir()
    assert translate_file(model, tok, src, out, beam=2, chunk_lines=5) == 12
    assert out.read_text(encoding="utf-8").splitlines() == [" ".join(line.split()) for line in lines]


def test_translate_file_failure_keeps_old_output(model: CopyModel, tok: WordTokenizer, tmp_path: Path) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("the cat\n" * 6 + "the cat sat on the mat\n", encoding="utf-8")
    out.write_text("old\n", encoding="utf-8")
    with pytest.raises(DataError, match="input line 7"):
        translate_file(model, tok, src, out, beam=2, chunk_lines=3, max_source_len=5)
    assert out.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]


def test_translate_file_invalid_utf8_names_line(model: CopyModel, tok: WordTokenizer, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"the cat\na dog\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"in\.txt: line 3: invalid UTF-8"):
        translate_file(model, tok, src, tmp_path / "out.txt", beam=1)
    assert not (tmp_path / "out.txt").exists()


def test_transformer_translation_equals_per_line_beam_search(tok: WordTokenizer) -> None:
    import torch

    from posenc.decoding import beam_search
    from posenc.models.seq2seq import Seq2SeqTransformer
    from tests.conftest import tiny_config

    model = Seq2SeqTransformer(tiny_config("rpe", vocab=tok.vocab_size)).eval()
    lines = sentences(7)
    kw = dict(max_len_a=0.5, max_len_b=3)
    out = list(translate_lines(model, tok, lines, beam=2, batch_tokens=16, chunk_lines=4, **kw))
    fixed = list(translate_lines(model, tok, lines, beam=2, batch_tokens=16, chunk_lines=4, cuda_graph=True, **kw))
    assert fixed == out  # the CUDA-graph path (fixed shapes; eager on CPU) translates alike
    expected = []
    for line in lines:
        src = torch.tensor([tok.encode(line)])
        best = beam_search(model, src, torch.ones_like(src, dtype=torch.bool), tok.bos_id, tok.eos_id, beam=2, **kw)
        expected.append(tok.decode(best[0][0].tokens))
    assert out == expected


def test_beam_over_the_limit_is_refused(model: CopyModel, tok: WordTokenizer) -> None:
    from posenc.decoding.translate import MAX_BEAM
    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match=f"limit of {MAX_BEAM}"):
        list(translate_lines(model, tok, ["the cat"], beam=MAX_BEAM + 1))


def test_batches_keep_decoder_rows_and_tokens_under_the_bounds(model: CopyModel, tok: WordTokenizer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import posenc.decoding.translate as tr

    lines = sentences(40)
    expected = list(translate_lines(model, tok, lines, beam=4, batch_tokens=400))
    sizes: list[int] = []
    monkeypatch.setattr(tr, "DECODER_ROWS", 12)  # B * K <= 12 at K = 4: batches of <= 3 sentences
    assert list(translate_lines(model, tok, lines, beam=4, batch_tokens=400, on_decoded=sizes.append)) == expected
    assert max(sizes) == 3 and sum(sizes) == len(lines)
    sizes.clear()
    monkeypatch.setattr(tr, "DECODER_ROWS", 1 << 14)
    monkeypatch.setattr(tr, "DECODER_TOKENS", 4 * 13)  # B * S <= 13 at K = 4
    assert list(translate_lines(model, tok, lines, beam=4, batch_tokens=400, on_decoded=sizes.append)) == expected
    lengths = {len(tok.encode(line)) for line in lines}
    assert max(sizes) <= 13 // min(lengths) and sum(sizes) == len(lines)
    assert tr._length_batches([3, 3, 3, 3, 3], 100, max_sentences=2) == [[0, 1], [2, 3], [4]]
