"""Run directories that never lie: an exclusive lock, the one opener, ownership markers.

A run directory holds ``config.yaml`` (the resolved config; a translation run's with paths relative
to the run directory) and ``fingerprint.json`` (its :class:`~posenc.runs.same_run.RunRecord`).
Both are written only once a command has validated everything: a run is opened by
:func:`open_run` (device; the verdict on the recorded run and on the checkpoint it resumes from)
and written by :func:`commit_run` (after the Trainer restored that checkpoint); a command that
fails before leaves the directory as it found it.

Ownership: posenc writes only into a directory that is new, empty, or its own, and deletes only
files it wrote. Its own directories carry a marker file, ``.posenc-run`` (JSON ``{"kind": "run"}``
or ``"data"``), written when posenc first fills them; runs and prepared data of older versions
(``config.yaml`` + ``fingerprint.json``/``checkpoints/``; ``meta.json`` + ``spm.model``) count as
posenc's too. :func:`check_target` refuses anything else with one line.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from posenc.config import load_yaml, naming, to_dict
from posenc.errors import ConfigError, PosencError, RunDirError
from posenc.files import atomic_write_text, check_output_file, os_call, os_error_message
from posenc.processes import pid_alive
from posenc.runs.same_run import RunRecord, Verdict, read_stored, same_run
from posenc.training.checkpoint import checkpoint_state, foreign_files, latest_checkpoint, remove_checkpoint
from posenc.training.distributed import env_int
from posenc.training.runtime import resolve_device

log = logging.getLogger("posenc")

LOCK_NAME = ".posenc.lock"
MARKER_NAME = ".posenc-run"
CONFIG_NAME, FINGERPRINT_NAME = "config.yaml", "fingerprint.json"
#: Outputs of a training session, removed when a run starts afresh (``--no-resume``).
RUN_OUTPUTS = ("checkpoints", "train.csv", "valid.csv", "tensorboard", "summary.json", "train_summary.json",
               "translations", "results.json", "eval.json", CONFIG_NAME, FINGERPRINT_NAME, "spm.model")
#: What posenc writes inside the directories of :data:`RUN_OUTPUTS` (nothing else there is removed).
OWN_CHILDREN = {
    "checkpoints": re.compile(r"^(ckpt_\d{8}|average|\.(tmp|old)-.+)$"),
    # <split>[.lp<α>].beam<K>[.lp<α>].hyp/.json: scored splits, the α sweep, `translate --split`
    "translations": re.compile(r"^\.?[\w-]+(\.lp[-+.\de]+)?\.beam\d+(\.lp[-+.\de]+)?\.(hyp|json)(\..+\.tmp)?$"),
    "tensorboard": re.compile(r"^events\.out\.tfevents\..+$"),
}
KIND_WORDS = {"run": "run directory", "data": "prepared data directory", "report": "report directory",
              "logs": "log directory", "export": "CTranslate2 export directory", "checkpoint": "checkpoint directory",
              "datasets": "directory of prepared data", "cache": "SentencePiece cache"}
#: The SentencePiece cache posenc keeps beside prepared data (tasks/translation/prepare.py): the name
#: is posenc's (:data:`SCRATCH_NAMES`), so such a directory is posenc's cache, marked or not.
SPM_CACHE_NAME = ".spm-cache"
#: Names posenc may leave in a directory besides its marked contents (lock, SentencePiece cache).
SCRATCH_NAMES = frozenset({LOCK_NAME, MARKER_NAME, SPM_CACHE_NAME})
#: The description file of a CTranslate2 export (serving/ctranslate2.py); it marks older unmarked exports.
EXPORT_MANIFEST = "posenc_export.json"
#: Files of a checkpoint directory (training/checkpoint.py): an average written elsewhere, a moved checkpoint.
_CHECKPOINT_SIGNS = ("model.safetensors", "state.json")


# ----------------------------------------------------------------------------- ownership
def read_marker(directory: str | Path) -> str | None:
    """The kind recorded in ``directory``'s marker file (``run``, ``data``), or None."""
    path = Path(directory) / MARKER_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def _legacy_kind(directory: Path) -> str | None:
    """What a directory written by an older posenc (no marker) is, judged by its files."""
    checkpoints = any(p.is_dir() and CHECKPOINT_DIR.match(p.name) for p in (directory / "checkpoints").glob("ckpt_*"))
    has_run_files = (directory / FINGERPRINT_NAME).is_file() or checkpoints
    if has_run_files and _is_run_config(directory / CONFIG_NAME):
        return "run"
    if checkpoints and (directory / "train.csv").is_file():
        return "run"  # a run of another task that the Trainer wrote (checkpoints and its log)
    if (directory / "meta.json").is_file() and (directory / "spm.model").is_file():
        return "data"
    if (directory / EXPORT_MANIFEST).is_file():
        return "export"
    if directory.name == SPM_CACHE_NAME:
        return "cache"
    return None


