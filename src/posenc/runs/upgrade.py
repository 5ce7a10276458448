"""``posenc upgrade DIR...``: what an older posenc wrote under DIR, rewritten once in today's
format, so that every other command reads one format only (and refuses any other in one line
that names this command, :data:`~posenc.runs.same_run.UPGRADE`).

What an older posenc wrote otherwise, and what the upgrade makes of it:

- a directory without its marker (a run, prepared data, a report, a log directory, a model export,
  a folder of packed data; recognised by its files, :func:`older_kind`): marked (``.posenc-run``);
- a run's ``fingerprint.json`` holding a bare fingerprint: the run's record, that fingerprint with
  the extension values of the run's ``config.yaml``; a run without one: the record of its config.yaml;
- a grid cell's ``results.json`` holding the whole run ``config``: the record of that config;
- the Trainer's ``train_summary.json`` beside ``summary.json``: merged into summary.json;
- an option under an old name (:data:`RENAMED`; valid.csv's ``bleu`` column): renamed.

A stored config is read through today's classes (:func:`~posenc.runs.same_run.read_stored`, by
the run config class of the one task that reads it), so its record is the one posenc writes
today and every verdict on it stays what it was. Every stored number (metrics, summaries, curves)
is kept as it is. Every change is planned before any is made: something under DIR that posenc
would rewrite but cannot read refuses the whole upgrade in one line, nothing written. Each file is
then replaced atomically; a second upgrade finds nothing to do. Only posenc's directories are
touched (marked, or recognised as an older posenc's), and in them only posenc's files.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from posenc.config import load_yaml
from posenc.errors import PosencError, RunDirError
from posenc.files import atomic_write_text, os_call
from posenc.runs.lock import in_use
from posenc.runs.ownership import (
    CHECKPOINT_DIR,
    CONFIG_NAME,
    EXPORT_MANIFEST,
    FINGERPRINT_NAME,
    MARKER_NAME,
    cache_names,
    marker_text,
    read_marker,
    scratch_names,
)
from posenc.runs.run import config_text, record_text
from posenc.runs.same_run import RunRecord, is_record, read_stored, scoring_of
from posenc.runs.spec import SPEC_MODULE, TASKS_PACKAGE, RunSpec, declared, task_packages

#: Options an older posenc stored under another name: section → {old name: today's}.
RENAMED = {"train": {"bleu_every": "metric_every"}}
#: valid.csv's column of the task's metric, as an older posenc named it, and today.
OLD_METRIC_COLUMN, METRIC_COLUMN = "bleu", "metric"
#: ``train`` options no fingerprint ever held: a stored ``train`` with one of them is a whole config.
WHOLE_CONFIG_KEYS = frozenset({"patience", "log_every", "validate_every", "save_every", "keep_last"})
#: What an unmarked report holds (Markdown, plots and tables, folders), a log directory (worker
#: logs, the experiment spec, submitit's folder) and a folder of packed data (its archive and index).
REPORT, REPORT_SUFFIXES = "report", (".md", ".png", ".csv")
LOG_FILES = frozenset({"experiment.json", "submitit"})
PACK_FILES = frozenset({"data.tar.gz", "payload.json"})
#: Directories of a run that hold no record (weights, event files): never entered.
NOT_ENTERED = frozenset({"checkpoints", "tensorboard"})
#: The module of a task's package that holds its run config class (beside its spec).
CONFIG_MODULE = "config"
RESULTS, SUMMARY, TRAINER_SUMMARY, VALID = "results.json", "summary.json", "train_summary.json", "valid.csv"
#: What a refusal says nothing was changed.
LEFT = "nothing was changed"


@dataclass(frozen=True)
class Change:
    """One file of a posenc directory rewritten.

    Args:
        path: the file.
        text: its new text; None: the file is removed.
    """

    path: Path
    text: str | None


def upgrade(dirs: Sequence[str | Path]) -> list[Change]:
    """Rewrite what an older posenc wrote under each of ``dirs`` in today's format.

    Args:
        dirs: directories holding posenc's runs and reports (a grid's out_dir, ``runs/``, a run).

    Returns:
        The changes made, each file replaced atomically (none: already in today's format).

    Raises:
        RunDirError: a directory that holds nothing posenc wrote, or something posenc would rewrite
            but cannot read, or that another posenc process is using (one line; nothing changed).
    """
    planned: dict[Path, Change] = {}
    for directory in dirs:  # all planned before any is made; a file under two of them is changed once
        for change in plan(Path(directory)):
            planned.setdefault(change.path.resolve(), change)
    changes = sorted(planned.values(), key=lambda c: c.text is None)
    for change in changes:
        if change.text is None:
            os_call(change.path.unlink, change.path)
        else:
            atomic_write_text(change.path, change.text)
    return changes


def plan(root: Path) -> list[Change]:
    """The changes :func:`upgrade` makes under ``root``, none made.

    Args:
        root: a directory.

    Returns:
        Every change, a directory's files before its marker and a removed file last.

    Raises:
        RunDirError: as :func:`upgrade`.
    """
    if root.is_symlink() or not root.is_dir():
        raise RunDirError(f"{root} is not a directory (or is a symlink); {LEFT}")
    changes, found = [], False
    for directory in _directories(root):
        marked = read_marker(directory)
        kind = marked or os_call(lambda: older_kind(directory), directory)
        if kind is None:
            continue
        found = True
        pid = in_use(directory)
        if pid is not None:
            raise RunDirError(f"{directory} is in use by another posenc process (pid {pid or '?'}): upgrade it once "
                              f"that has finished; {LEFT}")
        changes += _run_changes(directory) if kind == "run" else []
        if marked is None and kind != "cache":  # a cache is posenc's by its name
            changes.append(Change(directory / MARKER_NAME, marker_text(kind)))
    if not found:
        raise RunDirError(f"{root} holds no directory posenc wrote (none marked {MARKER_NAME}, none laid out as an "
                          f"older posenc's run, data, report or logs); posenc upgrade rewrites only posenc's own")
    return sorted(changes, key=lambda c: c.text is None)


def _directories(root: Path) -> Iterator[Path]:
    """``root`` and every directory below it, symlinks not followed, a run's weights not entered."""
    for here, subdirs, _ in os.walk(root, onerror=_raise):
        subdirs[:] = sorted(d for d in subdirs if d not in NOT_ENTERED and not (Path(here) / d).is_symlink())
        yield Path(here)


def _raise(err: OSError) -> None:
    raise RunDirError(f"{err.filename}: {err.strerror}; {LEFT}")


# ----------------------------------------------------------------------------- unmarked directories
def older_kind(directory: Path) -> str | None:
    """What an older posenc left unmarked in ``directory``, judged by its files.

    Args:
        directory: a directory without a marker.

    Returns:
        ``run``, ``data``, ``export``, ``report``, ``logs``, ``payload`` (a folder of packed data),
        ``cache`` (a task's data cache, by its name), else None.
    """
    names = {p.name for p in directory.iterdir()} - scratch_names()
    if _older_run(directory, names):
        return "run"
    if any(_holds_data(directory, spec) for spec in declared()):
        return "data"
    if EXPORT_MANIFEST in names:
        return "export"
    if directory.name == REPORT and _older_report(directory):
        return "report"
    if directory.name == "logs" and names and all(n.endswith(".log") or n in LOG_FILES for n in names):
        return "logs"
    if names == PACK_FILES:
        return "payload"
    return "cache" if directory.name in cache_names() else None


def _older_run(directory: Path, names: set[str]) -> bool:
    """A run: its record or checkpoints beside a run config, or checkpoints beside the Trainer's log."""
    ckpts = directory / "checkpoints"
    checkpoints = ckpts.is_dir() and any(p.is_dir() and CHECKPOINT_DIR.match(p.name) for p in ckpts.glob("ckpt_*"))
    if (FINGERPRINT_NAME in names or checkpoints) and isinstance(_yaml(directory / CONFIG_NAME).get("train"), dict):
        return True
    return checkpoints and "train.csv" in names


def _holds_data(directory: Path, spec: RunSpec) -> bool:
    return bool(spec.data_files) and all((directory / name).is_file() for name in spec.data_files)


def _older_report(report: Path) -> bool:
    """A grid's report: only Markdown, plots, tables and folders, its README.md headed with the
    grid's name (``# NAME`` or ``# NAME: ...``): the name of the grid's folder or the one its
    ``logs/experiment.json`` records."""
    try:
        head = (report / "README.md").read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return False
    names = {report.parent.name, _spec_name(report.parent / "logs" / "experiment.json")} - {""}
    ours = all(p.is_dir() or p.suffix in REPORT_SUFFIXES for p in report.iterdir())
    return ours and any(head == f"# {name}" or head.startswith(f"# {name}:") for name in names)


def _spec_name(path: Path) -> str:
    """The experiment name an older posenc's log directory records (its spec), else ''."""
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("name") if path.is_file() else ""
    except (OSError, ValueError, AttributeError):
        return ""
    return name if isinstance(name, str) else ""


def _yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; {} when there is none (no file, not YAML, not a mapping)."""
    try:
        data = load_yaml(path) if path.is_file() else {}
    except (PosencError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ----------------------------------------------------------------------------- a run's files
def _run_changes(run: Path) -> list[Change]:
    """What the run directory ``run`` needs: its config.yaml's old names, its record, its results'
    record, one summary and valid.csv's column name."""
    changes, config = [], None
    if (run / CONFIG_NAME).is_file():
        stored = _yaml(run / CONFIG_NAME)
        if not stored:
            raise RunDirError(f"{run / CONFIG_NAME}: not a run config (a YAML mapping); {LEFT}")
        config = _renamed(stored)
        if config != stored:
            changes.append(Change(run / CONFIG_NAME, config_text(config)))
    return [*changes, *_record_changes(run, config), *_results_changes(run), *_summary_changes(run),
            *_valid_changes(run)]


def _record_changes(run: Path, config: dict[str, Any] | None) -> list[Change]:
    """``fingerprint.json`` as the run's record: a bare fingerprint with the extension values of
    ``config`` (the run's config.yaml), a whole config's record, the record of ``config`` where
    there is none."""
    path = run / FINGERPRINT_NAME
    if not path.is_file():
        return [] if config is None else [Change(path, record_text(_record_of(config, run / CONFIG_NAME)))]
    stored = _json(path)
    if is_record(stored):
        record = _renamed_record(stored)
    elif _is_whole(stored):
        record = _record_of(stored, path).to_dict()
    elif config is None:
        raise RunDirError(f"{path}: a bare fingerprint without the run's {CONFIG_NAME} (its extension values are "
                          f"unknown); {LEFT}")
    else:
        extension = _record_of(config, run / CONFIG_NAME).extension
        record = {"fingerprint": _renamed(stored), "extension": extension, "evaluation": None}
    return [] if record == stored else [Change(path, record_text(RunRecord.read(record)))]


def _results_changes(run: Path) -> list[Change]:
    """``results.json`` with the run's record in place of its whole ``config``."""
    path = run / RESULTS
    if not path.is_file():
        return []
    results = _json(path)
    if is_record(results.get("record")):
        new = {k: _renamed_record(v) if k == "record" else v for k, v in results.items() if k != "config"}
    elif isinstance(results.get("config"), dict):
        record = _record_of(results["config"], path, scored=True).to_dict()
        new = {"record" if k == "config" else k: record if k == "config" else v for k, v in results.items()}
    else:
        raise RunDirError(f"{path}: records no run config (posenc cannot tell which run these results are of; "
                          f"remove it to score the run again); {LEFT}")
    return [] if new == results else [Change(path, json.dumps(new, indent=2))]


def _summary_changes(run: Path) -> list[Change]:
    """``train_summary.json`` merged into ``summary.json`` (a value the two give differently is refused)."""
    path = run / TRAINER_SUMMARY
    if not path.is_file():
        return []
    trainer = _json(path)
    summary = _json(run / SUMMARY) if (run / SUMMARY).is_file() else {}
    differ = [k for k, v in trainer.items() if k in summary and summary[k] != v]
    if differ:
        raise RunDirError(f"{path} and {SUMMARY} give different {differ[0]!r}; {LEFT}")
    merged = {**summary, **{k: v for k, v in trainer.items() if k not in summary}}
    write = merged != summary or not (run / SUMMARY).is_file()
    return [*([Change(run / SUMMARY, json.dumps(merged, indent=2))] if write else []), Change(path, None)]


def _valid_changes(run: Path) -> list[Change]:
    """valid.csv with its metric column under today's name."""
    path = run / VALID
    if not path.is_file():
        return []
    try:
        text = os_call(path.read_bytes, path).decode("utf-8")  # as it is, line ends too
    except UnicodeDecodeError:
        raise RunDirError(f"{path}: not a CSV file posenc wrote (not UTF-8); {LEFT}") from None
    head, sep, rest = text.partition("\n")
    columns = head.rstrip("\r").split(",")
    if OLD_METRIC_COLUMN not in columns or METRIC_COLUMN in columns:
        return []
    renamed = ",".join(METRIC_COLUMN if c == OLD_METRIC_COLUMN else c for c in columns)
    return [Change(path, renamed + head[len(head.rstrip("\r")):] + sep + rest)]


def _json(path: Path) -> dict[str, Any]:
    """The JSON object posenc stored in ``path``, else a one-line RunDirError."""
    try:
        data = json.loads(os_call(lambda: path.read_text(encoding="utf-8"), path))
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a JSON object posenc wrote; {LEFT}")
    return data


# ----------------------------------------------------------------------------- records
def _record_of(config: dict[str, Any], where: Path, scored: bool = False) -> RunRecord:
    """The record today's posenc writes for the stored run config ``config`` (its old names
    renamed), read by the one task's run config class that reads it; ``scored`` (results scored
    with that config): with its task's scoring sections as the evaluation (:func:`scoring_of`)."""
    config = _renamed(config)
    read, errors = [], {}
    for config_type in run_config_classes():
        try:
            read.append(read_stored(config_type, config))
        except (PosencError, TypeError, ValueError) as err:
            errors[config_type] = err
    if len(read) > 1:
        raise RunDirError(f"{where}: the stored config reads as the run config of {len(read)} tasks; {LEFT}")
    if not read:  # the error of the task whose run config has most of its sections
        closest = max(errors, key=lambda t: len({f.name for f in dataclasses.fields(t)} & set(config)), default=None)
        raise RunDirError(f"{where}: the stored config reads as no task's run config "
                          f"({errors[closest] if closest else 'no task declares one'}); {LEFT}")
    return RunRecord.of(read[0], scoring_of(read[0]) if scored else None)


def _is_whole(stored: dict[str, Any]) -> bool:
    train = stored.get("train")
    return isinstance(train, dict) and bool(WHOLE_CONFIG_KEYS & set(train))


def _renamed(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a stored config or fingerprint) with the options of :data:`RENAMED` under today's names."""
    return {k: _renamed_section(k, v) if isinstance(v, dict) else v for k, v in config.items()}


def _renamed_section(section: str, options: dict[str, Any]) -> dict[str, Any]:
    names = RENAMED.get(section, {})
    both = [old for old, new in names.items() if old in options and new in options]
    if both:
        raise RunDirError(f"{section}.{both[0]} and {section}.{names[both[0]]} both stored; {LEFT}")
    return {names.get(k, k): v for k, v in options.items()}


def _renamed_record(record: dict[str, Any]) -> dict[str, Any]:
    """A stored record with the options of :data:`RENAMED` under today's names (its extension holds
    ``train`` options)."""
    return {**record, "fingerprint": _renamed(record["fingerprint"]),
            "extension": _renamed_section("train", record["extension"])}


@functools.cache
def run_config_classes() -> tuple[type, ...]:
    """The run config class of every task: the dataclasses with a ``run_spec`` in the
    :data:`CONFIG_MODULE` of each package of :data:`~posenc.runs.spec.TASKS_PACKAGE` that declares a
    spec (found by their files, as :func:`~posenc.runs.spec.discover` finds the specs).

    Returns:
        The run config classes, in package-name order.
    """
    classes = []
    for package in task_packages():
        if all((package / f"{name}.py").is_file() for name in (SPEC_MODULE, CONFIG_MODULE)):
            module = importlib.import_module(f"{TASKS_PACKAGE}.{package.name}.{CONFIG_MODULE}")
            classes += [c for c in vars(module).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
                        and c.__module__ == module.__name__ and isinstance(getattr(c, "run_spec", None), RunSpec)]
    return tuple(classes)
