"""``posenc average --run DIR --last N``: average the last N checkpoints into checkpoints/average.

``--output`` must be a new (or empty) directory or an earlier average's output: nothing else is
ever replaced. Every averaged checkpoint must belong to the run (its fingerprint.json) and record
it, and the average records it too, as the averages ``posenc train`` writes do: a run whose
checkpoint is the average is known by its record, never judged again. An output inside the run (the
default) is written under the run's lock: never into a run that ``posenc train`` (or another
command) is writing.
"""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from posenc.data.spm import Tokenizer
from posenc.errors import CheckpointError
from posenc.files import os_errors
from posenc.runs.differences import config_differences, describe_differences
from posenc.runs.lock import exclusive
from posenc.runs.ownership import check_average_output
from posenc.runs.run import Run
from posenc.runs.same_run import RunRecord, held_by_one
from posenc.runs.spec import declared
from posenc.tasks.translation.load import check_checkpoint_run, check_vocab
from posenc.tasks.translation.spec import VOCAB_FILE, VOCAB_KEY
from posenc.training.averaging import save_average
from posenc.training.checkpoint import checkpoint_config, checkpoint_state, list_checkpoints

#: What to do when the run is in use (its lock is held).
IN_USE = "wait for it to finish, or give --output outside the run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="run directory")
    parser.add_argument("--last", type=int, default=10, help="number of checkpoints (SHAPE averages 10)")
    parser.add_argument("--output", help="output checkpoint directory, new or an earlier average "
                                         "(default RUN/checkpoints/average)")


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run)
    ckpt_dir = run_dir / "checkpoints"
    _last_checkpoints(ckpt_dir, args.last)  # before anything is locked or written
    target = Path(args.output) if args.output else ckpt_dir / "average"
    check_average_output(target)
    with run_lock(run_dir, target):
        chosen = _last_checkpoints(ckpt_dir, args.last)  # as they are while the lock is held
        record = _check_belong(run_dir, chosen)
        with os_errors(f"a file in {target}"):
            out = save_average(chosen, target, (VOCAB_KEY,), record)
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {out}")
    return 0


def _last_checkpoints(ckpt_dir: Path, last: int) -> list[Path]:
    """The ``last`` newest checkpoints in ``ckpt_dir``; a one-line error for none or ``last`` < 1."""
    paths = list_checkpoints(ckpt_dir)
    if not paths:
        raise CheckpointError(f"{ckpt_dir}: no checkpoints to average")
    if last < 1:
        raise CheckpointError(f"--last must be >= 1, got {last}")
    return paths[-last:]


def run_lock(run_dir: Path, target: Path) -> AbstractContextManager[object]:
    """The run's lock when ``target`` lies inside the run directory (a one-line error while another
    posenc process holds it); nothing to hold for an output elsewhere, which only reads the run."""
    inside = target.resolve().is_relative_to(run_dir.resolve())
    return exclusive(run_dir, advice=IN_USE) if inside else nullcontext()


def _check_belong(run_dir: Path, chosen: list[Path]) -> dict[str, Any] | None:
    """Every checkpoint of ``chosen`` is the run's (its model sections, vocabulary and record), else
    one line; the record the average stores (:func:`_run_record`)."""
    vocab = run_dir / VOCAB_FILE
    digest = Tokenizer(vocab).sha256 if vocab.is_file() else None
    run = Run.finished(run_dir, which=None, stored=False)
    for path in chosen:
        check_checkpoint_run(run.out, checkpoint_config(path), path, run.record)
        if digest is not None:
            check_vocab(checkpoint_state(path), digest, vocab, path)
    return _run_record(run_dir, run.record, chosen)


def _run_record(run_dir: Path, stored: RunRecord | None, chosen: list[Path]) -> dict[str, Any] | None:
    """The record of the one run the checkpoints ``chosen`` are of, as the average stores it.

    Each checkpoint that records a run must record that run: the fingerprint of ``stored`` (of the
    newest checkpoint recording one where the run has none). Their extension values may differ: a
    run extended between two checkpoints is still one run, and its record is its latest
    (``stored``); so may a section only one of them holds that a task declares a scoring section
    (:attr:`~posenc.runs.spec.RunSpec.scoring_sections`: an older posenc counted it in the
    fingerprint). A checkpoint that records no run (an older posenc's, which ``posenc train`` still
    resumes) is checked by its model sections only, as the run's own.

    Args:
        run_dir: the run directory, named when a checkpoint is another run's.
        stored: the run's record (its fingerprint.json); None where it has none.
        chosen: the checkpoints to average, oldest first.

    Returns:
        ``stored`` (else the newest recorded checkpoint's record) in its stored form; None when
        neither the run nor any checkpoint records one.

    Raises:
        CheckpointError: a checkpoint records another run than the others.
    """
    records = [(path, RunRecord.read(data, where=f"{path / 'state.json'}")) for path in chosen
               if (data := checkpoint_state(path).get("record")) is not None]
    reference = stored if stored is not None else (records[-1][1] if records else None)
    if reference is None:
        return None
    whose = f"the run {run_dir}" if stored is not None else records[-1][0].name
    scoring = {name for spec in declared() for name in spec.scoring_sections}
    for path, record in records:
        diffs = [(k, old, new) for k, old, new in config_differences(reference.fingerprint, record.fingerprint)
                 if not held_by_one(k, old, new, scoring)]
        if diffs:
            raise CheckpointError(f"{path}: records another run than {whose} ({describe_differences(diffs)}); "
                                  "only checkpoints of one run are averaged")
    return reference.to_dict()
