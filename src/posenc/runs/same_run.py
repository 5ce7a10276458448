"""Is a stored run the run today's config asks for? The one rule, asked everywhere.

``posenc train`` asks it before resuming a run directory (its ``fingerprint.json``:
:func:`posenc.runs.rundir.check_resumable`), ``posenc experiment`` for every translation cell
(the record in its ``results.json``) and the methods grids (lengthgen, vision, speech) for every
cell (the whole config its ``results.json`` records). One answer, :class:`Verdict`:

``fresh``
    nothing that determines the run differs: its results are reused, its directory resumes.
``rescore``
    only the evaluation differs (decoding, splits): the trained model is scored again.
``extend``
    only training-extension keys differ (:data:`~posenc.runs.fingerprint.EXTENSION_KEYS`:
    ``max_steps`` 2000 → 4000, patience, ...): training resumes under the new caps. A cap *below*
    the steps already trained cannot be honoured by resuming: ``stale``.
``stale``
    the fingerprint differs (the differing keys are named), or nothing comparable was recorded.

Stored records are read **through today's config classes** (:func:`read_stored`): old option names
mapped, options added since then filled in with today's defaults, and position blocks of methods
the run did not use dropped. So registering a method, or adding an option whose default reproduces
the old behaviour, changes no verdict: old runs resume and committed results stay fresh.
Where a run trained (:data:`~posenc.runs.fingerprint.PLACEMENT_KEYS`) never matters.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from posenc.config import ABSENT, config_differences, describe_differences, from_dict, to_dict
from posenc.errors import ConfigError
from posenc.runs.fingerprint import EXTENSION_KEYS, PLACEMENT_KEYS, fingerprint, placed_as

#: Keys filled in from the prepared data (vocabulary size, CAPE's α): an unresolved 0 in a new
#: config means "take it from the data", so it is not a difference.
DERIVED_KEYS = frozenset({"model.vocab_size", "rnn.vocab_size", "model.position.cape.source_scale"})


@dataclass(frozen=True)
class Verdict:
    """The answer of :func:`same_run`: ``kind`` (fresh | rescore | extend | stale), a one-line
    ``detail`` of what differs ('' when fresh) and the differing dotted ``keys``."""

    kind: str
    detail: str = ""
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stored:
    """What a run directory or results file recorded about the config that produced it.

    ``config`` is a fingerprint or a whole config, as written by any posenc version; ``whole`` says
    it holds the training-extension values too (a methods grid's record; a translation record's
    are merged in). A bare fingerprint records none, so extension keys are not compared (a run
    directory resumes under any caps)."""

    config: dict[str, Any] | None
    evaluation: dict[str, Any] | None = None
    steps: int | None = None
    whole: bool = False

    @classmethod
    def of_fingerprint(cls, fp: dict[str, Any] | None) -> Stored:
        """A run directory's ``fingerprint.json``."""
        return cls(fp)

    @classmethod
    def of_record(cls, record: dict[str, Any] | None, steps: int | None = None) -> Stored:
        """A translation cell's ``results.json`` record (:func:`run_record`): its extension values
        merged into the fingerprint's ``train`` section (read with today's names and defaults)."""
        record = record if isinstance(record, dict) else {}
        fp = record.get("fingerprint")
        if isinstance(fp, dict) and isinstance(fp.get("train"), dict):
            fp = {**fp, "train": {**fp["train"], **record.get("extension", {})}}
        return cls(fp, record.get("evaluation"), steps, whole=True)

    @classmethod
    def of_config(cls, config: dict[str, Any] | None, steps: int | None = None) -> Stored:
        """A whole recorded config (a methods grid's ``results.json`` ``config``, a ``config.yaml``)."""
        return cls(config, steps=steps, whole=True)


def evaluation_record(cfg: Any, splits: list[str]) -> dict[str, Any]:
    """How a translation cell was scored: its decoding options and splits."""
    return {"decode": to_dict(cfg.decode), "splits": list(splits)}


