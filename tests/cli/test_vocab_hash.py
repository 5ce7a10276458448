"""Every checkpoint of a translation run stores the sha256 of its vocabulary (spm.model) in
state.json; translate, average and resume refuse another run's spm.model of the same size in one
line (a same-size vocabulary used to decode garbage silently), and checkpoints written before the
hash was stored still load."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from posenc.data.spm import Tokenizer
from posenc.errors import CheckpointError
from posenc.tasks.translation.spec import VOCAB_KEY
from posenc.training import RunContents
from posenc.training.checkpoint import list_checkpoints, load_checkpoint
from tests.helpers.files import snapshot
from tests.helpers.tiny import TINY, TOY, assert_one_line_error, cli, read
from tests.helpers.training import batches_fn, random_pairs, tiny_model, train, train_config

TRAIN_BATCHES = batches_fn(random_pairs(40, seed=2), max_tokens=48)


@pytest.fixture
def run_copy(tmp_path: Path, trained: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    shutil.rmtree(run / "translations", ignore_errors=True)
    return run


@pytest.fixture(scope="module")
def same_size_vocab(tmp_path_factory: pytest.TempPathFactory, prepared: Path) -> Path:
    """The spm.model of toy data drawn with another seed: another vocabulary of the same size."""
    root = tmp_path_factory.mktemp("other-vocab")
    assert cli_quiet("prepare", "--out", root / "data", f"out_dir={root}", *TOY, *TINY, "data.options.seed=1") == 0
    other = root / "data" / "spm.model"
    assert Tokenizer(other).vocab_size == Tokenizer(prepared / "spm.model").vocab_size
    assert other.read_bytes() != (prepared / "spm.model").read_bytes()
    return other


def cli_quiet(*argv: object) -> int:
    from posenc.cli.main import main

    return main([str(a) for a in argv])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _forget_hashes(run: Path) -> None:
    """Make the run's checkpoints look like ones written before the hash was stored."""
    for ckpt in list_checkpoints(run / "checkpoints"):
        state = json.loads((ckpt / "state.json").read_text())
        del state[VOCAB_KEY]
        (ckpt / "state.json").write_text(json.dumps(state))


def test_every_checkpoint_stores_the_vocabulary_hash(capsys: pytest.CaptureFixture[str], run_copy: Path) -> None:
    digest = _sha(run_copy / "spm.model")
    for ckpt in list_checkpoints(run_copy / "checkpoints"):
        assert load_checkpoint(ckpt, with_optimizer=False).state[VOCAB_KEY] == digest
    assert cli(capsys, "average", "--run", run_copy, "--last", "2")[0] == 0
    assert load_checkpoint(run_copy / "checkpoints" / "average", with_optimizer=False).state[VOCAB_KEY] == digest


def test_translate_refuses_another_vocabulary_of_the_same_size(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               run_copy: Path, prepared: Path,
                                                               same_size_vocab: Path) -> None:
    shutil.copyfile(same_size_vocab, run_copy / "spm.model")
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--input", prepared / "test.src", "--output", out)
    latest = list_checkpoints(run_copy / "checkpoints")[-1].name
    assert_one_line_error(code, err, str(run_copy / "spm.model"), f"not the vocabulary {latest} was trained with")
    assert not out.exists()
    code, _, err = cli(capsys, "translate", "--run", run_copy, "--split", "test", "--data", prepared)
    assert_one_line_error(code, err, "spm.model belongs to another run")
    assert not (run_copy / "translations").exists()


def test_average_refuses_another_vocabulary_of_the_same_size(capsys: pytest.CaptureFixture[str], run_copy: Path,
                                                             same_size_vocab: Path) -> None:
    shutil.copyfile(same_size_vocab, run_copy / "spm.model")
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "average", "--run", run_copy, "--last", "2")
    assert_one_line_error(code, err, "spm.model", "was trained with")
    assert snapshot(run_copy) == before


def test_checkpoints_without_the_hash_still_load(capsys: pytest.CaptureFixture[str], tmp_path: Path, run_copy: Path,
                                                 trained: Path, prepared: Path) -> None:
    _forget_hashes(run_copy)
    out, ref = tmp_path / "out.txt", tmp_path / "ref.txt"
    assert cli(capsys, "translate", "--run", run_copy, "--input", prepared / "test.src", "--output", out)[0] == 0
    assert cli(capsys, "translate", "--run", trained, "--input", prepared / "test.src", "--output", ref)[0] == 0
    assert read(out) == read(ref)
    assert cli(capsys, "average", "--run", run_copy, "--last", "2")[0] == 0
    assert VOCAB_KEY not in load_checkpoint(run_copy / "checkpoints" / "average", with_optimizer=False).state


def test_resume_refuses_a_checkpoint_of_another_vocabulary(tmp_path: Path) -> None:
    cfg = train_config(max_steps=2, save_every=1)
    train(tiny_model(), TRAIN_BATCHES, cfg, tmp_path, contents=RunContents(checked={VOCAB_KEY: "a" * 64}))
    more = train_config(max_steps=3, save_every=1)
    with pytest.raises(CheckpointError, match=f"ckpt_00000002: saved with another {VOCAB_KEY}") as err:
        train(tiny_model(), TRAIN_BATCHES, more, tmp_path, contents=RunContents(checked={VOCAB_KEY: "b" * 64}))
    assert "\n" not in str(err.value)
    resumed = train(tiny_model(), TRAIN_BATCHES, more, tmp_path, contents=RunContents(checked={VOCAB_KEY: "a" * 64}))
    assert resumed.state.step == 3
    (tmp_path / "checkpoints" / "ckpt_00000003" / "state.json").write_text(json.dumps(
        {k: v for k, v in load_checkpoint(tmp_path / "checkpoints" / "ckpt_00000003").state.items() if k != VOCAB_KEY}))
    assert train(tiny_model(), TRAIN_BATCHES, train_config(max_steps=4, save_every=1), tmp_path,
                 contents=RunContents(checked={VOCAB_KEY: "b" * 64})).state.step == 4  # no hash stored: no check
