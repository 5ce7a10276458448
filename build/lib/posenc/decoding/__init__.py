"""Decoding: greedy and beam search over the incremental model protocol, streaming translation."""

from posenc.decoding.search import Hypothesis, beam_search, gnmt_length_penalty, greedy_search, max_lengths
from posenc.decoding.translate import read_lines_lazily, translate_file, translate_lines

__all__ = [
    "Hypothesis",
    "beam_search",
    "gnmt_length_penalty",
    "greedy_search",
    "max_lengths",
    "read_lines_lazily",
    "translate_file",
    "translate_lines",
]
