"""The GNMT length penalty α chosen on the validation split for each trained run (issue 26 item 2).

MT practice tunes α per system on held-out data; a fixed α = 0.6 for every method makes the
brevity penalty part of a method comparison (SHAPE's VANILLA gap on multi30k_cpu was two thirds
brevity). :func:`tune_length_penalty` decodes the **validation** split once per candidate α
(beam search, ``score(Y) = log P(Y|X) / lp(Y)``, ``lp(Y) = ((5 + |Y|) / 6) ** α``, Wu et al. 2016
eq. 14), scores each with sacreBLEU and returns the α of the highest validation BLEU (ties: the
first listed). The split is fixed here, not a parameter: the test split is never read. The test
BLEU of the run is then decoded with the chosen α (:mod:`posenc.tasks.translation.grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from posenc.pipeline.config import DecodeConfig
from posenc.pipeline.run import LoadedRun, alpha_key, translate_split

#: The split α is chosen on (never a test split).
TUNING_SPLIT = "valid"


def argmax_first(scores: dict[str, float], order: Sequence[str]) -> str:
    """The key of the highest score; ties go to the key listed first in ``order``."""
    return max(order, key=lambda k: (scores[k], -order.index(k)))


def tune_length_penalty(run: LoadedRun, alphas: Sequence[float], decode: DecodeConfig) -> dict[str, Any]:
    """Validation BLEU of ``run`` for each α of ``alphas`` (``decode`` otherwise unchanged) and the
    chosen α: ``{"split": "valid", "sweep": {"0.6": bleu, ...}, "chosen": α}``. The hypotheses go
    to ``translations/valid.lp<α>.beam<K>.hyp``."""
    keys = [alpha_key(a) for a in alphas]
    sweep = {}
    for key, alpha in zip(keys, alphas):
        scores = translate_split(run, TUNING_SPLIT, replace(decode, length_penalty=float(alpha)), stem=f"{TUNING_SPLIT}.lp{key}")
        sweep[key] = float(scores["bleu"])
    return {"split": TUNING_SPLIT, "sweep": sweep, "chosen": float(argmax_first(sweep, keys))}