def run_record(cfg: Any, splits: list[str]) -> dict[str, Any]:
    """What a translation cell's results.json stores about the config that produced it."""
    train = to_dict(cfg.train)
    return {
        "fingerprint": fingerprint(cfg),
        "extension": {k: train[k] for k in sorted(EXTENSION_KEYS) if k in train},
        "evaluation": evaluation_record(cfg, splits),
    }


def _prune(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a stored dict for dataclass ``cls``) with every section that can drop what never
    determined the run (``stored_blocks``: position blocks of unused methods) pruned, recursively."""
    own = getattr(cls, "stored_blocks", None)
    data = own(data) if callable(own) else data
    hints = typing.get_type_hints(cls)
    return {k: _prune(hints[k], v) if k in hints and dataclasses.is_dataclass(hints[k]) and isinstance(v, dict) else v
            for k, v in data.items()}


def read_stored(config_type: type, data: dict[str, Any], out_dir: Any = None) -> Any:
    """A stored config or fingerprint read as today's ``config_type``: old names mapped, options
    added since filled in with today's defaults, unused position blocks dropped. ``out_dir``
    (where the run lies now) replaces the recorded one. A one-line ConfigError if it no longer loads."""
    data = _prune(config_type, dict(data))
    if out_dir is not None and "out_dir" in {f.name for f in dataclasses.fields(config_type)}:
        data["out_dir"] = out_dir
    return from_dict(config_type, data)


def _fingerprint_changes(saved: Any, cfg: Any) -> list[tuple[str, Any, Any]]:
    """Differences between two configs' fingerprints, but an unresolved derived key (0 or absent
    in ``cfg``: "take it from the data") is none."""
    was_fp, now_fp = fingerprint(placed_as(saved, cfg)), fingerprint(cfg)
    diffs = config_differences(was_fp, now_fp)
    return [(k, was, now) for k, was, now in diffs
            if not (k in DERIVED_KEYS and was is not ABSENT and (now is ABSENT or not now))]


def _extensions(stored: Stored, saved: Any, cfg: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The stored and current extension values (placement left out), read through today's
    defaults; None when the record holds none (a bare fingerprint)."""
    if not hasattr(cfg, "train") or not stored.whole:
        return None
    old, now = to_dict(saved.train), to_dict(cfg.train)
    keys = sorted((EXTENSION_KEYS - PLACEMENT_KEYS) & set(now))
    return {k: old[k] for k in keys}, {k: now[k] for k in keys}


def same_run(stored: Stored | None, cfg: Any, evaluation: dict[str, Any] | None = None) -> Verdict:
    """The verdict on ``stored`` (None: nothing recorded) against today's run config ``cfg`` (a
    dataclass), and ``evaluation`` (:func:`evaluation_record`) where the caller scores runs."""
    if stored is None or not isinstance(stored.config, dict):
        return Verdict("stale", "the run records no config (written before posenc recorded one)")
    try:
        saved = read_stored(type(cfg), stored.config, getattr(cfg, "out_dir", None))
    except ConfigError as err:
        return Verdict("stale", f"its recorded config no longer loads ({err})")
    diffs = _fingerprint_changes(saved, cfg)
    if diffs:
        return Verdict("stale", describe_differences(diffs), tuple(k for k, _, _ in diffs))
    ext = _extensions(stored, saved, cfg)
    if ext is not None and ext[0] != ext[1]:
        changed = config_differences({"train": ext[0]}, {"train": ext[1]})
        detail, keys = describe_differences(changed), tuple(k for k, _, _ in changed)
        cap = int(ext[1].get("max_steps") or 0)
        if cap and stored.steps is not None and stored.steps > cap:
            return Verdict("stale", f"{detail}: {stored.steps} steps already trained exceed the new max_steps", keys)
        return Verdict("extend", detail, keys)
    if evaluation is not None and stored.evaluation != evaluation:
        changed = config_differences(stored.evaluation or {}, evaluation)
        return Verdict("rescore", describe_differences(changed), tuple(k for k, _, _ in changed))
    return Verdict("fresh")
