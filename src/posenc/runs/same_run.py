"""Is a stored run the run today's config asks for? The one rule, asked everywhere.

A run records one :class:`RunRecord` (fingerprint, extension values, evaluation), computed once
from its resolved config and stored in one form in ``fingerprint.json``, every grid cell's
``results.json`` and every checkpoint's state. :func:`same_run` judges it: the run directory's
opener (:meth:`posenc.runs.run.Run.open`: ``posenc train``, every task's runs) on its
``fingerprint.json`` and on the checkpoint it resumes from, ``posenc experiment`` on every cell's
``results.json``. One answer, :class:`Verdict`:

``fresh``
    nothing that determines the run differs: its results are reused, its directory resumes.
``rescore``
    only the evaluation differs (how the run is scored, e.g. its splits): the trained model is scored again.
``extend``
    only training-extension keys differ (:data:`~posenc.runs.fingerprint.EXTENSION_KEYS`:
    ``max_steps`` 2000 → 4000, patience, ...): training resumes under the new caps. A cap *below*
    the steps already trained cannot be honoured by resuming: ``stale``.
``stale``
    the fingerprint differs (the differing keys are named), or the recorded config does not load as today's config.

A stored record is read **through today's config classes** (:func:`read_stored`): options added
since it was written are filled in with today's defaults, and position blocks of methods the run
did not use are dropped. So registering a method, or adding an option whose default reproduces
the earlier behaviour, changes no verdict: runs resume and committed results stay fresh. A file
that holds no record (written by an older posenc) is refused in one line naming ``posenc upgrade``
(:data:`UPGRADE`), which rewrites it once (:mod:`posenc.runs.upgrade`).
A record whose fingerprint still holds a section its task now declares a scoring section (an
older posenc's, :attr:`~posenc.runs.spec.RunSpec.scoring_sections`) and that records no evaluation
is judged as scored with what its fingerprint recorded there, and a stored evaluation is read
through today's classes (:func:`as_scored`), so declaring how a task scores its runs, or adding a
scoring option whose default gives the earlier scoring, rescores none of them.
Where a run trained (:data:`~posenc.runs.fingerprint.PLACEMENT_KEYS`) never matters, nor what it
recorded for an option today's config leaves to the placement (``precision: auto``,
:data:`~posenc.runs.fingerprint.PLACED_WHEN_AUTO`), nor a key the task derives from its data
(:attr:`~posenc.runs.spec.RunSpec.derived_keys`) while today's config leaves it unresolved.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Any, Iterable

from posenc.config import from_dict, to_dict
from posenc.errors import ConfigError, RunDirError
from posenc.runs.differences import ABSENT, config_differences, describe_differences
from posenc.runs.fingerprint import EXTENSION_KEYS, PLACED_WHEN_AUTO, PLACEMENT_KEYS, fingerprint
from posenc.runs.spec import spec_of


@dataclass(frozen=True)
class Verdict:
    """The answer of :func:`same_run`.

    Args:
        kind: ``fresh``, ``rescore``, ``extend`` or ``stale`` (see the module docstring).
        detail: one line saying what differs (``model.d_model (256 -> 512)``); ``""`` when fresh.
        keys: the dotted keys that differ; empty when fresh.
        record: the stored record judged (None: none), so a verdict handed down is used for that
            record and never judged again (:func:`same_record`).
    """

    kind: str
    detail: str = ""
    keys: tuple[str, ...] = ()
    record: RunRecord | None = dataclasses.field(default=None, compare=False, repr=False)


#: What a file that holds no record is told (it was written by an older posenc).
UPGRADE = "written by an older posenc: `posenc upgrade DIR` rewrites the runs under DIR in today's format, once"


@dataclass(frozen=True)
class RunRecord:
    """What a run records about the config that produced it, in one form wherever it is stored
    (``fingerprint.json``, a cell's ``results.json`` ``record``, every checkpoint's state):
    ``{"fingerprint": ..., "extension": ..., "evaluation": ...}`` (:meth:`to_dict`).

    Args:
        fingerprint: what determines the run (:func:`~posenc.runs.fingerprint.fingerprint`).
        extension: the training-extension values it was trained under
            (:data:`~posenc.runs.fingerprint.EXTENSION_KEYS`).
        evaluation: how it was scored, where the caller scores runs (None: not recorded).
        steps: the updates already trained, where known.
    """

    fingerprint: dict[str, Any]
    extension: dict[str, Any] = dataclasses.field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    steps: int | None = None

    @classmethod
    def of(cls, cfg: Any, evaluation: dict[str, Any] | None = None) -> RunRecord:
        """The record of a resolved run config, as the run stores it.

        Args:
            cfg: the resolved run config (a dataclass, data-dependent values filled in).
            evaluation: how the run is scored (a grid cell's options and splits); None when the
                caller does not score it.

        Returns:
            Its fingerprint, the :data:`~posenc.runs.fingerprint.EXTENSION_KEYS` values of its
            ``train`` section and ``evaluation``; ``steps`` unknown.
        """
        train = to_dict(cfg.train) if hasattr(cfg, "train") else {}
        return cls(fingerprint(cfg), {k: train[k] for k in sorted(EXTENSION_KEYS) if k in train}, evaluation)

    def to_dict(self) -> dict[str, Any]:
        """The stored form, the one written to ``fingerprint.json``, ``results.json`` and checkpoints.

        Returns:
            ``{"fingerprint": ..., "extension": ..., "evaluation": ...}``, JSON-safe (``steps`` and
            ``whole`` are not stored: they are known where the record is read).
        """
        return {"fingerprint": self.fingerprint, "extension": self.extension, "evaluation": self.evaluation}

    @classmethod
    def read(cls, data: Any, steps: int | None = None, where: str = "the stored run") -> RunRecord:
        """The record stored as ``data`` (:meth:`to_dict`'s form).

        Args:
            data: what the file holds there (a fingerprint.json, a results.json's ``record``).
            steps: the updates already trained, where known.
            where: the file, named when it is refused.

        Returns:
            The record, with ``steps``.

        Raises:
            RunDirError: ``data`` is no record (one line naming ``posenc upgrade``, :data:`UPGRADE`).
        """
        if not is_record(data):
            raise RunDirError(f"{where} holds no run record ({UPGRADE})")
        return cls(data["fingerprint"], dict(data["extension"]), data.get("evaluation"), steps)

    @property
    def config(self) -> dict[str, Any]:
        """The stored dict to read as today's config: the fingerprint with its extension values."""
        fp = self.fingerprint
        if self.extension and isinstance(fp.get("train"), dict):
            return {**fp, "train": {**fp["train"], **self.extension}}
        return fp


def is_record(data: Any) -> bool:
    """Whether a stored value has a record's form.

    Args:
        data: a stored JSON value (a fingerprint.json, a results.json's ``record``).

    Returns:
        True when it is a dict whose ``fingerprint`` and ``extension`` are dicts
        (:meth:`RunRecord.to_dict`'s form).
    """
    return isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in ("fingerprint", "extension"))


def _prune(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a stored dict for dataclass ``cls``) with every section that can drop what never
    determined the run (``stored_blocks``: position blocks of unused methods) pruned, recursively."""
    own = getattr(cls, "stored_blocks", None)
    data = own(data) if callable(own) else data
    hints = typing.get_type_hints(cls)
    return {k: _prune(hints[k], v) if k in hints and dataclasses.is_dataclass(hints[k]) and isinstance(v, dict) else v
            for k, v in data.items()}


def read_stored(config_type: type, data: dict[str, Any], out_dir: Any = None) -> Any:
    """A stored config or fingerprint read as today's ``config_type``: options added
    since filled in with today's defaults, unused position blocks dropped.

    Args:
        config_type: the run config class to read it as (a dataclass).
        data: the stored dict (a :attr:`RunRecord.config`, a ``config.yaml``).
        out_dir: where the run lies now, in place of the one recorded; None keeps the recorded one.

    Returns:
        A ``config_type`` instance.

    Raises:
        ConfigError: ``data`` does not load as ``config_type`` (one line naming the key).
    """
    data = _prune(config_type, dict(data))
    if out_dir is not None and "out_dir" in {f.name for f in dataclasses.fields(config_type)}:
        data["out_dir"] = out_dir
    return from_dict(config_type, data)


def with_placement_of(saved: Any, current: Any) -> Any:
    """A stored config placed where today's config trains, so the two records compare as if
    trained in one place (whatever precision ``auto`` chose there).

    Args:
        saved: the stored run config (a dataclass, :func:`read_stored`).
        current: today's run config.

    Returns:
        ``saved`` with ``current``'s :data:`~posenc.runs.fingerprint.PLACEMENT_KEYS` and ``auto``
        for each :data:`~posenc.runs.fingerprint.PLACED_WHEN_AUTO` option ``current`` leaves
        ``auto``; ``saved`` itself when either has no ``train`` section.
    """
    train, now = getattr(saved, "train", None), getattr(current, "train", None)
    if train is None or now is None:
        return saved
    moved = {k: getattr(now, k) for k in PLACEMENT_KEYS if hasattr(train, k) and hasattr(now, k)}
    moved |= {k: "auto" for k in PLACED_WHEN_AUTO if hasattr(train, k) and getattr(now, k, None) == "auto"}
    return dataclasses.replace(saved, train=dataclasses.replace(train, **moved))


def same_run(stored: RunRecord, cfg: Any, evaluation: dict[str, Any] | None = None) -> Verdict:
    """The verdict on ``stored`` against today's run config ``cfg`` (a
    dataclass), and ``evaluation`` (how the caller scores runs, e.g. a grid cell's options and
    splits) where it scores them. The one answer to "is this the same run?": run directories,
    grid cells and the checkpoint a run resumes from are all judged here, by comparing the stored
    record, read through today's config classes, with ``cfg``'s record (:meth:`RunRecord.of`). A
    stored record that already equals ``cfg``'s (but for :func:`_ignored` keys) needs no reading.

    Args:
        stored: the record the run holds (:meth:`RunRecord.read`).
        cfg: today's run config (a dataclass).
        evaluation: how the caller scores the run; None when it does not score runs (then a
            different stored evaluation is no difference).

    Returns:
        The :class:`Verdict`: ``stale`` (naming the differing keys) when the recorded config does
        not load, a fingerprint key differs or the steps already trained exceed a new
        ``max_steps``; else ``extend``, ``rescore`` or ``fresh``. It carries ``stored``
        (:attr:`Verdict.record`).
    """
    return dataclasses.replace(_same_run(stored, cfg, evaluation), record=stored)


def same_record(verdict: Verdict | None, stored: RunRecord | None, derived: frozenset[str] = frozenset(),
                scoring: tuple[str, ...] = ()) -> bool:
    """Whether a verdict handed down by a caller that judged a run once is the verdict on
    ``stored``. An identity of two records, not a judgement against a config: the run's own
    checkpoint is never judged twice.

    Args:
        verdict: the caller's verdict (:attr:`Verdict.record` the record it judged); None for none.
        stored: the record at hand (a run directory's, a checkpoint's); None for none.
        derived: the keys the task fills in from its data (:attr:`~posenc.runs.spec.RunSpec.derived_keys`),
            no difference where unresolved in one of the two records.
        scoring: the task's scoring sections (:attr:`~posenc.runs.spec.RunSpec.scoring_sections`):
            no difference where one record's fingerprint holds them (an older posenc's) and the other's not.

    Returns:
        True when the record ``verdict`` judged is ``stored`` (equal fingerprint and extension
        values but for unresolved ``derived`` keys) and records as many trained steps where
        ``stored`` knows them; False otherwise, and when either is None.
    """
    was = verdict.record if verdict is not None else None
    if was is None or stored is None:
        return False
    if stored.steps is not None and was.steps != stored.steps:
        return False
    return all((k in derived and (old is ABSENT or new is ABSENT or not old or not new))
               or held_by_one(k, old, new, scoring) for k, old, new in config_differences(was.config, stored.config))


def held_by_one(key: str, old: Any, new: Any, scoring: Iterable[str]) -> bool:
    """Is the difference ``key`` (``old`` → ``new``) a scoring section only one of two records
    holds in its fingerprint (an older posenc counted its task's scoring sections there)? Then it
    is no difference between runs.

    Args:
        key: the dotted key that differs.
        old: its value in one record (``ABSENT`` where it has none).
        new: its value in the other.
        scoring: scoring section names (:attr:`~posenc.runs.spec.RunSpec.scoring_sections`).

    Returns:
        True when ``key`` lies in one of ``scoring`` and one of the two records lacks it.
    """
    return key.split(".")[0] in scoring and ABSENT in (old, new)


def scoring_of(cfg: Any) -> dict[str, Any] | None:
    """How a run of ``cfg`` is scored, as its record's ``evaluation``: the sections its task
    declares scoring sections (:attr:`~posenc.runs.spec.RunSpec.scoring_sections`), which the
    fingerprint leaves out.

    Args:
        cfg: a run config (a dataclass).

    Returns:
        Each scoring section's name → its plain dict form (JSON-safe); None when the task declares none.
    """
    sections = spec_of(cfg).scoring_sections
    if not sections:
        return None
    return _plain({name: to_dict(getattr(cfg, name)) for name in sections})


def as_scored(stored: RunRecord, cfg: Any) -> RunRecord:
    """``stored`` with its evaluation read as today's run config ``cfg`` reads how a run is scored,
    so declaring a scoring section, or adding an option to one whose default gives the earlier
    scoring, rescores no run. A record that records no evaluation but whose fingerprint holds
    scoring sections (:attr:`~posenc.runs.spec.RunSpec.scoring_sections`; a record of a posenc
    that counted them in the fingerprint) was scored with what it recorded there. Each scoring
    section the evaluation holds is read through today's class of that section (options added since
    take their defaults); one that does not load as today's class stays as stored (it differs: rescore).

    Args:
        stored: the stored record.
        cfg: today's run config (a dataclass).

    Returns:
        ``stored`` with that evaluation; ``stored`` itself when there is nothing to read.
    """
    sections = spec_of(cfg).scoring_sections
    held = {name: stored.fingerprint[name] for name in sections if name in stored.fingerprint}
    evaluation = stored.evaluation if stored.evaluation is not None else held or None
    if not evaluation:
        return stored
    read = {name: _read_section(cfg, name, value) if name in sections else value for name, value in evaluation.items()}
    return dataclasses.replace(stored, evaluation=read)


def _read_section(cfg: Any, name: str, value: Any) -> Any:
    """A stored scoring section ``name`` read as today's class of ``cfg``'s section, in its plain
    JSON form; ``value`` itself when it does not load (or is no section)."""
    section = getattr(cfg, name, None)
    if not (dataclasses.is_dataclass(section) and isinstance(value, dict)):
        return value
    try:
        return _plain(to_dict(read_stored(type(section), value)))
    except ConfigError:
        return value


def _plain(value: Any) -> Any:
    """``value`` in the form a JSON file gives it back (tuples as lists), for comparing with one read."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _same_run(stored: RunRecord, cfg: Any, evaluation: dict[str, Any] | None) -> Verdict:
    """:func:`same_run` without the record attached."""
    now = RunRecord.of(cfg)
    derived = spec_of(cfg).derived_keys
    stored = as_scored(stored, cfg)
    if not _differences(stored.config, now.config, derived):
        return _evaluated(stored, evaluation)
    try:
        saved = read_stored(type(cfg), stored.config, getattr(cfg, "out_dir", None))
    except ConfigError as err:
        return Verdict("stale", f"its recorded config no longer loads ({err})")
    return _judge(stored, RunRecord.of(with_placement_of(saved, cfg)), now, evaluation, derived)


