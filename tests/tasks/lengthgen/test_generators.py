"""Each generator on hand-made cases, determinism by (task, length, seed, index), lengths."""

from __future__ import annotations

import random

import pytest

from posenc.tasks.lengthgen import generators as g
from posenc.tasks.lengthgen.generators import MISSING, PLUS, SYM, TASKS, example

B0, B1 = SYM, SYM + 1  # the bit tokens


def bits(text: str) -> list[int]:
    return [SYM + int(c) for c in text]


class Fixed(random.Random):
    """A Random whose ``randrange``/``randint`` return preset values (hand-made examples)."""

    def __init__(self, values: list[int]) -> None:
        super().__init__(0)
        self.values = list(values)

    def randrange(self, *args, **kwargs):  # type: ignore[override]
        return self.values.pop(0)

    def randint(self, a, b):  # type: ignore[override]
        return self.values.pop(0)


def test_binary_addition_3_plus_5_lsb_first() -> None:
    """3 = 11, 5 = 101 (LSB first); 8 = 0001 in max(2, 3) + 1 = 4 bits."""
    inp, out = g.addition_example(g.to_bits(3, 2), g.to_bits(5, 3))
    assert inp == bits("11") + [PLUS] + bits("101")
    assert out == bits("0001")
    # the generator itself: split 2|3 and bits 1,1 / 1,0,1 drawn in that order
    assert g.binary_addition(Fixed([2, 1, 1, 1, 0, 1]), 6) == (inp, out)


def test_decimal_addition_by_hand() -> None:
    """478 + 95 = 573, LSB first: 8 7 4 PLUS 5 9 → 3 7 5 0 (|a| + 1 = 4 digits); n = 6: |a| = 3, |b| = 2."""
    inp, out = g.decimal_addition(Fixed([8, 7, 4, 5, 9]), 6)
    assert inp == bits("874") + [PLUS] + bits("59") and out == bits("3750")
    assert g.decimal_addition(Fixed([9, 9, 9, 9]), 5) == (bits("99") + [PLUS] + bits("99"), bits("891"))  # 99 + 99


def test_coupled_position_ids_by_hand() -> None:
    """Cho et al. 2024 / McLeish et al. 2024: the k-th digit (LSB first) of every number gets k; PLUS, SEP 0."""
    seq = bits("874") + [PLUS] + bits("59") + [g.SEP] + bits("3750")
    assert g.coupled_positions(seq) == [1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]
    assert g.coupled_positions(bits("12") + [PLUS] + bits("34") + [g.SEP, g.PAD]) == [1, 2, 0, 1, 2, 0, 0]
    assert g.POSITION_IDS["index"] is None


def test_parity_sort_reverse_copy_by_hand() -> None:
    assert g.parity(Fixed([1, 0, 1, 1]), 4) == (bits("1011"), [B1])
    assert g.parity(Fixed([1, 0, 0, 1]), 4) == (bits("1001"), [B0])
    assert g.reverse(Fixed([1, 1, 0]), 3) == (bits("110"), bits("011"))
    assert g.copy(Fixed([1, 0]), 2) == (bits("10"), bits("1010"))
    assert g.sort(Fixed([9, 3, 12, 3]), 4)[1] == [SYM + 3, SYM + 3, SYM + 9, SYM + 12]
    assert g.bucket_sort(Fixed([4, 0, 2]), 3)[1] == [SYM, SYM + 2, SYM + 4]


def test_missing_duplicate_by_hand() -> None:
    # w = 101, ww = 101101, position 4 (a 0) is replaced by MISSING
    inp, out = g.missing_duplicate(Fixed([1, 0, 1, 4]), 6)
    assert inp == bits("1011") + [MISSING] + bits("1") and out == [B0]


@pytest.mark.parametrize("task", list(TASKS))
def test_deterministic_and_distinct(task: str) -> None:
    assert example(task, 17, 3, 5) == example(task, 17, 3, 5)
    others = {str(example(task, 17, 3, i)) for i in range(20)} | {str(example(task, 17, 4, 5))}
    assert len(others) > 10  # different indices/seeds give different examples


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("length", [3, 8, 41, 500])
def test_lengths_and_answers(task: str, length: int) -> None:
    for index in range(5):
        inp, out = example(task, length, 1, index)
        expected = 2 * (length // 2) if task == "missing_duplicate" else length
        assert len(inp) == expected
        check = {  # each output against its closed form
            "copy": lambda: out == inp + inp,
            "reverse": lambda: out == inp[::-1],
            "sort": lambda: out == sorted(inp),
            "bucket_sort": lambda: out == sorted(inp) and max(inp) < SYM + 5,
            "parity": lambda: out == [SYM + sum(t - SYM for t in inp) % 2],
            "binary_addition": lambda: g.from_bits(out) == sum(g.from_bits(p) for p in _split(inp)),
            "decimal_addition": lambda: g.from_digits(out) == sum(g.from_digits(p) for p in _split(inp))
            and len(out) == len(_split(inp)[0]) + 1 and max(inp) < SYM + 10,
            "missing_duplicate": lambda: _fill(inp, out[0]),
        }[task]
        assert check()


def _split(inp: list[int]) -> list[list[int]]:
    i = inp.index(PLUS)
    return [inp[:i], inp[i + 1:]]


def _fill(inp: list[int], answer: int) -> bool:
    filled = [answer if t == MISSING else t for t in inp]
    half = len(filled) // 2
    return inp.count(MISSING) == 1 and filled[:half] == filled[half:]


def test_too_short_is_rejected() -> None:
    with pytest.raises(ValueError, match="binary_addition needs length >= 3"):
        example("binary_addition", 2, 1, 0)
