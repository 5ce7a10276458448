"""One run directory through its whole life: :class:`Run` opens it (creates it, or judges the run
recorded there by the one "same run?" rule), loads the checkpoint it resumes from once, hands the
Trainer what it needs, writes the run's files once the Trainer has restored that checkpoint, and
closes it (its lock released). :meth:`Run.finished` opens a trained run to use it instead (score
it, average it, serve it): its record, its stored config and a checkpoint, each read once.

A run directory holds ``config.yaml`` (the resolved config, in its ``stored_form()`` where the
config has one, e.g. with paths relative to the run directory) and ``fingerprint.json`` (its
:class:`~posenc.runs.same_run.RunRecord`). Both are written only once a command has validated
everything (:meth:`Run.commit`), so a command that fails before leaves the directory as it found it.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from posenc.config import load_yaml, to_dict
from posenc.errors import CheckpointError, ConfigError, RunDirError
from posenc.files import atomic_write_text, os_call
from posenc.runs.lock import exclusive
from posenc.runs.ownership import CHECKPOINT_DIR, CONFIG_NAME, FINGERPRINT_NAME, check_free_target, write_marker
from posenc.runs.same_run import UPGRADE, RunRecord, Verdict, same_record, same_run
from posenc.runs.spec import NO_TASK, RunSpec, spec_of
from posenc.training.checkpoint import (
    Checkpoint,
    checkpoint_state,
    foreign_files,
    latest_checkpoint,
    load_checkpoint,
    remove_checkpoint,
)
from posenc.training.distributed import env_int
from posenc.training.state import RunContents

log = logging.getLogger("posenc")

#: A grid cell's results (its scores and the record they were taken with), stored by :meth:`Run.write_results`.
RESULTS_NAME = "results.json"
#: Outputs of a training session of any task, removed when a run starts afresh (``--no-resume``);
#: a task's own outputs are its spec's :attr:`~posenc.runs.spec.RunSpec.run_files`.
RUN_OUTPUTS = ("checkpoints", "train.csv", "valid.csv", "tensorboard", "summary.json", RESULTS_NAME, CONFIG_NAME,
               FINGERPRINT_NAME)
#: What posenc writes inside the directories of :data:`RUN_OUTPUTS` (nothing else there is removed).
OWN_CHILDREN = {"checkpoints": r"^(ckpt_\d{8}|average|\.(tmp|old)-.+)$", "tensorboard": r"^events\.out\.tfevents\..+$"}


class Run:
    """A run directory opened to train ``cfg`` (:meth:`open`, which builds it through :meth:`judged`),
    or a trained one opened to be used (:meth:`finished`).

    Args:
        out: the run directory.
        cfg: the run config; once :meth:`set_resolved` is given the resolved one, what the run records
            (None for a trained run opened by :meth:`finished`: its config is :attr:`stored_config`).
        verdict: the one rule's verdict on the run recorded there (None: nothing to continue).
        checkpoint: the checkpoint training resumes from, loaded once (None: training starts at step 0);
            for a trained run, the checkpoint it was opened with (:meth:`opened_checkpoint`).
        checkpoint_path: where the checkpoint it would resume from lies when it is not loaded (a
            stale run's, or one judged without loading); ignored when ``checkpoint`` is given.

    Attributes:
        spec: the task's declaration (:func:`~posenc.runs.spec.spec_of` the config).
        record: the run's record once :meth:`set_resolved` computed it (:meth:`own_record`); for a
            trained run, its ``fingerprint.json`` (the reference a checkpoint is judged against);
            else None.
        sections: the config sections stored with every checkpoint (:meth:`set_resolved`).
        stored_config: a trained run's ``config.yaml`` as stored (:meth:`finished`); None when not
            read (a run opened to train, or a caller that has the run's config).
    """

    def __init__(self, out: Path, cfg: Any, verdict: Verdict | None = None, checkpoint: Checkpoint | None = None,
                 checkpoint_path: Path | None = None) -> None:
        self.out, self.cfg, self.verdict, self.checkpoint = out, cfg, verdict, checkpoint
        self.checkpoint_path = checkpoint_path if checkpoint is None else checkpoint.path
        self.spec: RunSpec = spec_of(cfg)
        self.record: RunRecord | None = None  # what the run records: set by set_resolved(), once
        self.sections: dict[str, Any] = {}
        self.stored_config: dict[str, Any] | None = None

    @property
    def continues(self) -> bool:
        """Whether an earlier run is continued (its outputs kept), from a checkpoint or not."""
        return self.verdict is not None

    # ------------------------------------------------------------------ open
    @classmethod
    @contextmanager
    def open(cls, cfg: Any, out: str | Path, resume: bool = True, check: Callable[[Any], None] | None = None,
             verdict: Verdict | None = None) -> Iterator[Run]:
        """Open ``out`` to train ``cfg``, validating before anything is written; closed (its lock
        released, the directories this call created and left empty removed) on leaving.

        On rank 0 the directory must be new, empty or posenc's run, and it is locked throughout.
        ``check(cfg)`` (the task's own checks) runs then. With ``resume`` the run recorded in ``out``
        must be one ``cfg`` continues (:meth:`judged`: a stale verdict is a one-line ConfigError
        naming the differing keys, and a finished run without a checkpoint to resume from is
        refused, never trained again over its files); without, its outputs can be replaced.

        Args:
            cfg: the run config (a dataclass), as the user gave it.
            out: the run directory.
            resume: continue the run recorded in ``out`` (False: start afresh, replacing its outputs
                once :meth:`commit` runs).
            check: the task's checks of ``cfg``, run with the lock held before anything is read;
                None for none.
            verdict: the caller's verdict on this run (a grid cell's), used for the record it judged
                instead of judging it again (:meth:`judged`); None to judge it here.

        Yields:
            The opened :class:`Run`, ``out`` locked (on rank 0) until the ``with`` block is left.

        Raises:
            ConfigError: ``out`` is in use by another posenc process, or holds a run of another
                config (stale) while ``resume``.
            RunDirError: ``out`` is not posenc's to write, its ``fingerprint.json`` does not read,
                it holds a finished run without a checkpoint to resume from, or (starting afresh) a
                checkpoint holding files posenc did not write.
            CheckpointError: the checkpoint to resume from does not load.
        """
        out = Path(out)
        main = env_int("RANK", 0) == 0
        if main:
            check_free_target(out, "run")  # new, empty or posenc's own (or in use): never someone else's files
        with exclusive(out) if main else nullcontext():
            if check is not None:
                check(cfg)
            yield cls._opened(cfg, out, resume, verdict)

    @classmethod
    def _opened(cls, cfg: Any, out: Path, resume: bool, verdict: Verdict | None) -> Run:
        run = cls.judged(cfg, out, verdict=verdict) if resume else cls(out, cfg)
        if run.verdict is not None and run.verdict.kind == "stale":
            raise ConfigError(f"{out} holds a run with another config: {run.verdict.detail}; "
                              "use --no-resume to start afresh or another out_dir")
        if not run.continues:
            check_clearable(out)
        elif run.checkpoint is None and (out / "summary.json").is_file():
            raise RunDirError(f"{out} holds a finished run but no checkpoint to resume from (trained elsewhere and "
                              "copied back without checkpoints/ckpt_*?): training would start again over it; score "
                              "it as it is, or use --no-resume to start afresh or another out_dir")
        return run

    @classmethod
    def judged(cls, cfg: Any, out: Path, load: bool = True, verdict: Verdict | None = None) -> Run:
        """The run directory ``out`` judged against ``cfg`` by the one rule (:func:`same_run`): the
        verdict on the run it records, stale too when the checkpoint it would resume from (its latest)
        records another run, or a ``max_steps`` below the step it resumes from; changes that only
        extend training, and options and methods added since, pass. With ``load`` the checkpoint
        of a run that is not stale is loaded (its state.json is read once, here). Nothing is raised
        for a stale run: :meth:`open` refuses it. The run is judged once: ``verdict`` (the caller's)
        stands for the record it judged, and a checkpoint recording the run's own record is the run's
        (:func:`~posenc.runs.same_run.same_record`); only another record is judged again.

        Args:
            cfg: today's run config (a dataclass).
            out: the run directory.
            load: load the checkpoint to resume from (False: only its path is kept).
            verdict: the caller's verdict, used when it judged the record ``out`` holds; None to
                judge it here.

        Returns:
            The :class:`Run`, its ``verdict`` None when ``out`` records no run, its ``checkpoint``
            None when the run is stale, has no checkpoint or ``load`` is False.
        """
        stored = stored_run(out)
        if stored is None:
            return cls(out, cfg)
        path = latest_checkpoint(out / "checkpoints")
        state = checkpoint_state(path) if path is not None else {}
        verdict = _verdict(stored, state, cfg, path, verdict)
        if verdict.kind == "stale" or path is None or not load:
            return cls(out, cfg, verdict, checkpoint_path=path)
        return cls(out, cfg, verdict, load_checkpoint(path, state=state))

    @classmethod
    def finished(cls, out: str | Path, which: str | None = "auto", stored: bool = True) -> Run:
        """The trained run in ``out`` opened to be used (scored, averaged, served), each file read
        once: its record, a checkpoint of it and its stored config. Nothing is locked or written.

        Args:
            out: the run directory.
            which: the checkpoint to open (:func:`find_checkpoint`: ``auto``, ``latest``,
                ``average`` or a path); None opens none (a caller that judges several checkpoints,
                e.g. ``posenc average``).
            stored: read the run's ``config.yaml`` too (False when the caller has the run's config).

        Returns:
            The :class:`Run`: its ``record`` the run's ``fingerprint.json`` (None where the
            directory holds no run config), its ``checkpoint`` loaded without optimizer state, its
            ``stored_config`` the ``config.yaml`` as stored (None without ``stored``).

        Raises:
            CheckpointError: ``stored`` and ``out`` has no ``config.yaml``, or the checkpoint is
                missing or does not load.
            RunDirError: the run's ``fingerprint.json`` does not read as a JSON object.
        """
        out = Path(out)
        if stored and not (out / CONFIG_NAME).is_file():
            raise CheckpointError(f"{out}: not a run directory (no {CONFIG_NAME})")
        ckpt = None if which is None else load_checkpoint(find_checkpoint(out, which), with_optimizer=False)
        run = cls(out, None, checkpoint=ckpt)
        run.record = read_record(out)
        run.stored_config = load_yaml(out / CONFIG_NAME) if stored else None
        return run

    def opened_checkpoint(self) -> Checkpoint:
        """The checkpoint this run was opened with.

        Returns:
            The :class:`~posenc.training.checkpoint.Checkpoint` loaded by :meth:`finished` (or the
            one training resumes from).

        Raises:
            CheckpointError: the run was opened without one (``which=None``).
        """
        if self.checkpoint is None:
            raise CheckpointError(f"{self.out}: opened without a checkpoint")
        return self.checkpoint

    # ------------------------------------------------------------------ train
    def set_resolved(self, cfg: Any, sections: dict[str, Any]) -> None:
        """The resolved config (data-dependent values filled in) and the config sections stored with
        every checkpoint: what the run records (its record is computed once, here).

        Args:
            cfg: the resolved run config, which replaces the one the run was opened with.
            sections: the config sections stored with every checkpoint (``{"model": ..., "data": ...}``),
                against which a checkpoint is later judged.
        """
        self.cfg, self.record, self.sections = cfg, RunRecord.of(cfg), sections

    def contents(self, checked: dict[str, Any] | None = None, summary: dict[str, Any] | None = None) -> RunContents:
        """What the Trainer keeps with every checkpoint and in ``summary.json``: the config sections,
        the run's record, the task's ``checked`` state entries and its ``summary`` entries.

        Args:
            checked: state entries the task stores with every checkpoint and checks on resuming
                (e.g. a hash of the task's data); None for none.
            summary: entries the task adds to ``summary.json``; None for none.

        Returns:
            The :class:`~posenc.training.state.RunContents` to hand the Trainer.
        """
        return RunContents(self.sections, self.own_record().to_dict(), dict(checked or {}), dict(summary or {}))

    def own_record(self) -> RunRecord:
        """The run's record (:meth:`set_resolved`; of the config it was opened with when never resolved).

        Returns:
            The :class:`~posenc.runs.same_run.RunRecord` written to ``fingerprint.json`` and every
            checkpoint, computed once.
        """
        if self.record is None:
            self.record = RunRecord.of(self.cfg)
        return self.record

    def write_results(self, results: dict[str, Any]) -> dict[str, Any]:
        """Store the run's results as a grid cell (``results.json``, written atomically): the one
        writer of that file, so a cell's results are always a whole file its grid wrote.

        Args:
            results: the cell's results, JSON-safe.

        Returns:
            The results as stored (what reading the file back gives, e.g. string keys).
        """
        text = json.dumps(results, indent=2)
        atomic_write_text(self.out / RESULTS_NAME, text)
        return json.loads(text)

    def commit(self, own_files: Callable[[Any, Path], None] | None = None) -> None:
        """Write the run's files (rank 0 only), once the Trainer has restored and checked the
        checkpoint it resumes from (``Trainer.fit(on_start=...)``), so a checkpoint that does not
        load leaves the directory untouched: a fresh run first removes an earlier session's outputs
        (posenc's files only); then the marker, config.yaml, fingerprint.json (:func:`write_run_files`)
        and the task's own files (``own_files(cfg, out)``).

        Args:
            own_files: writes the task's own files, called as ``own_files(cfg, out)``; None for none.
        """
        if not self.continues:
            clear_run(self.out, self.spec)
        write_run_files(self.cfg, self.out, self.own_record())
        if own_files is not None:
            own_files(self.cfg, self.out)


def _verdict(stored: RunRecord, state: dict[str, Any], cfg: Any, path: Path | None,
             given: Verdict | None = None) -> Verdict:
    """The verdict on the run's record (``given`` when that is the verdict on it), stale also when
    its checkpoint's record (``state``, of ``path``) is another run's."""
    step = state.get("step")  # a cap below the steps it resumes from is no extension
    stored = replace(stored, steps=step if isinstance(step, int) else None)
    derived, scoring = spec_of(cfg).derived_keys, spec_of(cfg).scoring_sections
    verdict = given if given is not None and same_record(given, stored, derived, scoring) else same_run(stored, cfg)
    if verdict.kind == "stale" or state.get("record") is None:  # a Trainer's checkpoint outside a Run: no record
        return verdict
    theirs = RunRecord.read(state["record"], stored.steps, where=f"{path}/state.json")
    if same_record(replace(verdict, record=stored), theirs, derived, scoring):  # the run's own checkpoint
        return verdict
    mine = same_run(theirs, cfg)
    if mine.kind == "stale":
        return replace(mine, detail=f"its checkpoint {path.name} is another run's ({mine.detail})")
    return verdict


#: What to do about a run directory whose record is damaged, when the run would resume.
RESUME_HINT = "use --no-resume to start afresh or another out_dir"


def stored_run(out_dir: str | Path, hint: str = RESUME_HINT) -> RunRecord | None:
    """The record of the run in ``out_dir``.

    Args:
        out_dir: a run directory, or one that holds no run yet.
        hint: what to do about a fingerprint.json that is not JSON (the refusal's last words).

    Returns:
        Its ``fingerprint.json`` read as a :class:`RunRecord`; None when it holds no run (no
        ``config.yaml`` either).

    Raises:
        RunDirError: a fingerprint.json that is not a record, or a config.yaml without one (an
            older posenc's run: one line naming ``posenc upgrade``).
    """
    out = Path(out_dir)
    path = out / FINGERPRINT_NAME
    if path.is_file():
        return RunRecord.read(read_json_dict(path, hint), where=str(path))
    if (out / CONFIG_NAME).is_file():
        raise RunDirError(f"{out} holds a run without its {FINGERPRINT_NAME} ({UPGRADE})")
    return None


def started_run(out_dir: str | Path) -> RunRecord | None:
    """The record of the run in ``out_dir`` (:func:`stored_run`) with the steps trained by the
    checkpoint it resumes from (its latest), as :meth:`Run.judged` judges it: a verdict taken on it
    once (a grid cell started, not finished) is the verdict on the run its training resumes.

    Args:
        out_dir: a run directory, or one that holds no run yet.

    Returns:
        The record, ``steps`` None without a checkpoint; None when ``out_dir`` holds no run.

    Raises:
        RunDirError: as :func:`stored_run`.
        CheckpointError: its latest checkpoint holds no readable state.
    """
    stored = stored_run(out_dir)
    path = latest_checkpoint(Path(out_dir) / "checkpoints") if stored is not None else None
    if path is None:
        return stored
    step = checkpoint_state(path).get("step")
    return replace(stored, steps=step if isinstance(step, int) else None)


def read_json_dict(path: Path, hint: str) -> dict[str, Any]:
    """A JSON object stored by posenc (a fingerprint), read whole.

    Args:
        path: the JSON file.
        hint: what the user can do, the end of the message when it cannot be read.

    Returns:
        The object, as a dict.

    Raises:
        RunDirError: the file cannot be read, is not JSON or holds no JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not valid JSON"
        raise RunDirError(f"{path}: {reason}; {hint}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a posenc fingerprint (a JSON object); {hint}")
    return data


def read_record(out: Path) -> RunRecord | None:
    """The record of the trained run in ``out`` (:func:`stored_run`), None when it holds no run.

    Args:
        out: the run directory.

    Returns:
        The :class:`~posenc.runs.same_run.RunRecord` its ``fingerprint.json`` holds, or None
        without that file.

    Raises:
        RunDirError: the file is damaged or holds no record.
    """
    return stored_run(out, "the run directory is damaged")


def find_checkpoint(run_dir: Path, which: str = "auto") -> Path:
    """The checkpoint of a run directory a command asks for.

    Args:
        run_dir: the run directory.
        which: ``auto`` (the average if there is one, else the latest), ``latest``, ``average``,
            or a checkpoint's path (returned as it is).

    Returns:
        The checkpoint directory's path.

    Raises:
        CheckpointError: the run has no checkpoint (``auto``, ``latest``) or no average (``average``).
    """
    ckpt_dir = run_dir / "checkpoints"
    if which in ("auto", "average") and (ckpt_dir / "average").is_dir():
        return ckpt_dir / "average"
    if which in ("auto", "latest"):
        latest = latest_checkpoint(ckpt_dir)
        if latest is None:
            raise CheckpointError(f"{run_dir}: no checkpoints (train the run first)")
        return latest
    if which == "average":
        raise CheckpointError(f"{run_dir}: no averaged checkpoint (set train.average_last or run `posenc average`)")
    return Path(which)


# ----------------------------------------------------------------------------- the run's files
def write_run_files(cfg: Any, out_dir: str | Path | None = None, record: RunRecord | None = None) -> None:
    """The marker, config.yaml and fingerprint.json in ``out_dir`` (default ``cfg.out_dir``),
    written once the run is valid. config.yaml holds the config with run-relative paths
    (its ``stored_form()``, where the config has one), else whole;
    fingerprint.json the run's record (``record``, default :meth:`RunRecord.of` the stored config;
    the fingerprint ignores paths).

    Args:
        cfg: the resolved run config.
        out_dir: the run directory; None: ``cfg.out_dir``.
        record: the run's record (:meth:`Run.own_record`); None: computed from ``cfg``.
    """
    out = Path(cfg.out_dir if out_dir is None else out_dir)
    write_marker(out, "run")
    stored = cfg.stored_form() if hasattr(cfg, "stored_form") else cfg
    atomic_write_text(out / CONFIG_NAME, config_text(to_dict(stored)))
    record = RunRecord.of(stored) if record is None else record
    atomic_write_text(out / FINGERPRINT_NAME, record_text(record))


def config_text(data: dict[str, Any]) -> str:
    """A run's ``config.yaml`` as posenc writes it.

    Args:
        data: the stored config (a dict of sections).

    Returns:
        ``data`` as YAML, keys in their order.
    """
    return yaml.safe_dump(data, sort_keys=False)


def record_text(record: RunRecord) -> str:
    """A run's ``fingerprint.json`` as posenc writes it.

    Args:
        record: the run's record.

    Returns:
        ``record`` (:meth:`~posenc.runs.same_run.RunRecord.to_dict`) as JSON, keys sorted.
    """
    return json.dumps(record.to_dict(), indent=1, sort_keys=True)


def check_clearable(out_dir: str | Path) -> None:
    """Before a fresh start replaces an earlier session (:func:`clear_run`): no checkpoint in
    ``out_dir/checkpoints`` may hold a file posenc did not write (a one-line RunDirError naming
    it), since the new run may write a checkpoint of the same name over it.

    Args:
        out_dir: the run directory about to start afresh.

    Raises:
        RunDirError: a checkpoint in it holds a file posenc did not write.
    """
    ckpts = Path(out_dir) / "checkpoints"
    if not ckpts.is_dir() or ckpts.is_symlink():
        return
    for child in sorted(ckpts.iterdir()):
        if CHECKPOINT_DIR.match(child.name) and child.is_dir() and not child.is_symlink():
            foreign = os_call(lambda: foreign_files(child), child)
            if foreign:
                raise RunDirError(f"{child} holds files posenc did not write ({foreign[0]!r}); a fresh start would "
                                  "replace that checkpoint: move them away or use another out_dir")


def run_outputs(spec: RunSpec = NO_TASK) -> dict[str, re.Pattern[str] | None]:
    """What a training session writes into a run directory, so a fresh start removes only that.

    Args:
        spec: the task's spec (its ``run_files`` and ``run_dirs``); :data:`NO_TASK` for none.

    Returns:
        Each output's name (:data:`RUN_OUTPUTS` and the task's ``run_files``) → for a directory,
        the compiled pattern of the names posenc writes in it (:data:`OWN_CHILDREN` and the task's
        ``run_dirs``); None for a file.
    """
    children = {**OWN_CHILDREN, **spec.run_dirs}
    return {name: re.compile(children[name]) if name in children else None for name in (*RUN_OUTPUTS, *spec.run_files)}


def clear_run(out_dir: str | Path, spec: RunSpec = NO_TASK) -> None:
    """Remove the outputs of an earlier training session (``--no-resume``): the files of
    :func:`run_outputs`, and inside its directories only what posenc writes there; a directory left
    non-empty by other files stays.

    Args:
        out_dir: the run directory.
        spec: the task's spec (its own outputs, :func:`run_outputs`); :data:`NO_TASK` for none.
    """
    out = Path(out_dir)
    for name, pattern in run_outputs(spec).items():
        p = out / name
        if p.is_dir() and not p.is_symlink():
            _clear_own_children(p, pattern)
        elif p.exists() or p.is_symlink():
            p.unlink()


def _clear_own_children(directory: Path, pattern: re.Pattern[str] | None) -> None:
    """Remove what posenc wrote in ``directory``: the children ``pattern`` names (None: none);
    inside a checkpoint (``ckpt_*``, ``average``) only its files (:func:`remove_checkpoint`)."""
    for child in directory.iterdir():
        if pattern is None or not pattern.match(child.name):
            continue
        if child.is_dir() and not child.is_symlink() and CHECKPOINT_DIR.match(child.name):
            remove_checkpoint(child)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)  # posenc's own temporaries (.tmp-*, .old-*)
        else:
            child.unlink()
    try:
        directory.rmdir()  # only if nothing else is left in it
    except OSError:
        log.info("kept %s: it holds files posenc did not write", directory)
