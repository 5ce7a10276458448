"""Pickle-free checkpoints: safetensors for tensors, JSON/YAML for everything else.

Layout of one checkpoint (a directory, written atomically)::

    ckpt_00005000/
        model.safetensors   model weights (tied weights stored once, aliases in the metadata)
        optim.safetensors   optimizer state tensors ("optim.state.<i>.<name>") + RNG tensors
        state.json          step/epoch/position, scheduler, scaler, optimizer hyper-parameters,
                            python/numpy RNG states, sizes + SHA-256 of the tensor files
        config.yaml         the run's configuration (model and training)

The directory is assembled under a hidden temporary name in the same parent, every file and the
directory are fsync'ed, and only then is it renamed into place with ``os.replace``, so a crash
never leaves a half-written ``ckpt_*`` directory. ``torch.save``/``torch.load`` are never used.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from posenc.config import safe_load_bounded
from posenc.errors import CheckpointError
from posenc.files import sha256_of
from posenc.processes import pid_alive

MODEL_FILE, OPTIM_FILE, STATE_FILE, CONFIG_FILE = "model.safetensors", "optim.safetensors", "state.json", "config.yaml"
CKPT_RE = re.compile(r"^ckpt_(\d{8})$")
FORMAT = "posenc-checkpoint"
_ALIASES_KEY = "posenc.aliases"


@dataclass
class Checkpoint:
    """A loaded checkpoint (:func:`load_checkpoint`), on the CPU.

    Args:
        path: the checkpoint directory.
        model: every state-dict key of the model (tied weights' aliases included) → its tensor.
        state: its state.json (step, scheduler, RNG states, the run's record, ...).
        config: its config.yaml (the config sections the run stores with every checkpoint).
        tensors: its optim.safetensors, flat (optimizer state and RNG tensors); empty when loaded
            without the optimizer or when it has none.
    """

    path: Path
    model: dict[str, Tensor]
    state: dict[str, Any]
    config: dict[str, Any]
    tensors: dict[str, Tensor] = field(default_factory=dict)  # optim.safetensors, flat

    @property
    def step(self) -> int:
        """The update the checkpoint was saved after (0 when its state does not say)."""
        return int(self.state.get("step", 0))

    def optimizer_state(self) -> dict[str, Any] | None:
        """The optimizer state this checkpoint was saved with.

        Returns:
            The ``torch.optim.Optimizer.state_dict()`` it was saved from, or None for a model-only
            checkpoint.

        Raises:
            CheckpointError: its optimizer metadata has no param_groups.
        """
        meta = self.state.get("optimizer")
        if meta is None:
            return None
        return unflatten_optimizer(self.tensors, meta, self.path)


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint saved after ``step``.

    Args:
        step: the update count.

    Returns:
        ``ckpt_`` and the step in eight digits (``ckpt_00005000``), so names sort by step.
    """
    return f"ckpt_{step:08d}"


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint directory's name says.

    Args:
        path: a checkpoint directory named by :func:`checkpoint_name`.

    Returns:
        Its step (``ckpt_00005000`` → 5000).
    """
    return int(path.name.split("_")[-1])


# ----------------------------------------------------------------------------- tensors <-> files
def dedupe_state(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Split a state dict into what safetensors can store: each tensor once.

    Args:
        state: a model's state dict (tied weights share one tensor under several keys).

    Returns:
        ``(unique, aliases)``: contiguous CPU tensors, one per distinct tensor (partial overlaps
        cloned), and ``{alias: original}`` for the keys that are the very same tensor as another.
    """
    unique: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    storages: set[int] = set()
    for key, value in state.items():
        t = value.detach()
        ident = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if t.numel() > 0 and ident in seen:
            aliases[key] = seen[ident]
            continue
        seen[ident] = key
        ptr = t.untyped_storage().data_ptr()
        shared = t.numel() > 0 and ptr in storages
        storages.add(ptr)
        t = t.to("cpu")
        unique[key] = t.clone() if shared or not t.is_contiguous() else t
    return unique, aliases


def flatten_optimizer(optim_state: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split an optimizer's state into tensors for safetensors and the rest for state.json.

    Args:
        optim_state: ``optimizer.state_dict()``.

    Returns:
        ``(tensors, meta)``: the state tensors as contiguous CPU tensors named
        ``optim.state.<i>.<name>``, and the param groups and non-tensor state, JSON-safe.
    """
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in optim_state["state"].items():
        for name, value in entry.items():
            if isinstance(value, Tensor):
                tensors[f"optim.state.{index}.{name}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    groups = [{k: _jsonable(v) for k, v in g.items()} for g in optim_state["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, Tensor], meta: dict[str, Any], where: Path) -> dict[str, Any]:
    """Inverse of :func:`flatten_optimizer`.

    Args:
        tensors: a checkpoint's flat tensors (entries not named ``optim.state.*`` are skipped).
        meta: the metadata :func:`flatten_optimizer` returned (from state.json).
        where: the checkpoint, for the message.

    Returns:
        An ``optimizer.state_dict()`` to load (``betas`` as tuples).

    Raises:
        CheckpointError: ``meta`` has no param_groups.
    """
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if not key.startswith("optim.state."):
            continue
        index, name = key[len("optim.state."):].split(".", 1)
        state.setdefault(int(index), {})[name] = value
    for index, entry in meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(entry)
    groups = []
    for group in meta.get("param_groups", []):
        g = dict(group)
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    if not groups:
        raise CheckpointError(f"{where}: state.json has optimizer metadata without param_groups")
    return {"state": state, "param_groups": groups}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ----------------------------------------------------------------------------- atomic writing
def _fsync_path(path: Path) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:  # e.g. directories on Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _write_tensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> dict[str, Any]:
    save_file(tensors, str(path), metadata=metadata)
    _fsync_path(path)
    return {"size": path.stat().st_size, "sha256": sha256_of(path)}


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Write a directory all at once: on success the temporary directory replaces ``final``
    atomically, on any exception it is removed and ``final`` is left untouched.

    Args:
        final: the directory to write (its parent is created if missing).

    Yields:
        A new temporary directory next to ``final``, named with this process's pid, to fill.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        _fsync_path(tmp)
        old = None
        if final.exists():
            old = final.parent / f".old-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_path(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_TEMP_RE = re.compile(r"^\.(?P<kind>tmp|old)-(?P<name>.+?)(?:-(?P<pid>\d+))?-(?P<uid>[0-9a-f]+)$")


def _abandoned(pid: str | None) -> bool:
    """A temporary is abandoned if its writer is this process or a dead one (a name without a
    pid counts as abandoned)."""
    return pid is None or int(pid) == os.getpid() or not pid_alive(int(pid))


def remove_stale_temporaries(directory: Path) -> None:
    """Clean up after saves interrupted by a crash: delete ``.tmp-*`` directories; an ``.old-*``
    copy (a checkpoint being replaced) is moved back if the replacement never arrived. Only
    temporaries of dead writers (or of this process) are touched: a live process's in-progress
    save, named with its pid, is left alone.

    Args:
        directory: the directory that holds checkpoints (nothing happens if it does not exist).
    """
    if not Path(directory).is_dir():
        return
    for p in sorted(Path(directory).iterdir()):
        m = _TEMP_RE.match(p.name)
        if not p.is_dir() or m is None or not _abandoned(m.group("pid")):
            continue
        if m.group("kind") == "tmp":
            shutil.rmtree(p, ignore_errors=True)
            continue
        original = p.parent / m.group("name")
        if original.exists():
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.replace(p, original)


# ----------------------------------------------------------------------------- save
def save_checkpoint(
    path: str | Path,
    model_state: dict[str, Tensor],
    state: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    optim_state: dict[str, Any] | None = None,
    tensors: dict[str, Tensor] | None = None,
) -> Path:
    """Write a checkpoint directory at ``path`` atomically and return it.

    Args:
        path: the checkpoint directory; an existing one is replaced, unless it holds files posenc
            did not write.
        model_state: the model's state dict (tied weights stored once).
        state: JSON-safe training state, stored in state.json together with the optimizer's
            hyper-parameters and the files' checksums; None for none.
        config: the config sections to store in config.yaml; None for none.
        optim_state: ``optimizer.state_dict()``, flattened into optim.safetensors and state.json;
            None for a model-only checkpoint.
        tensors: other tensors to store in optim.safetensors (e.g. RNG states); None for none.

    Returns:
        ``path``, as a path.

    Raises:
        CheckpointError: ``state`` is not JSON-serialisable, ``path`` holds files posenc did not
            write, or writing fails (a full disk); earlier checkpoints are intact.
    """
    path = Path(path)
    unique, aliases = dedupe_state(model_state)
    extra = {k: v.detach().to("cpu").contiguous() for k, v in (tensors or {}).items()}
    full_state: dict[str, Any] = {"format": FORMAT, "version": 1, **(state or {})}
    if optim_state is not None:
        optim_tensors, full_state["optimizer"] = flatten_optimizer(optim_state)
        extra.update(optim_tensors)
    try:
        json.dumps(full_state)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: training state is not JSON-serialisable ({err})") from None
    if path.is_dir() and not path.is_symlink() and foreign_files(path):
        raise CheckpointError(f"{path}: holds files posenc did not write ({foreign_files(path)[0]!r}); "
                              "a checkpoint never replaces them: move them away")
    try:
        with atomic_directory(path) as tmp:
            meta = {"format": "pt", _ALIASES_KEY: json.dumps(aliases)}
            files = {MODEL_FILE: _write_tensors(tmp / MODEL_FILE, unique, meta)}
            if extra:
                files[OPTIM_FILE] = _write_tensors(tmp / OPTIM_FILE, extra, {"format": "pt"})
            full_state["files"] = files
            _write_text(tmp / STATE_FILE, json.dumps(full_state, indent=1))
            _write_text(tmp / CONFIG_FILE, yaml.safe_dump(config or {}, sort_keys=False))
    except (OSError, SafetensorError) as err:  # disk full, file too large, read-only directory
        raise CheckpointError(f"{path}: cannot write the checkpoint ({_write_failure(err)}); "
                              "earlier checkpoints are intact") from None
    return path


def _write_failure(err: BaseException) -> str:
    """A short reason for a failed write (``No space left on device``, ``Permission denied``)."""
    if isinstance(err, OSError):
        return err.strerror or str(err) or type(err).__name__
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:200]


# ----------------------------------------------------------------------------- load
def _read_tensors(
    path: Path, expected: dict[str, Any] | None, verify: bool
) -> tuple[dict[str, Tensor], dict[str, str]]:
    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path.parent}: missing {path.name}")
    if verify and expected is not None:
        size = path.stat().st_size
        if size != expected.get("size"):
            raise CheckpointError(f"{where}: truncated or corrupt ({size} bytes, expected {expected.get('size')})")
        if sha256_of(path) != expected.get("sha256"):
            raise CheckpointError(f"{where}: corrupt (SHA-256 checksum mismatch)")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as fh:
            metadata = fh.metadata() or {}
    except Exception as err:  # SafetensorError, OSError, ...: the file is not usable
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{where}: corrupt or truncated safetensors file ({reason})") from None
    return tensors, metadata


def _read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"checkpoint {directory}: missing {STATE_FILE}")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{directory.name}/{STATE_FILE}: not valid JSON ({err.__class__.__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{directory.name}/{STATE_FILE}: not a posenc checkpoint state")
    return state


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"checkpoint {directory}: missing {CONFIG_FILE}")
    try:
        config = safe_load_bounded(path.read_text(encoding="utf-8"))  # no alias bombs
    except (yaml.YAMLError, UnicodeDecodeError):
        raise CheckpointError(f"{directory.name}/{CONFIG_FILE}: not valid YAML") from None
    return config if isinstance(config, dict) else {}


def checkpoint_config(path: str | Path) -> dict[str, Any]:
    """The configuration stored with a checkpoint (its config.yaml), without reading tensors.

    Args:
        path: the checkpoint directory.

    Returns:
        Its config.yaml as a dict (empty when it is not a mapping).

    Raises:
        CheckpointError: config.yaml is missing or not valid YAML.
    """
    return _read_config(Path(path))


def checkpoint_state(path: str | Path) -> dict[str, Any]:
    """The training state stored with a checkpoint, without reading tensors.

    Args:
        path: the checkpoint directory.

    Returns:
        Its state.json (step, the run's ``record``, ...) as a dict.

    Raises:
        CheckpointError: state.json is missing, not valid JSON or not a posenc checkpoint state.
    """
    return _read_state(Path(path))


def load_checkpoint(path: str | Path, verify: bool = True, with_optimizer: bool = True,
                    state: dict[str, Any] | None = None) -> Checkpoint:
    """Read a checkpoint directory (or its ``model.safetensors``) on the CPU.

    Args:
        path: the checkpoint directory, or its ``model.safetensors``.
        verify: check each tensor file's size and SHA-256 against state.json.
        with_optimizer: read optim.safetensors too (False for weights only).
        state: its state.json, where the caller has read it already (:func:`checkpoint_state`), so
            no file of a checkpoint is read twice; None reads it here.

    Returns:
        The loaded :class:`Checkpoint`.

    Raises:
        CheckpointError: one line, when a file is missing, truncated, corrupt (size/SHA-256
            mismatch when ``verify``, or unreadable safetensors/JSON/YAML).
    """
    directory = Path(path)
    if directory.is_file() and directory.name == MODEL_FILE:
        directory = directory.parent
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory}: no such directory")
    state = _read_state(directory) if state is None else state
    files = state.get("files", {})
    model, metadata = _read_tensors(directory / MODEL_FILE, files.get(MODEL_FILE), verify)
    try:
        aliases = json.loads(metadata.get(_ALIASES_KEY, "{}"))
    except json.JSONDecodeError:
        raise CheckpointError(f"{directory.name}/{MODEL_FILE}: bad alias metadata") from None
    for alias, original in aliases.items():
        if original not in model:
            raise CheckpointError(f"{directory.name}/{MODEL_FILE}: alias {alias!r} points to missing {original!r}")
        model[alias] = model[original]
    tensors: dict[str, Tensor] = {}
    if with_optimizer and (OPTIM_FILE in files or (directory / OPTIM_FILE).exists()):
        tensors, _ = _read_tensors(directory / OPTIM_FILE, files.get(OPTIM_FILE), verify)
    return Checkpoint(directory, model, state, _read_config(directory), tensors)


# ----------------------------------------------------------------------------- compatibility and restoring
def check_resumable(ckpt: Checkpoint, expected: dict[str, Any]) -> None:
    """A one-line CheckpointError unless a run can resume training from ``ckpt``: a training
    checkpoint with its optimizer state, whose state.json stores every entry of ``expected`` (e.g.
    a task's hash of its data) as this run has it (a key the checkpoint lacks is not checked).

    Args:
        ckpt: the checkpoint to resume from.
        expected: state.json entries and the values this run has for them.

    Raises:
        CheckpointError: ``ckpt`` is model-only or stores another value of an ``expected`` key.
    """
    if ckpt.state.get("kind") != "train" or ckpt.state.get("optimizer") is None:
        raise CheckpointError(f"{ckpt.path}: model-only checkpoint (no optimizer state); "
                              "cannot resume training from it")
    for key, value in expected.items():
        saved = ckpt.state.get(key)
        if saved is not None and saved != value:
            raise CheckpointError(f"{ckpt.path}: saved with another {key} ({str(saved)[:12]}, this run "
                                  f"{str(value)[:12]}); cannot resume training from it")


def check_state_compatible(model_state: dict[str, Tensor], expected: dict[str, Tensor], where: str) -> None:
    """Check that a checkpoint's weights fit a model: the same keys and shapes.

    Args:
        model_state: the checkpoint's state dict.
        expected: the state dict it must match (the model's, or another checkpoint's).
        where: the checkpoint, for the message.

    Raises:
        CheckpointError: a key is missing or extra, or a shape differs (the first one named).
    """
    missing = [k for k in expected if k not in model_state]
    if missing:
        raise CheckpointError(f"{where}: checkpoint lacks parameter {missing[0]!r} ({len(missing)} missing)")
    extra = [k for k in model_state if k not in expected]
    if extra:
        raise CheckpointError(f"{where}: checkpoint has unexpected parameter {extra[0]!r} ({len(extra)} extra)")
    for key, value in expected.items():
        got = model_state[key]
        if tuple(got.shape) != tuple(value.shape):
            raise CheckpointError(
                f"{where}: parameter {key!r} has shape {tuple(got.shape)} in the checkpoint, "
                f"model expects {tuple(value.shape)}"
            )


def restore_model(model: torch.nn.Module, ckpt: Checkpoint) -> None:
    """Load ``ckpt``'s weights into ``model`` after a key/shape check.

    Args:
        model: the model to load into (unwrapped: its state-dict keys are the checkpoint's).
        ckpt: the loaded checkpoint.

    Raises:
        CheckpointError: the weights do not fit ``model`` (:func:`check_state_compatible`).
    """
    check_state_compatible(ckpt.model, model.state_dict(), str(ckpt.path))
    model.load_state_dict(ckpt.model, strict=True)


#: Implementation switches of torch's Adam that belong to this run, not to a checkpoint.
_IMPL_KEYS = ("fused", "foreach", "capturable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` keeping this run's implementation (fused, or foreach
    where torch has no fused kernel for the device) rather than the checkpoint's, with ``step`` where that
    implementation wants it (on the parameter's device for fused/capturable, on the CPU otherwise).

    Args:
        optimizer: the optimizer built for this run.
        state: the checkpoint's optimizer state (:meth:`Checkpoint.optimizer_state`).
    """
    impl = [{k: g.get(k) for k in _IMPL_KEYS if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, kept in zip(optimizer.param_groups, impl):
        group.update(kept)
        on_device = bool(kept.get("fused") or kept.get("capturable"))
        for p in group["params"]:
            entry = optimizer.state.get(p, {})
            if isinstance(entry.get("step"), torch.Tensor):
                entry["step"] = entry["step"].to(device=p.device if on_device else "cpu", dtype=torch.float32)


# ----------------------------------------------------------------------------- directory management
def list_checkpoints(directory: str | Path) -> list[Path]:
    """The checkpoints saved under ``directory``.

    Args:
        directory: a run's ``checkpoints/`` directory, existing or not.

    Returns:
        Its complete ``ckpt_XXXXXXXX`` directories, oldest step first; empty when there is none.
    """
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if p.is_dir() and (m := CKPT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest checkpoint under ``directory``.

    Args:
        directory: a run's ``checkpoints/`` directory, existing or not.

    Returns:
        The checkpoint with the highest step, or None when there is none.
    """
    ckpts = list_checkpoints(directory)
    return ckpts[-1] if ckpts else None


def prune(directory: Path, keep_last: int, protect: set[int]) -> list[Path]:
    """Delete all but the newest checkpoints (their files only: a user's file there stays).

    Args:
        directory: a run's ``checkpoints/`` directory.
        keep_last: how many of the newest to keep; 0 keeps all.
        protect: steps never deleted (the best N, to be averaged).

    Returns:
        The deleted checkpoint directories.
    """
    ckpts = list_checkpoints(directory)
    if keep_last <= 0 or len(ckpts) <= keep_last:
        return []
    doomed = [p for p in ckpts[: len(ckpts) - keep_last] if checkpoint_step(p) not in protect]
    for p in doomed:
        remove_checkpoint(p)  # its checkpoint files only: a user's file there stays
    return doomed


#: Every file posenc writes into a checkpoint directory (nothing else there is ever deleted).
CHECKPOINT_FILES = frozenset({MODEL_FILE, OPTIM_FILE, STATE_FILE, CONFIG_FILE})


def foreign_files(directory: str | Path) -> list[str]:
    """What in a checkpoint directory posenc did not write.

    Args:
        directory: an existing checkpoint directory.

    Returns:
        The names in it other than the regular files of :data:`CHECKPOINT_FILES`, sorted.
    """
    d = Path(directory)
    return sorted(p.name for p in d.iterdir() if p.name not in CHECKPOINT_FILES or not p.is_file() or p.is_symlink())


def remove_checkpoint(directory: str | Path) -> bool:
    """Delete the files posenc wrote in the checkpoint ``directory`` (:data:`CHECKPOINT_FILES`),
    then the directory if nothing else is left; True when it is gone. A user's file in it stays
    (and so does the directory, logged).

    Args:
        directory: the checkpoint directory.

    Returns:
        True when the directory is gone, False when files posenc did not write keep it.
    """
    d = Path(directory)
    for name in CHECKPOINT_FILES:
        f = d / name
        if f.is_file() or f.is_symlink():
            f.unlink()
    try:
        d.rmdir()
    except OSError:
        logging.getLogger("posenc").info("kept %s: it holds files posenc did not write", d)
        return False
    return True
