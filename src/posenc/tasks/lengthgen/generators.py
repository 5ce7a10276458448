"""Length-generalization tasks (Delétang et al. 2023; Ruoss et al. 2023), generated on the fly.

Every example is a pure function of ``(task, length, seed, index)``: a ``random.Random`` seeded
with that string (seeding by a string hashes it with SHA-512, stable across processes). Each task
maps an input of ``length`` tokens to an output; the LM reads ``input SEP output``.

Shared vocabulary: 0 PAD, 1 SEP, 2 PLUS, 3 MISSING, then symbols ``SYM + s`` for s = 0..15.

========================  ========================================  =========================
task                      input (length n)                          output
========================  ========================================  =========================
copy                      w ∈ {0,1}^n                                ww ("duplicate string")
reverse                   w ∈ {0,1}^n                                w reversed
sort                      w ∈ {0..15}^n                              w sorted ascending
bucket_sort               w ∈ {0..4}^n (Delétang's alphabet of 5)    w sorted ascending
parity                    w ∈ {0,1}^n                                1 if #1s is odd, else 0
binary_addition           a PLUS b, |a| + |b| = n − 1, LSB first     a + b, LSB first, max(|a|,|b|)+1 bits
decimal_addition          a PLUS b, |a| = ⌈(n−1)/2⌉, |b| = n−1−|a|,   a + b, LSB first, |a|+1 digits
                          decimal digits, LSB first (reversed)
missing_duplicate         ww with one token → MISSING, |w| = ⌊n/2⌋    the replaced token
========================  ========================================  =========================

Decimal addition follows the reversed-digit format of Cho et al. (2024) and McLeish et al. (2024)
(operands of equal length for odd n: 10-digit operands are n = 21, 40-digit ones n = 81).
:func:`coupled_positions` gives the position ids of position coupling / Abacus.

Deviations: binary addition writes the sum with a fixed width max(|a|, |b|) + 1 (leading zeros
kept) so the output length is known; missing duplicate has input length 2⌊n/2⌋ (n rounded down
to even).
"""

from __future__ import annotations

import random
from typing import Callable

PAD, SEP, PLUS, MISSING, SYM = 0, 1, 2, 3, 4
NUM_SYMBOLS = 16
VOCAB_SIZE = SYM + NUM_SYMBOLS

Example = tuple[list[int], list[int]]  # (input tokens, output tokens)


def _symbols(rng: random.Random, n: int, k: int) -> list[int]:
    return [SYM + rng.randrange(k) for _ in range(n)]


def copy(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n, 2)
    return w, w + w


def reverse(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n, 2)
    return w, w[::-1]


def sort(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n, NUM_SYMBOLS)
    return w, sorted(w)


def bucket_sort(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n, 5)
    return w, sorted(w)


def parity(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n, 2)
    return w, [SYM + sum(t - SYM for t in w) % 2]


def to_bits(value: int, width: int) -> list[int]:
    """``value`` as ``width`` bit tokens, least significant first."""
    return [SYM + ((value >> i) & 1) for i in range(width)]


def from_bits(tokens: list[int]) -> int:
    return sum((t - SYM) << i for i, t in enumerate(tokens))


def addition_example(a: list[int], b: list[int]) -> Example:
    """Bits of a and b (LSB first) → ``a PLUS b`` and the sum in max(|a|, |b|) + 1 bits."""
    total = from_bits(a) + from_bits(b)
    return a + [PLUS] + b, to_bits(total, max(len(a), len(b)) + 1)


def binary_addition(rng: random.Random, n: int) -> Example:
    la = rng.randint(1, n - 2)
    return addition_example(_symbols(rng, la, 2), _symbols(rng, n - 1 - la, 2))


def to_digits(value: int, width: int) -> list[int]:
    """``value`` as ``width`` decimal digit tokens, least significant first."""
    return [SYM + (value // 10**i) % 10 for i in range(width)]


def from_digits(tokens: list[int]) -> int:
    return sum((t - SYM) * 10**i for i, t in enumerate(tokens))


def decimal_addition(rng: random.Random, n: int) -> Example:
    """Two decimal numbers of ⌈(n−1)/2⌉ and ⌊(n−1)/2⌋ digits, LSB first → their sum in |a| + 1 digits."""
    la = n // 2
    a, b = _symbols(rng, la, 10), _symbols(rng, n - 1 - la, 10)
    return a + [PLUS] + b, to_digits(from_digits(a) + from_digits(b), la + 1)


def coupled_positions(tokens: list[int]) -> list[int]:
    """Position ids of position coupling (Cho et al. 2024) for LSB-first operands: a token's index in
    its number, 1-based, so digits of one significance in both operands and the sum share an id;
    the separators PLUS and SEP (and PAD) get 0. For LSB-first numbers these are also Abacus's
    digit indices (McLeish et al. 2024). E.g. ``12 PLUS 34 SEP 460`` → ``1 2 0 1 2 0 1 2 3``."""
    ids, k = [], 0
    for t in tokens:
        k = k + 1 if t >= SYM else 0
        ids.append(k)
    return ids


#: ``data.position_ids`` name → the ids of a token sequence (None: the model's default 0..L−1).
POSITION_IDS: dict[str, Callable[[list[int]], list[int]] | None] = {"index": None, "coupled": coupled_positions}


def missing_duplicate(rng: random.Random, n: int) -> Example:
    w = _symbols(rng, n // 2, 2)
    ww = w + w
    i = rng.randrange(len(ww))
    answer, ww[i] = ww[i], MISSING
    return ww, [answer]


#: task name → (generator, smallest valid length)
TASKS: dict[str, tuple[Callable[[random.Random, int], Example], int]] = {
    "copy": (copy, 1),
    "reverse": (reverse, 1),
    "sort": (sort, 1),
    "bucket_sort": (bucket_sort, 1),
    "parity": (parity, 1),
    "binary_addition": (binary_addition, 3),
    "decimal_addition": (decimal_addition, 3),
    "missing_duplicate": (missing_duplicate, 2),
}


def example(task: str, length: int, seed: int, index: int) -> Example:
    """The ``index``-th example of ``task`` at input length ``length`` for ``seed`` (pure)."""
    fn, min_len = TASKS[task]
    if length < min_len:
        raise ValueError(f"task {task} needs length >= {min_len}, got {length}")
    return fn(random.Random(f"{task}:{length}:{seed}:{index}"), length)
