"""Run fingerprints: what determines a run's data and model, so a run directory never lies.

A run directory's ``fingerprint.json`` records :func:`fingerprint` of the resolved config it was
trained with (in its :class:`~posenc.runs.same_run.RunRecord`). Whether a stored record and today's
config are the same run is decided in one place,
:func:`posenc.runs.same_run.same_run` (``posenc train``, ``posenc experiment`` and the methods
grids all ask it): differences that only extend or observe training (:data:`EXTENSION_KEYS`:
step/epoch caps, patience, logging, checkpoint bookkeeping, device) never make a run stale.

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
from posenc.runs.spec import spec_of

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

#: Top-level sections of a run config that never enter the fingerprint (where, not what); a task's
#: sections that only say how its runs are scored are its spec's ``scoring_sections``.
IGNORED_SECTIONS = frozenset({"out_dir", "data_dir"})


def fingerprint(cfg: Any) -> dict[str, Any]:
    """The parts of a resolved run config (a dataclass) that determine its data and its model:
    every section except paths, the task's scoring sections (its spec's ``scoring_sections``) and
    the model sections of other architectures (``cfg.inactive_sections``), the position blocks of
    active methods only (:func:`determining_dict`),
    with ``train`` minus :data:`EXTENSION_KEYS` (but for a cosine
    schedule its horizon, :data:`HORIZON_KEYS`) and its ``precision: auto`` resolved as the
    trainer will on this machine."""
    data = determining_dict(cfg)
    ignored = IGNORED_SECTIONS | set(spec_of(cfg).scoring_sections) | set(getattr(cfg, "inactive_sections", ()))
    out = {k: v for k, v in data.items() if k not in ignored}
    if isinstance(out.get("train"), dict):
        left_out = (EXTENSION_KEYS | RUNTIME_KEYS) - (HORIZON_KEYS if _horizon_schedule(out["train"]) else frozenset())
        out["train"] = {k: v for k, v in out["train"].items() if k not in left_out}
        if out["train"].get("precision") == "auto":  # what it means here: runs of fp32 days stay fresh on CPU
            width = _model_width(cfg)
            out["train"]["precision"] = _auto_precision(str(cfg.train.device), width)
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def determining_dict(cfg: Any) -> Any:
    """:func:`posenc.config.to_dict` of ``cfg``, but a section that can say what of it determines a
    run (a ``determining_dict()`` method: ``PositionConfig`` keeps ``name`` and its active methods'
    blocks) gives only that."""
    return to_dict(cfg, "determining_dict")


def _horizon_schedule(train: dict[str, Any]) -> bool:
    """Does ``train``'s schedule decay over the run's total updates (cosine)?"""
    from posenc.training.config import HORIZON_SCHEDULES

    return train.get("schedule") in HORIZON_SCHEDULES


def _auto_precision(device: str, width: int | None = None) -> str:
    """``train.precision: auto`` resolved as the trainer will on this machine for ``train.device``
    (``auto``/``cuda`` train on the GPU when there is one) and the model ``width`` (on a CPU, bf16
    only from a measured width on): training/precision.resolve_precision."""
    import torch

    from posenc.training.precision import resolve_precision  # torch: imported when a config says auto

    cuda = device != "cpu" and torch.cuda.is_available()
    return resolve_precision("auto", torch.device("cuda" if cuda else "cpu"), width)


def _model_width(cfg: Any) -> int | None:
    """The width the trainer is given (a task's ``width``): ``d_model`` of the active model
    section (``cfg.model_section`` where the config has several, e.g. ``rnn``: its ``hidden``)."""
    section = getattr(cfg, str(getattr(cfg, "model_section", "model")), None)
    width = getattr(section, "d_model", getattr(section, "hidden", None))
    return int(width) if isinstance(width, int) else None


#: ``data.*`` options that do not change the prepared data directory (used when training and using
#: a model only), so prepared data is shared across them.
DATA_RUNTIME_KEYS = frozenset({"max_source_len", "max_train_len"})


def data_fingerprint(data_cfg: Any) -> dict[str, Any]:
    """What determines a prepared data directory: the data config minus :data:`DATA_RUNTIME_KEYS`."""
    data = to_dict(data_cfg)
    return json.loads(json.dumps({k: v for k, v in data.items() if k not in DATA_RUNTIME_KEYS}, sort_keys=True,
                                 default=str))


def digest(fp: dict[str, Any]) -> str:
    """Short stable hash of a fingerprint (for directory names and quick equality)."""
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]


def diff_keys(saved: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two fingerprints (sorted; posenc.config.config_differences)."""
    return [key for key, _, _ in config_differences(saved, new)]


def describe_diff(saved: dict[str, Any], new: dict[str, Any], limit: int = 4) -> str:
    """One-line description: ``model.d_model (256 -> 512), data.corpus ('bible' -> 'toy')``."""
    return describe_differences(config_differences(saved, new), limit)

