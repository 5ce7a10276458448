"""Run fingerprints: what determines a run's data and model, so a run directory never lies.

A run directory's ``fingerprint.json`` records :func:`fingerprint` of the resolved config it was
trained with (in its :class:`~posenc.runs.same_run.RunRecord`). Whether a stored record and today's
config are the same run is decided in one place,
:func:`posenc.runs.same_run.same_run` (``posenc train``, ``posenc experiment`` and the methods
grids all ask it): differences that only extend or observe training (:data:`EXTENSION_KEYS`:
step/epoch caps, patience, logging, checkpoint bookkeeping, device) never make a run stale.
Nothing in it depends on the machine: ``precision: auto`` stays ``auto`` (:data:`PLACED_WHEN_AUTO`).

The fingerprint holds what determines the training, and only that: of ``model.position`` the name
and the option blocks of the *active* methods (:func:`determining_dict`), so registering a new
method never changes an existing run's fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from posenc.config import to_dict
from posenc.runs.differences import config_differences, describe_differences
from posenc.runs.spec import RunSpec, spec_of

#: ``train.*`` options that may change between a run and its resumption: they extend training
#: or only change what is logged/kept, never what has been trained so far.
EXTENSION_KEYS = frozenset({
    "max_steps", "max_epochs", "patience", "log_every", "validate_every", "save_every", "keep_last",
    "average_last", "average_best", "metric_every", "num_threads", "device", "min_delta",
    "min_delta_abs",
})

#: Extension keys that say where a run trained, not how long or on what: a finished run's results
#: stay fresh when only these differ (a converged run trained on a GPU in fp32 answers the same config
#: as one trained on the CPU); the results still record them.
PLACEMENT_KEYS = frozenset({"device", "num_threads"})

#: ``train.*`` options that change how fast a run trains, not what it trains (torch.compile gives
#: the eager result up to float rounding): neither in the fingerprint nor an extension.
RUNTIME_KEYS = frozenset({"compile"})

#: Extension keys that are the schedule's horizon under a :data:`~posenc.training.config.HORIZON_SCHEDULES`
#: schedule (cosine decays over all updates): there they change every update's learning rate, so they
#: stay in the fingerprint and a run cannot be resumed under another cap.
HORIZON_KEYS = frozenset({"max_steps", "max_epochs"})

#: ``train.*`` options whose value ``auto`` leaves the choice to where the run trains (the trainer
#: resolves it there and the run's summary records what it used): placement, not identity. A stored
#: run answers a config that says ``auto`` whatever it recorded for them (a record of an older posenc
#: holds the value ``auto`` resolved to there); a config that names a value asks for that value.
PLACED_WHEN_AUTO = frozenset({"precision"})

#: Top-level sections of a run config that never enter the fingerprint (where, not what); a task's
#: sections that only say how its runs are scored are its spec's ``scoring_sections``.
IGNORED_SECTIONS = frozenset({"out_dir", "data_dir"})


def fingerprint(cfg: Any) -> dict[str, Any]:
    """The parts of a resolved run config that determine its data and its model, the same on every
    machine: every section except paths, the task's scoring sections (its spec's
    ``scoring_sections``) and the model sections of other architectures (``cfg.inactive_sections``),
    the position blocks of active methods only (:func:`determining_dict`), with ``train`` minus
    :data:`EXTENSION_KEYS` (but for a cosine schedule its horizon, :data:`HORIZON_KEYS`). A
    :data:`PLACED_WHEN_AUTO` option stays ``auto``: the trainer resolves it where the run trains.

    Args:
        cfg: a run config (a dataclass).

    Returns:
        The fingerprint, JSON-safe.
    """
    data = determining_dict(cfg)
    ignored = IGNORED_SECTIONS | set(spec_of(cfg).scoring_sections) | set(getattr(cfg, "inactive_sections", ()))
    out = {k: v for k, v in data.items() if k not in ignored}
    if isinstance(out.get("train"), dict):
        left_out = (EXTENSION_KEYS | RUNTIME_KEYS) - (HORIZON_KEYS if _horizon_schedule(out["train"]) else frozenset())
        out["train"] = {k: v for k, v in out["train"].items() if k not in left_out}
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def determining_dict(cfg: Any) -> Any:
    """:func:`posenc.config.to_dict` of ``cfg``, but a section that can say what of it determines a
    run (a ``determining_dict()`` method: ``PositionConfig`` keeps ``name`` and its active methods'
    blocks) gives only that.

    Args:
        cfg: a run config (a dataclass), or any section of one.

    Returns:
        Its plain nested dict form, each section that has a ``determining_dict()`` as that gives it.
    """
    return to_dict(cfg, "determining_dict")


def _horizon_schedule(train: dict[str, Any]) -> bool:
    """Does ``train``'s schedule decay over the run's total updates (cosine)?"""
    from posenc.training.config import HORIZON_SCHEDULES

    return train.get("schedule") in HORIZON_SCHEDULES


def data_fingerprint(data_cfg: Any, spec: RunSpec) -> dict[str, Any]:
    """What determines a prepared data directory.

    Args:
        data_cfg: a task's data config (a dataclass).
        spec: that task's spec: its ``data_runtime_keys`` are left out.

    Returns:
        The data config minus ``spec.data_runtime_keys``, JSON-safe.
    """
    data = to_dict(data_cfg)
    return json.loads(json.dumps({k: v for k, v in data.items() if k not in spec.data_runtime_keys}, sort_keys=True,
                                 default=str))


def digest(fp: dict[str, Any]) -> str:
    """Short stable hash of a fingerprint (for directory names and quick equality).

    Args:
        fp: a fingerprint (:func:`fingerprint` or :func:`data_fingerprint`), or any JSON-safe dict.

    Returns:
        The first 16 hex digits of the SHA-256 of its key-sorted JSON: equal for equal dicts,
        whatever their key order.
    """
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def diff_keys(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Which keys two fingerprints differ at (:func:`~posenc.runs.differences.config_differences`).

    Args:
        saved: the stored fingerprint.
        new: the fingerprint it is compared with.

    Returns:
        The dotted keys whose values differ, sorted; empty when the fingerprints are the same.
    """
    return [key for key, _, _ in config_differences(saved, new)]


def describe_diff(saved: dict[str, Any], new: dict[str, Any], limit: int = 4) -> str:
    """What two fingerprints differ at, in one line for a message.

    Args:
        saved: the stored fingerprint.
        new: the fingerprint it is compared with.
        limit: how many differences to spell out; the rest are counted.

    Returns:
        ``model.d_model (256 -> 512), data.corpus ('bible' -> 'toy')`` (see
        :func:`~posenc.runs.differences.describe_differences`).
    """
    return describe_differences(config_differences(saved, new), limit)

