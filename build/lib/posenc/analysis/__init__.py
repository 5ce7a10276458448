"""The papers' analyses as library functions (``posenc analyze <name>``).

Every analysis takes plain data (texts, lengths, token ids, CSV logs) and, where it needs model
internals, models following the Seq2SeqTransformer protocol; it writes CSV + PNG files into
``out_dir`` and returns its rows (a list of dicts, the CSV's content before rounding).

:data:`ANALYSES` maps a name to its function and :data:`DESCRIPTIONS` to a one-line summary.
"""

from __future__ import annotations

from typing import Callable

from posenc.analysis import length_bleu as _length_bleu
from posenc.analysis import length_diff as _length_diff
from posenc.analysis import position_nll as _position_nll
from posenc.analysis import shift_invariance as _shift_invariance
from posenc.analysis import significance as _significance
from posenc.analysis import speed as _speed
from posenc.analysis import swapped as _swapped
from posenc.analysis import tokenwise as _tokenwise

ANALYSES: dict[str, Callable[..., list[dict]]] = {
    "swapped": _swapped.swapped,
    "shift_invariance": _shift_invariance.shift_invariance,
    "length_bleu": _length_bleu.length_bleu,
    "tokenwise": _tokenwise.tokenwise,
    "length_diff": _length_diff.length_diff,
    "position_nll": _position_nll.position_nll,
    "bootstrap": _significance.bootstrap_table,
    "speed": _speed.speed,
}

DESCRIPTIONS: dict[str, str] = {
    "swapped": "BLEU of the first sentence of 10-sentence groups in original vs swapped order (SHAPE Table 1)",
    "shift_invariance": "cosine similarity of encoder states under position offsets 0/100/250/500 (SHAPE Fig. 2)",
    "length_bleu": "BLEU and gain over a baseline by source-length bucket, unseen lengths shaded (SHAPE Fig. 3, Neishi Fig. 3)",
    "tokenwise": "gold-token log-prob difference by decoder position × token frequency (SHAPE Fig. 4)",
    "length_diff": "mean output − reference length by source length, output-length histograms (Neishi Fig. 4, 5, 7)",
    "position_nll": "mean NLL per target position on stacked test sets (CAPE Fig. 8)",
    "bootstrap": "pairwise paired-bootstrap significance table between models (Neishi Table 4)",
    "speed": "relative training speed, training time, parameters and learning curves (SHAPE Tables 2/6, Fig. 8-9)",
}

__all__ = ["ANALYSES", "DESCRIPTIONS"]
