"""Is a finished grid cell still the answer to the current config? (issue 13, issue 10 item 6)

Every ``results.json`` written by ``posenc experiment`` carries a ``record``: the run's
:func:`posenc.pipeline.fingerprint.fingerprint` (everything that determines its data and model),
the values of the training-extension keys (:data:`~posenc.pipeline.fingerprint.EXTENSION_KEYS`)
and the evaluation settings (decoding options and splits). The record lives inside results.json,
so it can never disagree with the numbers next to it, and it does not collide with the
``fingerprint.json`` that ``posenc train`` keeps for resuming a run directory.

Verdicts, from the stored record against the current run config:

``fresh``
    nothing differs: the results are reused.
``rescore``
    only decoding or splits differ: the trained model is reused, the splits are translated again.
``extend``
    only extension keys differ (``max_steps`` 2000 → 4000, patience, ...): training *resumes* from
    the run's last checkpoint under the new caps and the run is scored again. Old results are never
    returned for a longer budget. A budget *below* the steps already trained cannot be honoured by
    resuming, so it counts as ``stale``.
``stale``
    the fingerprint differs (or the results predate fingerprints): the experiment stops with one
    line naming the differing keys, or with ``--rerun-stale`` deletes the run directory and trains
    it again from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.config import to_dict
from posenc.pipeline.fingerprint import EXTENSION_KEYS, PLACEMENT_KEYS, describe_diff, fingerprint
from posenc.training.config import TrainConfig


@dataclass(frozen=True)
class Verdict:
    kind: str  # fresh | rescore | extend | stale
    detail: str = ""  # describe_diff of what differs ('' when fresh)


def run_record(cfg: Any, splits: list[str]) -> dict[str, Any]:
    """What results.json stores about the config that produced it."""
    train = to_dict(cfg.train)
    return {
        "fingerprint": fingerprint(cfg),
        "extension": {k: train[k] for k in sorted(EXTENSION_KEYS) if k in train},
        "evaluation": {"decode": to_dict(cfg.decode), "splits": list(splits)},
    }


def judge(saved: dict[str, Any] | None, current: dict[str, Any], steps_done: int | None = None) -> Verdict:
    """Compare a stored :func:`run_record` (None: results without one) with the current one."""
    if not saved or "fingerprint" not in saved:
        return Verdict("stale", "results.json has no config fingerprint (written before fingerprints were stored)")
    if saved["fingerprint"] != current["fingerprint"]:
        return Verdict("stale", describe_diff(saved["fingerprint"], current["fingerprint"]))
    renamed = TrainConfig._renamed  # records written before a key's rename (bleu_every) stay fresh
    old_ext = {renamed.get(k, k): v for k, v in saved.get("extension", {}).items() if k not in PLACEMENT_KEYS}
    new_ext = {k: v for k, v in current["extension"].items() if k not in PLACEMENT_KEYS}
    if old_ext != new_ext:
        detail = describe_diff({"train": old_ext}, {"train": new_ext})
        cap = int(new_ext.get("max_steps") or 0)
        if cap and steps_done is not None and steps_done > cap:
            return Verdict("stale", f"{detail}: {steps_done} steps already trained exceed the new max_steps")
        return Verdict("extend", detail)
    old_eval = saved.get("evaluation", {})
    if old_eval != current["evaluation"]:
        return Verdict("rescore", describe_diff(old_eval, current["evaluation"]))
    return Verdict("fresh")

