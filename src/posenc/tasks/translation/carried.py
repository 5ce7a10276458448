"""A translation cell trained on another machine and brought back (``posenc experiment --merge``),
held to what is here before it is placed: every BLEU and chrF its results.json reports for a split
is recomputed with the local sacreBLEU (:func:`~posenc.evaluation.metrics.corpus_scores`) from the
hypothesis file it carries against the references of this grid's prepared data, and so is each
validation BLEU of its length-penalty sweep (they chose the α its splits were decoded with); the
SentencePiece model it trained with must be the one prepared here, where both record its identity
(:func:`tokenizer_mismatch`). A
stored score more than :data:`TOLERANCE` from the recomputed one, or one that cannot be recomputed
(its hypotheses missing, of another length than the references), refuses the cell.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from posenc.data.text import read_lines
from posenc.errors import PosencError
from posenc.evaluation.metrics import corpus_scores
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.load import alpha_key
from posenc.tasks.translation.spec import TOKENIZER_KEY, VOCAB_FILE
from posenc.window.intake import plain_name, shown

#: How far a stored score may lie from the one recomputed here (BLEU and chrF points): rounding
#: only; the same hypotheses, references and sacreBLEU give the same score.
TOLERANCE = 0.01


class _Unscorable(Exception):
    """A stored score that cannot be recomputed from what the cell carries (the message says why)."""


def check_carried(cfg: RunConfig, splits: list[str], results: dict[str, Any], run_dir: Path) -> str | None:
    """Why the carried cell of ``cfg`` (its files in ``run_dir``, its ``results``, scored on
    ``splits``) does not hold against this grid's prepared data (one line), or None when its
    tokenizer is the one here and every stored score is what its hypotheses give."""
    summary = results.get("summary")
    why = tokenizer_mismatch(summary if isinstance(summary, dict) else {}, _tokenizer_here(cfg))
    if why is not None:
        return why
    data = Path(cfg.prepared_dir)
    try:
        for label, hyp, split, stored in _claims(cfg, splits, results):
            why = _disagreement(label, run_dir, hyp, data / f"{split}.tgt", stored)
            if why is not None:
                return why
    except _Unscorable as err:
        return str(err)
    return None


def tokenizer_mismatch(carried: dict[str, Any], here: str) -> str | None:
    """The one comparison of a carried cell's tokenizer with the grid's: the content identity its
    summary records (``carried``, :data:`~posenc.tasks.translation.spec.TOKENIZER_KEY`) must be
    ``here``, the identity of the model the grid's data are prepared with (its committed one). A cell
    that records none is refused too: nothing shows it trained on the grid's subwords."""
    recorded = carried.get(TOKENIZER_KEY)
    if recorded == here:
        return None
    return (f"it trained with tokenizer {shown(str(recorded), 20) if recorded else '(none recorded)'}, the grid's "
            f"data here are tokenized with {here[:12]}")


def _tokenizer_here(cfg: RunConfig) -> str:
    """The content identity of the SentencePiece model of the data prepared here for ``cfg``."""
    from posenc.data.spm import Tokenizer

    return Tokenizer.from_file(Path(cfg.prepared_dir) / VOCAB_FILE).identity


def _claims(cfg: RunConfig, splits: list[str], results: dict[str, Any]
            ) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """``(label, hypothesis file, split, {metric: stored score})`` of every score the results
    report: each split the grid scores, then each α of the validation sweep."""
    scores = results.get("scores")
    for split in splits:
        entry = scores.get(split) if isinstance(scores, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("hyp"), str):
            raise _Unscorable(f"its results.json reports no {split} score with its hypotheses")
        yield split, entry["hyp"], split, {"BLEU": entry.get("bleu"), "chrF": entry.get("chrf")}
    greedy = results.get("greedy", {})
    for split, entry in (greedy.items() if isinstance(greedy, dict) else ()):
        if not isinstance(entry, dict) or not isinstance(entry.get("hyp"), str):
            raise _Unscorable(f"its results.json reports a greedy {shown(str(split), 20)} score without its hypotheses")
        yield f"{split} (greedy)", entry["hyp"], str(split), {"BLEU": entry.get("bleu"), "chrF": entry.get("chrf")}
    tuning = results.get("length_penalty")
    if not isinstance(tuning, dict):
        return
    sweep = tuning.get("sweep")
    if not isinstance(sweep, dict) or tuning.get("split") != "valid":
        raise _Unscorable("its results.json holds a length-penalty search without a validation sweep")
    for alpha, bleu in sweep.items():
        if not _is_alpha_key(alpha):
            raise _Unscorable(f"its length-penalty sweep has α {shown(str(alpha), 20)}, not a number >= 0")
        yield f"valid (α {alpha})", f"translations/valid.lp{alpha}.beam{cfg.decode.beam}.hyp", "valid", {"BLEU": bleu}


def _is_alpha_key(key: str) -> bool:
    """Whether ``key`` is an α as the sweep writes it (``alpha_key``: ``0.6``, ``1``)."""
    try:
        return 0 <= float(key) < math.inf and alpha_key(float(key)) == key
    except ValueError:
        return False


def _disagreement(label: str, run_dir: Path, hyp: str, ref: Path, stored: dict[str, Any]) -> str | None:
    """Which stored score of ``label`` differs from the one its hypothesis file ``hyp`` (relative
    to ``run_dir``) gives against ``ref`` (one line), or None when each is within :data:`TOLERANCE`."""
    parts = hyp.split("/")
    if not plain_name(hyp) or len(parts) != 2 or parts[0] != "translations" or not parts[1].endswith(".hyp"):
        raise _Unscorable(f"its {label} score names hypotheses {shown(hyp)}, not a translations/*.hyp file")
    if not (run_dir / hyp).is_file():
        raise _Unscorable(f"its {label} score's hypotheses {hyp} are not in the archive")
    try:
        scores = corpus_scores(read_lines(run_dir / hyp), read_lines(ref), hyp_name=hyp, ref_name=str(ref))
    except PosencError as err:
        raise _Unscorable(f"its {label} score cannot be recomputed ({str(err).splitlines()[0][:200]})") from None
    for metric, value in stored.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Unscorable(f"its {label} {metric} is {shown(str(value), 30)}, not a number")
        here = scores[metric.lower()]
        if abs(value - here) > TOLERANCE:
            return f"{label} {metric} {value:.2f} is {here:.2f} from its {hyp} against {ref}"
    return None
