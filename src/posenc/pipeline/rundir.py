"""Run directories that never lie: an exclusive lock, the fingerprint check, run-relative paths.

A run directory holds ``config.yaml`` (the resolved config, with paths relative to the run
directory) and ``fingerprint.json`` (:func:`posenc.pipeline.fingerprint.fingerprint` of it).
Both are written only once a command has validated everything (:func:`write_run_files`); a
command that fails before leaves the directory as it found it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator
from contextlib import contextmanager

from posenc.config import from_dict, load_yaml, save_yaml, to_dict
from posenc.errors import ConfigError
from posenc.pipeline.config import RunConfig
from posenc.pipeline.fingerprint import describe_diff, diff_keys, fingerprint

log = logging.getLogger("posenc")

LOCK_NAME = ".posenc.lock"
CONFIG_NAME, FINGERPRINT_NAME = "config.yaml", "fingerprint.json"
#: Outputs of a training session, removed when a run starts afresh (``--no-resume``).
RUN_OUTPUTS = ("checkpoints", "train.csv", "valid.csv", "tensorboard", "summary.json", "translations",
               "results.json", CONFIG_NAME, FINGERPRINT_NAME, "spm.model")
#: Keys filled in from the prepared data (vocabulary size, CAPE's α): an unresolved 0 in a new
#: config means "take it from the data", so it is not a difference.
DERIVED_KEYS = ("model.vocab_size", "rnn.vocab_size", "model.position.cape.source_scale")


# ----------------------------------------------------------------------------- lock
def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    return True


def _holder(path: Path) -> int:
    try:
        return int(path.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


@contextmanager
def exclusive(directory: str | Path, lock_name: str = LOCK_NAME) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory`` (file ``directory/LOCK_NAME`` with our pid).

    The lock is an ``fcntl.flock`` on that file, so the kernel releases it when its process
    dies: a lock file left by a dead pid is taken over (and logged); one held by a live process
    is a one-line :class:`ConfigError`. On exit the lock file is removed, and ``directory`` too
    if this call created it and it is still empty, so a failed command leaves no trace.
    """
    import fcntl

    directory = Path(directory)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / lock_name
    while True:
        stale = _holder(path) if path.exists() else 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            _cleanup_dir(directory, created)
            raise ConfigError(
                f"{directory} is in use by another posenc process (pid {_holder(path) or '?'}); "
                "wait for it to finish or use another out_dir"
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
        _cleanup_dir(directory, created)


def _cleanup_dir(directory: Path, created: bool) -> None:
    if created:
        try:
            directory.rmdir()  # only if empty
        except OSError:
            pass


# ----------------------------------------------------------------------------- fingerprint check
def saved_fingerprint(out_dir: str | Path) -> dict[str, Any] | None:
    """The fingerprint stored in a run directory (from config.yaml for older runs), or None."""
    out = Path(out_dir)
    if (out / FINGERPRINT_NAME).is_file():
        return json.loads((out / FINGERPRINT_NAME).read_text(encoding="utf-8"))
    if (out / CONFIG_NAME).is_file() and (out / "checkpoints").is_dir():
        return fingerprint(from_dict(RunConfig, load_yaml(out / CONFIG_NAME)))
    return None


def _fill_derived(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    new = json.loads(json.dumps(new))
    for key in DERIVED_KEYS:
        parts = key.split(".")
        a, b = saved, new
        for part in parts[:-1]:
            a = a.get(part) if isinstance(a, dict) else None
            b = b.get(part) if isinstance(b, dict) else None
        if isinstance(a, dict) and isinstance(b, dict) and not b.get(parts[-1]) and parts[-1] in a:
            b[parts[-1]] = a[parts[-1]]
    return new


def check_resumable(cfg: RunConfig, resume: bool) -> bool:
    """Whether ``cfg.out_dir`` holds an earlier run that this one continues.

    Raises a one-line :class:`ConfigError` naming the differing keys when it holds a run of
    another data or model config and ``resume`` is set; with ``resume`` False the old run will
    be replaced (returns False). Changes that only extend training pass.
    """
    saved = saved_fingerprint(cfg.out_dir)
    if saved is None or not resume:
        return False
    new = _fill_derived(saved, fingerprint(cfg))
    if diff_keys(saved, new):
        raise ConfigError(
            f"{cfg.out_dir} holds a run with another config: {describe_diff(saved, new)}; "
            "use --no-resume to start afresh or another out_dir"
        )
    return True


def clear_run(out_dir: str | Path) -> None:
    """Remove the outputs of an earlier training session (``--no-resume``)."""
    out = Path(out_dir)
    for name in RUN_OUTPUTS:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


# ----------------------------------------------------------------------------- run-relative paths
def relative_config(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``out_dir = "."`` and ``data_dir`` relative to the run directory when it lies
    inside it (absolute otherwise), as stored in the run's config.yaml."""
    out = Path(cfg.out_dir).resolve()
    data = Path(cfg.prepared_dir).resolve()
    if data == out / "data":
        data_dir = ""
    elif data.is_relative_to(out):
        data_dir = str(data.relative_to(out))
    else:
        data_dir = str(data)
    return replace(cfg, out_dir=".", data_dir=data_dir)


def located_config(data: dict[str, Any], run_dir: Path) -> RunConfig:
    """Inverse of :func:`relative_config`: a stored config resolved against ``run_dir``."""
    cfg = from_dict(RunConfig, data)
    data_dir = cfg.data_dir
    if data_dir and not Path(data_dir).is_absolute():
        data_dir = str(run_dir / data_dir)
    return replace(cfg, out_dir=str(run_dir), data_dir=data_dir)


def write_run_files(cfg: RunConfig) -> None:
    """config.yaml (run-relative paths) and fingerprint.json, written once the run is valid."""
    out = Path(cfg.out_dir)
    save_yaml(relative_config(cfg), out / CONFIG_NAME)
    (out / FINGERPRINT_NAME).write_text(json.dumps(fingerprint(cfg), indent=1, sort_keys=True), encoding="utf-8")


def stored_config(cfg: RunConfig) -> dict[str, Any]:
    return to_dict(relative_config(cfg))