def _differences(was: dict[str, Any], now: dict[str, Any], derived: frozenset[str]) -> list[tuple[str, Any, Any]]:
    """:func:`config_differences` of two records' configs but for the :func:`_ignored` keys."""
    return [(k, old, new) for k, old, new in config_differences(was, now) if not _ignored(k, old, new, derived)]


def _ignored(key: str, old: Any, new: Any, derived: frozenset[str]) -> bool:
    """A difference that is none: a derived key unresolved in today's config (0 or absent: "take
    it from the data"), where the run trained (:data:`~posenc.runs.fingerprint.PLACEMENT_KEYS`), or
    what it recorded for an option today's config leaves ``auto``
    (:data:`~posenc.runs.fingerprint.PLACED_WHEN_AUTO`)."""
    option = key[len("train."):] if key.startswith("train.") else None
    placement = option in PLACEMENT_KEYS or (option in PLACED_WHEN_AUTO and new == "auto")
    return placement or (key in derived and old is not ABSENT and (new is ABSENT or not new))


def _judge(stored: RunRecord, was: RunRecord, now: RunRecord, evaluation: dict[str, Any] | None,
           derived: frozenset[str]) -> Verdict:
    """The verdict from the stored record ``was`` (read through today's classes, placed as ``now``)
    and ``now``, compared in one form (:attr:`RunRecord.config`: the fingerprint with the extension
    values): a differing fingerprint key is stale, a differing extension key extends; an
    unresolved ``derived`` key (0 or absent in ``now``: "take it from the data") is no difference.
    Then the evaluation: rescore."""
    extension = {f"train.{k}" for k in now.extension if k not in now.fingerprint.get("train", {})}
    diffs = [(k, old, new) for k, old, new in config_differences(was.config, now.config)
             if not (k in derived and old is not ABSENT and (new is ABSENT or not new))]
    stale = [d for d in diffs if d[0] not in extension]
    if stale:
        return Verdict("stale", describe_differences(stale), tuple(k for k, _, _ in stale))
    if diffs:
        detail, keys = describe_differences(diffs), tuple(k for k, _, _ in diffs)
        cap = int(now.extension.get("max_steps") or 0)
        if cap and stored.steps is not None and stored.steps > cap:
            return Verdict("stale", f"{detail}: {stored.steps} steps already trained exceed the new max_steps", keys)
        return Verdict("extend", detail, keys)
    return _evaluated(stored, evaluation)


def _evaluated(stored: RunRecord, evaluation: dict[str, Any] | None) -> Verdict:
    """``fresh``, or ``rescore`` when the caller's ``evaluation`` is not the stored one."""
    if evaluation is not None and _plain(stored.evaluation) != _plain(evaluation):
        changed = config_differences(stored.evaluation or {}, evaluation)
        return Verdict("rescore", describe_differences(changed), tuple(k for k, _, _ in changed))
    return Verdict("fresh")