def _is_run_config(path: Path) -> bool:
    """Whether ``path`` is a run config that posenc wrote, of any task (a YAML mapping with a
    ``train`` section)."""
    if not path.is_file():
        return False
    try:
        return isinstance(load_yaml(path).get("train"), dict)
    except (PosencError, OSError, ValueError, TypeError, AttributeError):
        return False


def dir_kind(directory: str | Path) -> str | None:
    """The kind of a directory posenc wrote (``run``, ``data``, ``report``, ``logs``, ``export``,
    ``datasets``: its marker, else an older layout; ``cache``: a SentencePiece cache), else None."""
    directory = Path(directory)
    if not directory.is_dir() or directory.is_symlink():
        return None
    return read_marker(directory) or _legacy_kind(directory)


def write_marker(directory: str | Path, kind: str) -> None:
    """Mark ``directory`` as posenc's own ``kind`` (no-op when it already is)."""
    if read_marker(directory) != kind:
        atomic_write_text(Path(directory) / MARKER_NAME, json.dumps({"kind": kind, "written_by": "posenc"}) + "\n")


def _forbidden(directory: Path) -> str | None:
    real = directory.resolve()
    if real == Path(real.anchor):
        return "the filesystem root"
    if real == Path.home().resolve():
        return "your home directory"
    return None


def _foreign_entries(directory: Path, kind: str) -> list[str]:
    """Entries of ``directory`` that posenc did not put there (for an unmarked ``kind`` dir):
    all but its lock, marker and SentencePiece cache, and in a run data that posenc prepared."""
    def ours(p: Path) -> bool:
        return p.name in SCRATCH_NAMES or (kind == "run" and dir_kind(p) == "data")

    return sorted(p.name for p in directory.iterdir() if not ours(p))


def check_target(directory: str | Path, kind: str, what: str = "out_dir") -> None:
    """Refuse (one-line :class:`RunDirError`) to write the ``kind`` directory ``directory``
    unless it is new, empty (but for posenc's lock and caches, and not marked as posenc's of another
    kind) or posenc's own ``kind``."""
    directory = Path(directory)
    where = _forbidden(directory)
    if where is not None:
        raise RunDirError(f"{what} {directory} is {where}; posenc writes only into a new or empty directory or its own")
    if directory.is_symlink() and not directory.is_dir():
        raise RunDirError(f"{what} {directory} is a dangling symlink")
    if not directory.exists():
        return
    if not directory.is_dir():
        raise RunDirError(f"{what} {directory} is a file, not a directory")
    other = dir_kind(directory)
    if other == kind:
        return
    foreign = os_call(lambda: _foreign_entries(directory, kind), directory)
    if foreign or other is not None:  # a posenc directory of another kind is never written as this one
        held = f"a posenc {KIND_WORDS[other]}" if other else f"files posenc did not write ({foreign[0]!r}"
        held += "" if other else (f" and {len(foreign) - 1} more)" if len(foreign) > 1 else ")")
        raise RunDirError(f"{what} {directory} holds {held}; posenc writes only into a new or empty directory "
                          f"or a {KIND_WORDS[kind]} it created (use another {what})")


