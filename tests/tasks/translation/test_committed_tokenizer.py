"""A grid's tokenizer is part of its committed results (issue 56): the content identity of a
SentencePiece model, the ``tokenizers/`` directory prepare uses and pins, the same-run rule and
the report, which never mix runs of two tokenizers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from posenc.config import load_config
from posenc.data import spm as spm_module
from posenc.data.spm import Tokenizer, tokenizer_identity, train_spm
from posenc.errors import ConfigError, DataError
from posenc.experiments.experiment import Experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.freshness import committed_tokenizer
from posenc.tasks.translation.prepare import TOKENIZERS_DIR, load_meta, prepare, tokenizer_name
from posenc.tasks.translation.report import check_one_tokenizer
from posenc.tasks.translation.task import TASK
from tests.experiments.tiny_grid import write_experiment
from tests.tasks.translation.conftest import toy_data

TEXTS = ["a man is riding a horse .", "ein Mann reitet ein Pferd .", "two dogs play in the snow .",
         "zwei Hunde spielen im Schnee .", "a woman reads a book .", "eine Frau liest ein Buch ."] * 20


def _edited(model: Path, edit) -> bytes:
    proto = model_pb2.ModelProto()
    proto.ParseFromString(model.read_bytes())
    edit(proto)
    return proto.SerializeToString()


def test_identity_is_the_content_not_the_file(tmp_path: Path) -> None:
    """Two trainings of the same pieces in different directories embed different temporary
    ``model_prefix`` paths, so their files (and file hashes) differ; their identity does not."""
    a = train_spm(TEXTS, tmp_path / "a", vocab_size=50)
    b = train_spm(TEXTS, tmp_path / "elsewhere" / "b", vocab_size=50)
    ta, tb = Tokenizer(a), Tokenizer(b)
    assert ta.pieces == tb.pieces and a.read_bytes() != b.read_bytes() and ta.sha256 != tb.sha256
    assert ta.identity == tb.identity and len(ta.identity) == 64
    threads = _edited(a, lambda p: setattr(p.trainer_spec, "num_threads", 7))
    assert tokenizer_identity(threads) == ta.identity  # how it was trained is not what it tokenizes with


@pytest.mark.parametrize("edit", [
    lambda p: setattr(p.pieces[10], "score", p.pieces[10].score + 0.5),
    lambda p: setattr(p.pieces[11], "piece", p.pieces[11].piece + "x"),
    lambda p: setattr(p.normalizer_spec, "add_dummy_prefix", not p.normalizer_spec.add_dummy_prefix),
    lambda p: setattr(p.trainer_spec, "byte_fallback", True),
    lambda p: setattr(p.trainer_spec, "model_type", model_pb2.TrainerSpec.BPE),
], ids=["score", "piece", "normalisation", "byte_fallback", "model_type"])
def test_identity_changes_with_what_it_tokenizes_with(tmp_path: Path, edit) -> None:
    model = train_spm(TEXTS, tmp_path, vocab_size=50)
    assert tokenizer_identity(_edited(model, edit)) != Tokenizer(model).identity


def test_identity_of_garbage_is_one_line() -> None:
    with pytest.raises(DataError, match="not a SentencePiece model"):
        tokenizer_identity(b"\xff\xff\xff not a model")


def test_prepare_pins_then_uses_the_committed_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first prepare of a grid pins its model in ``tokenizers/``; a later prepare (another
    setting, another machine's checkout) tokenizes with that file and trains nothing."""
    tokenizers = tmp_path / TOKENIZERS_DIR
    first = prepare(toy_data(), tmp_path / "data" / "vanilla", tokenizers=tokenizers)
    pinned = tokenizers / tokenizer_name(toy_data())
    assert sorted(p.name for p in tokenizers.iterdir()) == [pinned.name]
    assert Tokenizer(pinned).identity == Tokenizer(first / "spm.model").identity == load_meta(first)["tokenizer"]

    def no_training(*args, **kwargs):
        raise AssertionError("trained a tokenizer although the grid has a committed one")

    monkeypatch.setattr(spm_module.spm.SentencePieceTrainer, "train", no_training)
    other = prepare(toy_data(setting="extrapolate", max_len=12), tmp_path / "fresh-cache" / "x", tokenizers=tokenizers)
    assert (other / "spm.model").read_bytes() == pinned.read_bytes()
    assert tokenizer_name(toy_data(setting="extrapolate", max_len=12)) == pinned.name  # one model per corpus+vocabulary
    assert tokenizer_name(toy_data(vocab_size=41)) != pinned.name


