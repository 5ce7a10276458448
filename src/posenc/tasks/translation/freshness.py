"""What a translation cell's freshness judgement adds to the one rule (:mod:`posenc.runs.same_run`):
how it was scored (:func:`evaluation_record`: decoding options and splits), its length-penalty
search (:func:`with_tuning`) and the tokenizer it trained with (:func:`with_tokenizer`); and a run
trained elsewhere that is scored, never retrained (:func:`trained_elsewhere`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from posenc.config import to_dict
from posenc.runs.same_run import Verdict
from posenc.tasks.translation.config import RunConfig
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.spec import TOKENIZER_KEY
from posenc.tasks.translation.tuning import alpha_key, replay


def evaluation_record(cfg: RunConfig, splits: list[str], greedy: list[str] | None = None) -> dict[str, Any]:
    """How a translation cell was scored: its decoding options, splits and the splits also decoded
    greedily (the ``evaluation`` of its record, :class:`~posenc.runs.same_run.RunRecord`; no
    ``greedy_splits`` entry when there are none, so records written before the option stay fresh).

    Args:
        cfg: the cell's run config (its ``decode`` options).
        splits: the splits scored.
        greedy: the splits also decoded greedily (None or empty: none).

    Returns:
        The evaluation record.
    """
    record: dict[str, Any] = {"decode": to_dict(cfg.decode), "splits": list(splits)}
    return dict(record, greedy_splits=list(greedy)) if greedy else record


def with_tuning(exp: ExperimentConfig, results: dict[str, Any], verdict: Any) -> Any:
    """``verdict``, or "rescore" when a fresh cell's length-penalty sweep (``results["length_penalty"]``)
    is not the search ``experiment.tune_length_penalty`` (and ``_max``) asks for: the search replayed
    on the stored validation BLEU (:func:`~posenc.tasks.translation.tuning.replay`) decodes other α
    (the trained model is reused).

    Args:
        exp: the experiment config (its length-penalty search).
        results: the cell's stored results.
        verdict: the verdict so far (None: the cell has to run).

    Returns:
        ``verdict``, or a copy of it of kind ``rescore`` naming the search asked for.
    """
    sweep = results.get("length_penalty", {}).get("sweep", {})
    stored = list(sweep)
    wanted = (replay(exp.tune_length_penalty, exp.tune_length_penalty_max, sweep) if exp.tune_length_penalty else [])
    if verdict is None or verdict.kind != "fresh" or stored == wanted:
        return verdict
    asked = ([alpha_key(a) for a in exp.tune_length_penalty] + [f"search to {exp.tune_length_penalty_max:g}"]
             if exp.tune_length_penalty else "off")
    return replace(verdict, kind="rescore", detail=f"experiment.tune_length_penalty: {stored or 'off'} -> {asked}")


def expected_evaluation(exp: ExperimentConfig, cfg: RunConfig, results: dict[str, Any]) -> dict[str, Any]:
    """The evaluation record a fresh cell holds: its decoding and splits, with the α its splits
    were decoded with when ``exp`` tunes α. That α is the search's output (checked by
    :func:`with_tuning`), so the stored record's own value is taken: results.json files written
    before the tuned α was recorded there (they say ``decode.length_penalty``) stay fresh.

    Args:
        exp: the experiment config (splits, greedy splits, length-penalty search).
        cfg: the cell's run config.
        results: the cell's stored results.

    Returns:
        The evaluation record to judge the stored one against.
    """
    evaluation = evaluation_record(cfg, exp.splits, exp.greedy_splits)
    stored = ((results.get("record") or {}).get("evaluation") or {}).get("decode") or {}
    if exp.tune_length_penalty and "length_penalty" in stored:
        evaluation["decode"]["length_penalty"] = stored["length_penalty"]
    return evaluation


def committed_tokenizer(exp: Any, cfg: RunConfig) -> str | None:
    """Content identity of the SentencePiece model committed with the grid for ``cfg``'s data
    (``<out_dir>/tokenizers/``, :func:`~posenc.tasks.translation.prepare.tokenizer_name`); None
    when the grid has none yet.

    Args:
        exp: the experiment (its ``root``).
        cfg: the cell's run config (its data config names the model).

    Returns:
        The tokenizer's identity, or None.
    """
    from posenc.tasks.translation.prepare import TOKENIZERS_DIR, tokenizer_name

    return _identity_of_file(exp.root / TOKENIZERS_DIR / tokenizer_name(cfg.data))


@functools.lru_cache(maxsize=32)
def _file_identity(path: str, mtime_ns: int, size: int) -> str:
    from posenc.data.spm import Tokenizer

    return Tokenizer.from_file(path).identity


def _identity_of_file(path: Path) -> str | None:
    """:attr:`Tokenizer.identity` of the model file ``path`` (None when absent), parsed once per version."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _file_identity(str(path), st.st_mtime_ns, st.st_size)


def with_tokenizer(exp: Any, cfg: RunConfig, results: dict[str, Any], verdict: Any) -> Any:
    """``verdict``, or stale when the run recorded a tokenizer (``summary.json`` ``tokenizer``) that
    is not the one committed with the grid: its per-subword figures and its stopping signal are of
    other data. A run that recorded none (trained before the record) is not judged on it.

    Args:
        exp: the experiment (its committed tokenizers).
        cfg: the cell's run config.
        results: the cell's stored results.
        verdict: the verdict so far (None: the cell has to run).

    Returns:
        ``verdict``, or a stale verdict naming both tokenizers.
    """
    recorded = (results.get("summary") or {}).get(TOKENIZER_KEY)
    expected = committed_tokenizer(exp, cfg)
    if verdict is None or verdict.kind == "stale" or recorded is None or expected is None or recorded == expected:
        return verdict
    return Verdict("stale", f"tokenizer: trained with {str(recorded)[:12]}, the grid's committed tokenizer is "
                            f"{expected[:12]}", ("tokenizer",))


def trained_elsewhere(cfg: RunConfig, verdict: Verdict | None = None) -> tuple[dict[str, Any], Verdict] | None:
    """The summary of a run of ``cfg`` in ``cfg.out_dir`` whose training ended (patience, or this
    config's step cap) and which keeps its averaged checkpoint but no resumable one: trained on
    another machine and brought back without the optimizer states (e.g. a run trained on a GPU
    machine whose decoding was cut off), with the verdict on its record (``verdict``, the caller's
    where it judged that record, handed on to checkpoint loading, so the run is judged once). Such
    a run is scored, never retrained from scratch over its files; None when ``out_dir`` holds
    anything else (the normal resume path applies).

    Args:
        cfg: the cell's run config.
        verdict: the caller's verdict on the run's record (None: judged here).

    Returns:
        The run's summary and the verdict on its record, or None.
    """
    from posenc.runs.run import Run

    out = Path(cfg.out_dir)
    if not (out / "summary.json").is_file() or not (out / "checkpoints" / "average" / "model.safetensors").is_file():
        return None
    run = Run.judged(cfg, out, load=False, verdict=verdict)
    if run.checkpoint_path is not None or run.verdict is None or run.verdict.kind not in ("fresh", "extend"):
        return None
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    if summary.get("stopped") == "patience":  # ended by its own plateau: other caps or logging change nothing
        return summary, run.verdict
    capped = summary.get("stopped") == "max_steps" and summary.get("max_steps") == cfg.train.max_steps
    return (summary, run.verdict) if capped and run.verdict.kind == "fresh" else None
