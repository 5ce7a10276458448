"""``posenc upgrade``: committed runs and reports of every kind, rewritten here into what an older
posenc wrote (no markers, a bare fingerprint, a whole config in results.json, the Trainer's
train_summary.json, ``bleu_every``/``bleu``), come back byte for byte as committed; a second upgrade
changes nothing; a directory posenc did not write is refused in one line, nothing changed; and
before the upgrade every reader refuses the older files in one line naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from posenc.config import to_dict
from posenc.errors import RunDirError
from posenc.experiments.cell import recorded_verdict
from posenc.runs.lock import exclusive
from posenc.runs.ownership import check_target, dir_kind
from posenc.runs.run import stored_run
from posenc.runs.same_run import RunRecord, read_stored
from posenc.runs.upgrade import plan, run_config_classes
from posenc.tasks.lengthgen.config import LengthgenConfig
from posenc.tasks.translation.convergence import read_summary
from tests.helpers.files import snapshot
from tests.helpers.tiny import assert_one_line_error, cli

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "results"
#: Committed runs of every task and layout (lengthgen with and without its run's files, translation,
#: vision), a report and a log directory.
RUNS = ("lengthgen_frontier/decimal_addition/xpos/seed1", "lengthgen_cpu/copy/alibi/seed1",
        "multi30k_cpu/vanilla/ape/seed1", "fashion_mnist_small/none/seed0")
OTHERS = {"fashion_mnist_small/report": "report", "multi30k_cpu/logs": "logs"}
#: What the Trainer's own train_summary.json held (summary.json holds it too).
TRAINER_KEYS = ("stopped", "warmup", "best_step", "best_valid", "last_valid", "status", "converged", "step",
                "averaged_from")


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    for part in (*RUNS, *OTHERS):
        shutil.copytree(COMMITTED / part, root / part)
    return root


def _downgrade(run: Path) -> None:
    """Rewrite the run directory ``run`` (today's format) as an older posenc wrote it (unmarked
    where its files say what it is)."""
    if (run / "config.yaml").is_file():
        (run / ".posenc-run").unlink()
    fingerprint = run / "fingerprint.json"
    if fingerprint.is_file():
        fingerprint.write_text(json.dumps(json.loads(fingerprint.read_text())["fingerprint"], indent=1, sort_keys=True))
    results = json.loads((run / "results.json").read_text())
    if run.relative_to(run.parents[3]).parts[0].startswith("lengthgen"):  # methods grids stored the whole config
        whole = to_dict(read_stored(LengthgenConfig, RunRecord.read(results["record"]).config))
        whole["train"]["bleu_every"] = whole["train"].pop("metric_every")
        results = {("config" if k == "record" else k): ({k: v for k, v in whole.items() if k != "out_dir"}
                                                        if k == "record" else v) for k, v in results.items()}
        (run / "results.json").write_text(json.dumps(results, indent=2))
    if (run / "summary.json").is_file():
        summary = json.loads((run / "summary.json").read_text())
        trainer = {k: summary[k] for k in TRAINER_KEYS if k in summary}
        (run / "train_summary.json").write_text(json.dumps(trainer, indent=1))
    if (run / "valid.csv").is_file():
        head, rest = (run / "valid.csv").read_bytes().split(b"\n", 1)
        (run / "valid.csv").write_bytes(head.replace(b"metric", b"bleu") + b"\n" + rest)


def _older(tmp_path: Path) -> tuple[Path, dict[str, bytes | None]]:
    """A copy of the committed runs and reports as an older posenc wrote them, and the committed files."""
    root = _copy(tmp_path)
    committed = snapshot(root)
    for part in RUNS:
        _downgrade(root / part)
    for part in OTHERS:
        (root / part / ".posenc-run").unlink()
    assert snapshot(root) != committed
    return root, committed


def test_the_upgrade_gives_back_the_committed_files_byte_for_byte(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    root, committed = _older(tmp_path)
    assert {dir_kind(root / part) for part in (*RUNS, *OTHERS) if part != RUNS[1]} == {None}  # not posenc's for now
    code, out, err = cli(capsys, "upgrade", str(root))
    assert code == 0, err
    assert out.strip() == "upgraded 6 directories: 5 marked, 8 files rewritten, 3 removed"
    assert snapshot(root) == committed  # every number, and every record, as committed
    assert {part: dir_kind(root / part) for part in OTHERS} == OTHERS
    assert {dir_kind(root / part) for part in RUNS} == {"run"}
    code, out, _ = cli(capsys, "upgrade", str(root))  # once: a second upgrade finds nothing to do
    assert code == 0 and out.strip() == f"{root}: already in today's format"
    assert snapshot(root) == committed


def test_an_older_run_is_refused_until_upgraded(tmp_path: Path) -> None:
    """Before the upgrade no reader takes the older files: each refusal is one line naming it."""
    root, _ = _older(tmp_path)
    run = root / RUNS[0]
    for refused in (lambda: stored_run(run), lambda: check_target(run, "run"),
                    lambda: recorded_verdict(LengthgenConfig(out_dir=str(run)), json.loads((run / "results.json")
                                                                                           .read_text()))):
        with pytest.raises(RunDirError, match="posenc upgrade") as err:
            refused()
        assert "\n" not in str(err.value)
    (run / "summary.json").unlink()  # the Trainer's older summary alone is not read either
    assert read_summary(run) == {}
    (run / "fingerprint.json").unlink()  # a run with its config.yaml only
    with pytest.raises(RunDirError, match=r"holds a run without its fingerprint\.json .*`posenc upgrade DIR`"):
        stored_run(run)


def test_a_directory_posenc_did_not_write_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "report").mkdir(parents=True)
    (theirs / "report" / "README.md").write_text("# my notes\n")  # not headed with the grid's name
    (theirs / "config.yaml").write_text("train: {lr: 1}\n")  # a run config, but no record or checkpoint beside it
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, "upgrade", str(theirs))
    assert_one_line_error(code, err, str(theirs), "holds no directory posenc wrote")
    code, _, err = cli(capsys, "upgrade", str(theirs / "config.yaml"))
    assert_one_line_error(code, err, "is not a directory")
    assert snapshot(tmp_path) == before


def test_one_unreadable_run_leaves_everything_as_it_was(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every change is planned before any is made: a run posenc cannot read (here: results that
    record no config) refuses the whole upgrade, the other runs untouched; so does a run in use."""
    root, _ = _older(tmp_path)
    broken = root / RUNS[1] / "results.json"
    broken.write_text(json.dumps({k: v for k, v in json.loads(broken.read_text()).items() if k != "config"}))
    before = snapshot(tmp_path)
    code, _, err = cli(capsys, "upgrade", str(root))
    assert_one_line_error(code, err, str(broken), "records no run config", "nothing was changed")
    assert snapshot(tmp_path) == before
    shutil.rmtree(root / RUNS[1])
    with exclusive(root / RUNS[0]):
        before = snapshot(tmp_path)
        code, _, err = cli(capsys, "upgrade", str(root))
        assert_one_line_error(code, err, str(root / RUNS[0]), "in use by another posenc process", "nothing was changed")
        assert snapshot(tmp_path) == before


def test_a_records_old_option_name_is_renamed(tmp_path: Path) -> None:
    """A record that stores ``bleu_every`` (its extension) is rewritten with ``metric_every``."""
    run = _copy(tmp_path) / RUNS[2]
    record = json.loads((run / "fingerprint.json").read_text())
    record["extension"]["bleu_every"] = record["extension"].pop("metric_every")
    (run / "fingerprint.json").write_text(json.dumps(record))
    (change,) = plan(run)
    assert change.path == run / "fingerprint.json"
    assert json.loads(change.text) == json.loads((COMMITTED / RUNS[2] / "fingerprint.json").read_text())


def test_the_run_config_of_every_task_is_found() -> None:
    """The classes a stored config is read by: each task's run config, found by discovery."""
    assert sorted(c.run_spec.task for c in run_config_classes()) == ["lengthgen", "speech", "translation", "vision"]