def test_data_prepared_with_another_tokenizer_is_not_reused(tmp_path: Path) -> None:
    """A prepared directory whose model is not the committed one is rebuilt with the committed one."""
    out = prepare(toy_data(), tmp_path / "data" / "vanilla")  # trained here, no committed model
    foreign = _edited(out / "spm.model", lambda p: setattr(p.pieces[12], "score", p.pieces[12].score - 1.0))
    tokenizers = tmp_path / TOKENIZERS_DIR
    tokenizers.mkdir()
    (tokenizers / tokenizer_name(toy_data())).write_bytes(foreign)
    prepare(toy_data(), out, tokenizers=tokenizers)
    assert (out / "spm.model").read_bytes() == foreign
    assert load_meta(out)["tokenizer"] == tokenizer_identity(foreign)
    assert (tokenizers / tokenizer_name(toy_data())).read_bytes() == foreign  # the pinned model is never replaced


def test_a_broken_committed_model_is_one_line(tmp_path: Path) -> None:
    tokenizers = tmp_path / TOKENIZERS_DIR
    tokenizers.mkdir()
    (tokenizers / tokenizer_name(toy_data())).write_bytes(b"junk")
    with pytest.raises(DataError, match="not a SentencePiece model"):
        prepare(toy_data(), tmp_path / "data" / "vanilla", tokenizers=tokenizers)
    assert not (tmp_path / "data" / "vanilla").exists()


def _tiny_grid(tmp_path: Path) -> tuple[Experiment, Path]:
    exp = TASK.experiment(load_config(ExperimentConfig, write_experiment(tmp_path)))
    cells = exp.cells()
    TASK.prepare_data(exp, cells)
    return exp, exp.root / TOKENIZERS_DIR / tokenizer_name(exp.run_config(cells[0]).data)


def test_a_run_of_another_tokenizer_is_stale(tmp_path: Path) -> None:
    """The same-run rule asks the tokenizer: a cell that recorded another model is stale (named in
    one line); one that recorded none (trained before the record) is not judged on it."""
    exp, pinned = _tiny_grid(tmp_path)
    cell = exp.cells()[0]
    cfg = exp.run_config(cell)
    assert committed_tokenizer(exp, cfg) == Tokenizer(pinned).identity
    from posenc.runs.same_run import RunRecord
    from posenc.tasks.translation.freshness import evaluation_record

    record = RunRecord.of(cfg, evaluation_record(cfg, exp.options.splits)).to_dict()
    results = {"summary": {"steps": 3, "tokenizer": Tokenizer(pinned).identity}, "record": record}
    assert TASK.verdict(exp, cell, results).kind == "fresh"
    assert TASK.verdict(exp, cell, dict(results, summary={"steps": 3})).kind == "fresh"
    other = dict(results, summary={"steps": 3, "tokenizer": "f" * 64})
    verdict = TASK.verdict(exp, cell, other)
    assert verdict.kind == "stale" and verdict.keys == ("tokenizer",)
    assert verdict.detail == f"tokenizer: trained with ffffffffffff, the grid's committed tokenizer is " \
                             f"{Tokenizer(pinned).identity[:12]}"


def test_the_report_never_mixes_tokenizers(tmp_path: Path) -> None:
    exp = load_config(ExperimentConfig, write_experiment(tmp_path, methods=("ape", "shape")))
    a, b = "a" * 64, "b" * 64
    same = [{"setting": "vanilla", "method": "ape", "seed": 1, "summary": {"tokenizer": a}},
            {"setting": "vanilla", "method": "shape", "seed": 1, "summary": {}}]
    check_one_tokenizer(exp, same)
    mixed = same + [{"setting": "vanilla", "method": "shape", "seed": 2, "summary": {"tokenizer": b}}]
    with pytest.raises(ConfigError) as err:
        check_one_tokenizer(exp, mixed)
    message = str(err.value)
    assert "\n" not in message and "aaaaaaaaaaaa by ape/seed1" in message and "bbbbbbbbbbbb by shape/seed2" in message


def test_a_trained_grid_records_and_pins_its_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A grid trained from scratch commits its model beside its results, and every run's summary
    records that model's identity."""
    from tests.helpers.tiny import cli

    path = write_experiment(tmp_path, methods=("ape", "shape"))
    assert cli(capsys, "experiment", str(path))[0] == 0
    exp = load_config(ExperimentConfig, path)
    pinned = sorted((exp.root / TOKENIZERS_DIR).iterdir())
    assert len(pinned) == 1
    identity = Tokenizer(pinned[0]).identity
    for cell in TASK.experiment(exp).cells():
        summary = json.loads((Path(TASK.experiment(exp).run_config(cell).out_dir) / "summary.json")
                             .read_text(encoding="utf-8"))
        assert summary["tokenizer"] == identity
    shutil.rmtree(exp.root / "data")  # another machine's checkout: the data are prepared again, with the pinned model
    assert cli(capsys, "experiment", str(path), "--report-only")[0] == 0
    assert sorted((exp.root / TOKENIZERS_DIR).iterdir()) == pinned