def mark_datasets(directory: str | Path) -> None:
    """Make ``directory``, where an experiment keeps its prepared data directories and their
    SentencePiece cache, posenc's ``datasets`` directory (created if new), so no output is written
    into it (:func:`check_outside_posenc_dirs`). One that holds anything else (or is a symlink) is left
    as it is, unmarked: it is not only posenc's."""
    directory = Path(directory)
    if read_marker(directory) == "datasets" or directory.is_symlink():
        return
    if directory.exists() and not (directory.is_dir() and _holds_only_data(directory)):
        return
    os_call(lambda: directory.mkdir(parents=True, exist_ok=True), directory)
    write_marker(directory, "datasets")


def _holds_only_data(directory: Path) -> bool:
    """Whether every entry of ``directory`` is prepared data, the SentencePiece cache or a lock."""
    return all(p.name in SCRATCH_NAMES or dir_kind(p) == "data" for p in directory.iterdir())


def claim_and_check(directory: str | Path, kind: str, what: str, older: Callable[[Path], bool]) -> None:
    """:func:`check_target` for a ``kind`` directory that older posenc versions wrote unmarked:
    an unmarked directory that ``older`` recognises as such is marked (claimed) first."""
    directory = Path(directory)
    if directory.is_dir() and not directory.is_symlink() and read_marker(directory) is None and older(directory):
        write_marker(directory, kind)
    check_target(directory, kind, what)


def owned_kind(directory: Path) -> str | None:
    """:func:`dir_kind` of ``directory``, or ``checkpoint`` for a posenc checkpoint directory (an
    average written anywhere), else None."""
    kind = dir_kind(directory)
    if kind is None and directory.is_dir() and all((directory / n).is_file() for n in _CHECKPOINT_SIGNS):
        return "checkpoint"
    return kind


def posenc_owner(path: str | Path) -> tuple[Path, str] | None:
    """The nearest directory strictly above ``path`` (symlinks resolved) that posenc owns and its
    kind (:func:`owned_kind`), or None when no ancestor is posenc's."""
    for directory in Path(path).resolve().parents:
        kind = owned_kind(directory)
        if kind is not None:
            return directory, kind
    return None


def check_outside_posenc_dirs(path: str | Path, what: str) -> None:
    """Refuse (one-line RunDirError) an output file or directory ``path`` that lies, symlinks
    resolved, inside any posenc-owned directory (a run, prepared data, a report, logs, a
    CTranslate2 export, a checkpoint): it would overwrite posenc's own files (a vocabulary, a
    config, a model) or be mistaken for them. ``path`` itself is not judged (see :func:`check_target`)."""
    found = posenc_owner(path)
    if found is not None:
        directory, kind = found
        raise RunDirError(f"{what} {path} lies inside the posenc {KIND_WORDS[kind]} {directory}; "
                          "write it outside (posenc's directories hold only what posenc writes)")


def check_user_output(path: str | Path, what: str, inputs: tuple[str | Path, ...] = ()) -> None:
    """An output file the user named: :func:`posenc.files.check_output_file` (not a directory, not
    an input, its directory exists) and outside every posenc directory (:func:`check_outside_posenc_dirs`)."""
    check_output_file(path, what, inputs)
    check_outside_posenc_dirs(path, what)


