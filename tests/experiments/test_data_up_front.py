"""``posenc experiment`` checks each setting's data once, before any run or worker starts: a missing
data set (FSDD, Fashion-MNIST, Multi30k, the Bible database, a user's files) stops it in one line
naming what is missing and how to get it, with nothing written; a worker's user error is one line
in its log, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posenc.cli.main import main
from posenc.data.corpora import check_corpus
from posenc.errors import DataError
from tests.experiments.tiny_grid import write_experiment


@pytest.fixture
def no_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the grid starts a worker or trains a cell."""
    from posenc.experiments import judgements, scheduler

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker or a run started")

    monkeypatch.setattr(scheduler, "run_local", started)
    monkeypatch.setattr(judgements.Judgements, "execute", started)


def methods_grid(tmp_path: Path, task: str, data: dict[str, object]) -> Path:
    """A two-method, two-seed experiment YAML of ``task`` whose data are ``data``."""
    spec = {"task": task, "name": f"tiny_{task}", "out_dir": str(tmp_path / "exp"), "base": {"data": data},
            "methods": {"a": {}, "b": {}}, "seeds": [0, 1]}
    path = tmp_path / f"{task}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def one_line_refusal(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run ``posenc experiment``; assert exit 2 and one ``error:`` line holding every needle."""
    assert main(["experiment", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert all(n in lines[0] for n in needles), lines[0]
    assert "Traceback" not in captured.out + captured.err and "FAILED" not in captured.out
    return lines[0]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_missing_fsdd_stops_the_grid_before_any_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, no_workers: None,
                                                       jobs: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("POSENC_FSDD", str(empty))
    path = methods_grid(tmp_path, "speech", {})
    one_line_refusal(capsys, [str(path), "--jobs", jobs], f"FSDD recordings not found at {empty / 'recordings'}",
                     "free-spoken-digit-dataset", "POSENC_FSDD")
    assert not (tmp_path / "exp").exists()  # no report, logs or run directory


def test_missing_fashion_mnist_stops_the_grid_before_any_worker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                no_workers: None) -> None:
    monkeypatch.setenv("POSENC_FASHION_MNIST", str(tmp_path))
    path = methods_grid(tmp_path, "vision", {})
    one_line_refusal(capsys, [str(path), "--jobs", "2"], f"Fashion-MNIST not found at {tmp_path}",
                     "apt-get install -y dataset-fashion-mnist")
    assert not (tmp_path / "exp").exists()


def test_missing_multi30k_stops_a_translation_grid_before_any_worker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_workers: None) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("POSENC_MULTI30K", str(empty))
    path = write_experiment(tmp_path, methods=("ape", "shape"))
    spec = yaml.safe_load(path.read_text())
    spec["base"]["data"] = {"corpus": "multi30k", "vocab_size": 40}
    path.write_text(yaml.safe_dump(spec))
    one_line_refusal(capsys, [str(path), "--jobs", "2"], f"{empty}: Multi30k files missing: train.en.gz",
                     "github.com/multi30k/dataset", "POSENC_MULTI30K")
    assert not (tmp_path / "exp").exists()  # not even the experiment's data/


def test_a_subset_of_cells_is_checked_too(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch, no_workers: None) -> None:
    monkeypatch.setenv("POSENC_FSDD", str(tmp_path / "nowhere"))
    path = methods_grid(tmp_path, "speech", {})
    one_line_refusal(capsys, [str(path), "--jobs", "2", "--methods", "b", "--seeds", "1"], "FSDD recordings not found")


def test_check_corpus_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"bible\.db: bible database not found \(data\.options\.db_path\)"):
        check_corpus("bible", {"db_path": str(tmp_path / "bible.db")})
    present = tmp_path / "train.src"
    present.write_text("a\n")
    files = {"train_src": str(present), "train_tgt": str(present), "valid_src": str(present),
             "valid_tgt": str(tmp_path / "valid.tgt")}
    with pytest.raises(DataError, match=r"^data\.options\.valid_tgt: .*valid\.tgt: no such file$"):
        check_corpus("files", files)
    check_corpus("files", {**files, "valid_tgt": str(present)})
    check_corpus("toy", {})  # generated: nothing to check
    (tmp_path / "m30k").mkdir()
    for name in ("train.en.gz", "train.fr.gz", "test_2016_flickr.en.gz"):
        (tmp_path / "m30k" / name).write_bytes(b"")
    with pytest.raises(DataError, match=r"Multi30k files missing: test_2016_flickr\.fr\.gz;"):
        check_corpus("multi30k", {"path": str(tmp_path / "m30k"), "tgt": "fr"})


def test_a_workers_user_error_is_one_line_in_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Data that vanish after the up-front check: the worker writes one ``error:`` line, exit 2."""
    from posenc.experiments import worker

    monkeypatch.setenv("POSENC_FSDD", str(tmp_path / "gone"))
    spec = tmp_path / "experiment.json"
    spec.write_text(json.dumps({"task": "speech", "name": "w", "out_dir": str(tmp_path / "exp"),
                                "base": {}, "methods": {"a": {}}, "seeds": [0]}))
    assert worker.main([str(spec), "", "a", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: FSDD recordings not found")
