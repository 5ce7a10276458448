"""The papers' analyses as library functions (``posenc analyze <name>``).

Every analysis takes plain data (texts, lengths, token ids, CSV logs) and, where it needs model
internals, models following the Seq2SeqTransformer protocol; it writes CSV + PNG files into
``out_dir`` and returns its rows (a list of dicts, the CSV's content before rounding).

:data:`REGISTRY` (analysis/registry.py) holds every analysis with its options schema;
:data:`ANALYSES` maps a name to its function and :data:`DESCRIPTIONS` to a one-line summary.
"""

from __future__ import annotations

from typing import Callable

from posenc.analysis.registry import REGISTRY, Analysis, AnalysisOptions, check_options

#: Views of :data:`REGISTRY` (name → function, name → description).
ANALYSES: dict[str, Callable[..., list[dict]]] = {name: a.function for name, a in REGISTRY.items()}
DESCRIPTIONS: dict[str, str] = {name: a.description for name, a in REGISTRY.items()}

__all__ = ["ANALYSES", "DESCRIPTIONS", "REGISTRY", "Analysis", "AnalysisOptions", "check_options"]
