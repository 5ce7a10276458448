"""The papers' analyses as library functions (``posenc analyze <name>``).

Every analysis takes plain data (texts, lengths, token ids, CSV logs) and, where it needs model
internals, models following the Seq2SeqTransformer protocol; it writes CSV + PNG files into
``out_dir`` and returns its rows (a list of dicts, the CSV's content before rounding).

:data:`ANALYSES` maps a name to its function and :data:`DESCRIPTIONS` to a one-line summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from posenc.analysis import length_bleu as _length_bleu
from posenc.analysis import length_diff as _length_diff
from posenc.analysis import position_nll as _position_nll
from posenc.analysis import shift_invariance as _shift_invariance
from posenc.analysis import significance as _significance
from posenc.analysis import speed as _speed
from posenc.analysis import swapped as _swapped
from posenc.analysis import tokenwise as _tokenwise

@dataclass(frozen=True)
class Analysis:
    """One analysis: its library function and a one-line description (paper figure/table)."""

    function: Callable[..., list[dict]]
    description: str


#: THE registry of analyses: the experiment schema (``experiment.analyses``), the report and
#: ``posenc analyze`` all take their names from here; the report's adapters (experiments/report.py
#: REPORT_ANALYSES) are checked against it by the tests.
REGISTRY: dict[str, Analysis] = {
    "length_bleu": Analysis(_length_bleu.length_bleu, "BLEU and gain over a baseline by source-length bucket, unseen lengths shaded (SHAPE Fig. 3, Neishi Fig. 3)"),
    "bootstrap": Analysis(_significance.bootstrap_table, "pairwise paired-bootstrap significance table between models (Neishi Table 4)"),
    "length_diff": Analysis(_length_diff.length_diff, "mean output − reference length by source length, output-length histograms (Neishi Fig. 4, 5, 7)"),
    "shift_invariance": Analysis(_shift_invariance.shift_invariance, "cosine similarity of encoder states under position offsets 0/100/250/500 (SHAPE Fig. 2)"),
    "speed": Analysis(_speed.speed, "relative training speed, training time, parameters and learning curves (SHAPE Tables 2/6, Fig. 8-9)"),
    "tokenwise": Analysis(_tokenwise.tokenwise, "gold-token log-prob difference by decoder position × token frequency (SHAPE Fig. 4)"),
    "position_nll": Analysis(_position_nll.position_nll, "mean NLL per target position on stacked test sets (CAPE Fig. 8)"),
    "swapped": Analysis(_swapped.swapped, "BLEU of the first sentence of 10-sentence groups in original vs swapped order, on a training subsample (SHAPE Table 1)"),
}

#: Views of :data:`REGISTRY` (name → function, name → description).
ANALYSES: dict[str, Callable[..., list[dict]]] = {name: a.function for name, a in REGISTRY.items()}
DESCRIPTIONS: dict[str, str] = {name: a.description for name, a in REGISTRY.items()}

__all__ = ["ANALYSES", "DESCRIPTIONS", "REGISTRY", "Analysis"]