# ----------------------------------------------------------------------------- lock
def _holder(path: Path) -> int:
    try:
        return int(path.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


#: What a command refused by a held lock can do, by default (a command that names an out_dir).
IN_USE_ADVICE = "wait for it to finish or use another out_dir"


def missing_directories(directory: Path) -> list[Path]:
    """``directory`` and those of its ancestors that do not exist, deepest first: what
    ``mkdir(parents=True)`` would create."""
    missing = []
    for d in (directory, *directory.parents):
        if d.exists() or d.is_symlink():
            break
        missing.append(d)
    return missing


def remove_created(created: list[Path]) -> None:
    """Remove the directories of ``created`` that are still empty, deepest first (a parent after
    its children): a failed command leaves none of the directories it created, and touches no other."""
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()  # only if empty
        except OSError:
            pass


@contextmanager
def exclusive(directory: str | Path, lock_name: str = LOCK_NAME, advice: str = IN_USE_ADVICE) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory`` (file ``directory/LOCK_NAME`` with our pid).

    The lock is an ``fcntl.flock`` on that file, so the kernel releases it when its process
    dies: a lock file left by a dead pid is taken over (and logged); one held by a live process
    is a one-line :class:`ConfigError` ending in ``advice``. On exit the lock file is removed, and
    so is every directory this call created (``directory`` and missing parents) that is still
    empty, so a failed command leaves no trace.
    """
    import fcntl

    directory = Path(directory)
    created = missing_directories(directory)
    os_call(lambda: directory.mkdir(parents=True, exist_ok=True), directory)
    path = directory / lock_name
    while True:
        stale = _holder(path) if path.is_file() and not path.is_symlink() else 0
        fd = _open_lock(path, directory, created)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            remove_created(created)
            raise ConfigError(
                f"{directory} is in use by another posenc process (pid {_holder(path) or '?'}); {advice}"
            ) from None
        if path.exists() and os.fstat(fd).st_ino == os.stat(path).st_ino:
            break  # else the previous holder removed the file between our open and flock: retry
        os.close(fd)
    if stale and stale != os.getpid() and not pid_alive(stale):
        log.info("taking over the stale lock of dead process %d in %s", stale, directory)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        remove_created(created)


def in_use(directory: str | Path, lock_name: str = LOCK_NAME) -> int | None:
    """The pid (0 if unreadable) of the live posenc process holding ``directory``'s lock, or None."""
    import fcntl

    path = Path(directory) / lock_name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder(path)
    finally:
        os.close(fd)  # also releases a shared lock we got
    return None


def check_free_target(directory: str | Path, kind: str, what: str = "out_dir") -> None:
    """:func:`check_target`, except that a directory another posenc process holds (its lock) is
    reported as in use: what it is writing there (``.data.*``) is not a user's file."""
    try:
        check_target(directory, kind, what)
    except RunDirError:
        pid = in_use(directory)
        if pid is not None:
            raise ConfigError(f"{directory} is in use by another posenc process (pid {pid or '?'}); "
                              "wait for it to finish or use another out_dir") from None
        raise


def _open_lock(path: Path, directory: Path, created: list[Path]) -> int:
    """Open (create) the lock file, never through a symlink and never a directory."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        remove_created(created)
        kind = "a symlink" if path.is_symlink() else "not a regular file"
        raise RunDirError(f"lock file {path} is {kind}; remove it if no posenc process is using {directory}")
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        remove_created(created)
        if err.errno in (errno.ELOOP, errno.EISDIR):
            raise RunDirError(f"lock file {path} is not a regular file; remove it if no posenc process "
                              f"is using {directory}") from None
        raise RunDirError(f"cannot lock {directory}: {os_error_message(err, path)}") from None


# ----------------------------------------------------------------------------- fingerprint check
def stored_run(out_dir: str | Path, config_type: type) -> RunRecord | None:
    """What a run directory recorded about its config (:meth:`RunRecord.read`): its
    ``fingerprint.json``, or for runs older than fingerprints the ``config.yaml`` beside their
    checkpoints (read as ``config_type`` here, so a file that no longer loads is named in the
    error); None when it holds no run."""
    out = Path(out_dir)
    if (out / FINGERPRINT_NAME).is_file():
        return RunRecord.read(
            read_json_dict(out / FINGERPRINT_NAME, "use --no-resume to start afresh or another out_dir"))
    if (out / CONFIG_NAME).is_file() and (out / "checkpoints").is_dir():
        with naming(out / CONFIG_NAME):
            data = load_yaml(out / CONFIG_NAME)
            read_stored(config_type, data)
        return RunRecord.read(data)
    return None


def read_json_dict(path: Path, hint: str) -> dict[str, Any]:
    """A JSON object stored by posenc (a fingerprint), else a one-line RunDirError with ``hint``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not valid JSON"
        raise RunDirError(f"{path}: {reason}; {hint}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a posenc fingerprint (a JSON object); {hint}")
    return data


@dataclass(frozen=True)
class Opening:
    """What :func:`open_run` found in a run directory: the ``verdict`` (:func:`same_run`) on the
    run recorded there (None: nothing to continue) and the ``checkpoint`` to resume from (None:
    training starts at step 0)."""

    verdict: Verdict | None = None
    checkpoint: Path | None = None

    @property
    def continues(self) -> bool:
        """Whether an earlier run is continued (its outputs kept), from a checkpoint or not."""
        return self.verdict is not None


def open_run(cfg: Any, out: str | Path, resume: bool) -> Opening:
    """Validate a run before anything of it is written, and say what it continues: its
    ``train.device`` is usable on this machine (a one-line error for ``cuda`` without CUDA), and
    with ``resume`` the run recorded in ``out`` is one this config continues (:func:`read_run`;
    a stale verdict is a one-line :class:`ConfigError` naming the differing keys, and a finished
    run without a checkpoint to resume from is refused, never trained again over its files);
    without, the earlier outputs can be replaced."""
    opening = read_run(cfg, Path(out)) if resume else Opening()
    if opening.verdict is not None and opening.verdict.kind == "stale":
        raise ConfigError(f"{out} holds a run with another config: {opening.verdict.detail}; "
                          "use --no-resume to start afresh or another out_dir")
    if not opening.continues:
        check_clearable(out)
    elif opening.checkpoint is None and (Path(out) / "summary.json").is_file():
        raise RunDirError(f"{out} holds a finished run but no checkpoint to resume from (trained elsewhere and "
                          "copied back without checkpoints/ckpt_*?): training would start again over it; score "
                          "it as it is, or use --no-resume to start afresh or another out_dir")
    resolve_device(cfg.train.device, env_int("LOCAL_RANK", 0))
    return opening


def read_run(cfg: Any, out: Path) -> Opening:
    """The run directory ``out`` judged against ``cfg`` by the one rule (:func:`same_run`): the
    verdict on the run it records, stale too when the checkpoint it would resume from (its latest)
    records another run, or a ``max_steps`` below the step it resumes from; changes that only extend
    training, and options and methods added since, pass. Nothing is raised for a stale run:
    :func:`open_run` refuses it."""
    stored = stored_run(out, type(cfg))
    if stored is None:
        return Opening()
    path = latest_checkpoint(out / "checkpoints")
    state = checkpoint_state(path) if path is not None else {}
    step = state.get("step")  # a cap below the steps it resumes from is no extension
    records = [("", replace(stored, steps=step if isinstance(step, int) else None))]
    if state.get("record") is not None:  # a checkpoint older than checkpoint records: the run's record judged it
        records.append((f"its checkpoint {path.name} is another run's", RunRecord.read(state["record"])))
    first: Verdict | None = None
    for whose, record in records:  # the run's record first: its verdict is the opening's
        verdict = same_run(record, cfg)
        if verdict.kind == "stale":
            return Opening(replace(verdict, detail=f"{whose} ({verdict.detail})" if whose else verdict.detail), path)
        first = first or verdict
    return Opening(first, path)


def check_clearable(out_dir: str | Path) -> None:
    """Before a fresh start replaces an earlier session (:func:`clear_run`): no checkpoint in
    ``out_dir/checkpoints`` may hold a file posenc did not write (a one-line RunDirError naming
    it), since the new run may write a checkpoint of the same name over it."""
    ckpts = Path(out_dir) / "checkpoints"
    if not ckpts.is_dir() or ckpts.is_symlink():
        return
    for child in sorted(ckpts.iterdir()):
        if CHECKPOINT_DIR.match(child.name) and child.is_dir() and not child.is_symlink():
            foreign = os_call(lambda: foreign_files(child), child)
            if foreign:
                raise RunDirError(f"{child} holds files posenc did not write ({foreign[0]!r}); a fresh start would "
                                  "replace that checkpoint: move them away or use another out_dir")


def commit_run(cfg: Any, out: Path, resumed: bool, own_files: Callable[[Any, Path], None] | None = None,
               record: RunRecord | None = None) -> None:
    """Write a validated run's directory (rank 0 only), once the Trainer has restored and checked
    the checkpoint it resumes from (``Trainer.fit(on_start=...)``), so a checkpoint that does not
    load leaves the directory untouched: a fresh run first removes an earlier session's outputs
    (posenc's files only); then the marker, config.yaml (:func:`write_run_files`),
    fingerprint.json (``record``, default :meth:`RunRecord.of` ``cfg``) and the task's own files
    (``own_files(cfg, out)``, e.g. the vocabulary)."""
    if not resumed:
        clear_run(out)
    write_run_files(cfg, out, record)
    if own_files is not None:
        own_files(cfg, out)


#: Checkpoint directories inside ``checkpoints/``: only their checkpoint files are posenc's.
CHECKPOINT_DIR = re.compile(r"^(ckpt_\d{8}|average)$")


def clear_run(out_dir: str | Path) -> None:
    """Remove the outputs of an earlier training session (``--no-resume``): the files of
    :data:`RUN_OUTPUTS`, and inside its directories only what posenc writes there
    (:data:`OWN_CHILDREN`); a directory left non-empty by other files stays."""
    out = Path(out_dir)
    for name in RUN_OUTPUTS:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            _clear_own_children(p, OWN_CHILDREN.get(name))
        elif p.exists() or p.is_symlink():
            p.unlink()


def _clear_own_children(directory: Path, pattern: re.Pattern[str] | None) -> None:
    """Remove what posenc wrote in ``directory``: the children ``pattern`` names; inside a
    checkpoint (``ckpt_*``, ``average``) only its files (:func:`remove_checkpoint`)."""
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


def check_average_output(out: str | Path) -> None:
    """``posenc average --output``: a new or empty directory, or an earlier average (its
    ``state.json`` says ``"kind": "average"``) holding only the files of a checkpoint
    (``training.checkpoint.CHECKPOINT_FILES``, which the new average replaces); anything else is a one-line
    RunDirError."""
    out = Path(out)
    if _forbidden(out) is not None or (out.exists() and not out.is_dir()) or out.is_symlink():
        raise RunDirError(f"--output {out} exists and is not a directory of averaged weights; "
                          "give a new directory (or an earlier average's output)")
    if not out.exists() or not any(out.iterdir()):
        return
    try:
        kind = json.loads((out / "state.json").read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != "average":
        raise RunDirError(f"--output {out} is not empty and not an earlier average's output; posenc would "
                          "replace it: give a new directory (or an earlier average's output)")
    foreign = os_call(lambda: foreign_files(out), out)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise RunDirError(f"--output {out} is an earlier average but also holds files posenc did not write "
                          f"({foreign[0]!r}{more}); move them away or give a new directory")


def write_run_files(cfg: Any, out_dir: str | Path | None = None, record: RunRecord | None = None) -> None:
    """The marker, config.yaml and fingerprint.json in ``out_dir`` (default ``cfg.out_dir``),
    written once the run is valid. config.yaml holds the config with run-relative paths
    (its ``stored_form()``, where the config has one: a translation run's), else whole;
    fingerprint.json the run's record (``record``, default :meth:`RunRecord.of` the stored config;
    the fingerprint ignores paths)."""
    out = Path(cfg.out_dir if out_dir is None else out_dir)
    write_marker(out, "run")
    stored = cfg.stored_form() if hasattr(cfg, "stored_form") else cfg
    atomic_write_text(out / CONFIG_NAME, yaml.safe_dump(to_dict(stored), sort_keys=False))
    record = RunRecord.of(stored) if record is None else record
    atomic_write_text(out / FINGERPRINT_NAME, json.dumps(record.to_dict(), indent=1, sort_keys=True))
