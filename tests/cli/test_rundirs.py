"""One CLI-level test per finding on tiny toy runs.

Finding → tests: 1 stale data/config → ``test_resume_with_another_config_*``,
``test_prepare_into_a_directory_of_another_data_config``; 2 failed train / translate from the
checkpoint's config → ``test_failing_train_leaves_the_run_dir_as_it_was``,
``test_translate_builds_the_model_from_the_checkpoint_config``; 3 lock →
``test_second_train_into_a_locked_out_dir_fails``, ``test_stale_lock_and_temporaries_of_dead_writers``;
4 huge line → ``test_overlong_training_pair_is_dropped``; 5 overrides →
``test_corpus_option_stays_a_string``, ``test_alias_override_order_does_not_matter``;
7 paths → ``test_moved_run_dir_works_and_writes_inside_itself``,
``test_untrusted_run_dir_cannot_reach_outside``; 8 rough edges → the tests at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml

from tests.cli.test_files_corpus import files_overrides, write_corpus
from tests.helpers.tiny import NEAR_INIT, TINY, TOY, assert_one_line_error, cli, read, run_overrides


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``directory``."""
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


@pytest.fixture(scope="module")
def own_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A toy run with its own prepared data (OUT_DIR/data), one checkpoint per step."""
    run = tmp_path_factory.mktemp("own") / "run"
    from posenc.cli.main import main

    assert main(["train", *run_overrides(run, None, *NEAR_INIT, "train.save_every=1", "train.keep_last=0")]) == 0
    return run


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


# ------------------------------------------------------------------------------ finding 1

def test_run_dir_stores_config_and_fingerprint(own_run: Path) -> None:
    from posenc.config import from_dict
    from posenc.runs.fingerprint import fingerprint
    from posenc.tasks.translation.config import RunConfig

    saved = yaml.safe_load((own_run / "config.yaml").read_text())
    assert saved["out_dir"] == "." and saved["data_dir"] == ""  # relative to the run directory
    record = json.loads((own_run / "fingerprint.json").read_text())  # the run's record, in its one stored form
    assert record["fingerprint"] == fingerprint(from_dict(RunConfig, saved)) and record["extension"]["max_steps"] > 0
    assert (own_run / "data" / "fingerprint.json").is_file()


@pytest.mark.parametrize("change, needle", [
    (["data.vocab_size=48"], "data.vocab_size (40 -> 48)"),
    ([f"data.options.n_train={7}"], "data.options.n_train (60 -> 7)"),
    (["model.d_ff=48"], "model.d_ff (64 -> 48)"),
    (["model.position.name=shape"], "model.position.name ('ape' -> 'shape')"),
])
def test_resume_with_another_config_stops_before_writing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         own_run: Path, change: list[str], needle: str) -> None:
    run = _copy(own_run, tmp_path / "run")
    before = snapshot(run)
    code, out, err = cli(capsys, "train", *run_overrides(run, None, *NEAR_INIT, *change))
    assert_one_line_error(code, err, str(run), needle, "--no-resume")
    assert out == "" and snapshot(run) == before


def test_resume_with_an_extension_and_no_resume_afresh(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    # changes that only extend training resume from step 3
    code, out, err = cli(capsys, "train", *run_overrides(run, None, *NEAR_INIT, "train.max_steps=4", "train.patience=9",
                                                          "train.log_every=2", "train.save_every=1", "train.keep_last=0"))
    assert code == 0, err
    assert json.loads(out)["steps"] == 4
    assert [int(r.split(",")[0]) for r in read(run / "train.csv")[1:]] == [1, 2, 3, 4]
    # --no-resume with another data config starts afresh: new data, new checkpoints, new logs
    code, out, err = cli(capsys, "train", "--no-resume", *run_overrides(run, None, "data.vocab_size=48"))
    assert code == 0, err
    assert json.loads((run / "data" / "meta.json").read_text())["data"]["vocab_size"] == 48
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["ckpt_00000003"]
    assert [int(r.split(",")[0]) for r in read(run / "train.csv")[1:]] == [1, 2, 3]
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["vocab_size"] == 48


def test_prepare_into_a_directory_of_another_data_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The README's prepare → train with a different corpus option: an error, not a silent reuse."""
    run = tmp_path / "run"
    assert cli(capsys, "prepare", *run_overrides(run))[0] == 0
    before = snapshot(run)
    code, _, err = cli(capsys, "prepare", *run_overrides(run, None, "data.options.n_train=30"))
    assert_one_line_error(code, err, "data.options.n_train", "another data config")
    code, _, err = cli(capsys, "train", *run_overrides(run, None, "data.options.n_train=30"))
    assert_one_line_error(code, err, "options.n_train (60 -> 30)")
    assert snapshot(run) == before
    code, _, err = cli(capsys, "prepare", "--no-resume", *run_overrides(run, None, "data.options.n_train=30"))
    assert code == 0 and len(read(run / "data" / "train.src")) == 30


# ------------------------------------------------------------------------------ finding 2

def test_failing_train_leaves_the_run_dir_as_it_was(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    latest = sorted((run / "checkpoints").glob("ckpt_*"))[-1] / "model.safetensors"
    latest.write_bytes(latest.read_bytes()[:100])  # a corrupt latest checkpoint: resuming fails
    before = snapshot(run)
    for extra in (["model.d_model=64"], ["train.max_steps=5"], ["train.metric_every=1", "data.options.n_valid=0"]):
        code, _, err = cli(capsys, "train", *run_overrides(run, None, *NEAR_INIT, *extra))
        assert code == 2 and err.count("\n") == 1, err
        assert snapshot(run) == before, extra


def test_translate_builds_the_model_from_the_checkpoint_config(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    code, out, _ = cli(capsys, "translate", "--run", run, "--split", "test")
    assert code == 0
    expected = read(run / "translations" / "test.beam2.lp0.6.hyp")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["d_ff"] = 48  # a later command overwrote config.yaml: the checkpoint still decides
    cfg["model"]["position"]["name"] = "rpe"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, out, err = cli(capsys, "translate", "--run", run, "--split", "test")
    assert code == 0, err
    assert read(run / "translations" / "test.beam2.lp0.6.hyp") == expected and any(expected)


# ------------------------------------------------------------------------------ finding 3

HOLD = "import sys, time; from posenc.runs.lock import exclusive\nwith exclusive(sys.argv[1]):\n print('held', flush=True); time.sleep(60)"


def _holder(directory: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_train_into_a_locked_out_dir_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    proc = _holder(run)
    try:
        before = snapshot(run)
        code, out, err = cli(capsys, "train", *run_overrides(run, None, *NEAR_INIT, "train.max_steps=4"))
        assert_one_line_error(code, err, str(run), "in use by another posenc process", f"pid {proc.pid}")
        code, _, err = cli(capsys, "prepare", *run_overrides(run))
        assert_one_line_error(code, err, "in use")
        assert out == "" and snapshot(run) == before
    finally:
        proc.kill()
        proc.wait()


def test_stale_lock_and_temporaries_of_dead_writers(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run / ".posenc.lock").write_text(f"{dead.pid}\n")  # left by a killed training
        ckpts = run / "checkpoints"
        (ckpts / f".tmp-ckpt_00000009-{dead.pid}-0123abcd").mkdir()
        (ckpts / f".tmp-ckpt_00000009-{live.pid}-4567abcd").mkdir()  # another process's save in progress
        code, out, err = cli(capsys, "train", *run_overrides(run, None, *NEAR_INIT, "train.max_steps=4"))
        assert code == 0 and json.loads(out)["steps"] == 4, err
        assert not (run / ".posenc.lock").exists()
        assert sorted(p.name for p in ckpts.glob(".tmp-*")) == [f".tmp-ckpt_00000009-{live.pid}-4567abcd"]
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------------------ finding 4

def test_overlong_training_pair_is_dropped(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                                           tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    huge = " ".join(["alpha beta gamma"] * 60000)  # 1.02 MB (under the 1 MiB line bound), 180k words
    with open(files["train_src"], "a", encoding="utf-8") as fh:
        fh.write(huge + "\n")
    with open(files["train_tgt"], "a", encoding="utf-8") as fh:
        fh.write("ALPHA\n")
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="posenc"):
        code, out, err = cli(capsys, "train", f"out_dir={run}", *files_overrides(files), *TINY)
    assert code == 0, err
    assert json.loads(out)["dropped_train_pairs"] == 1
    # the tokenizer the run kept beside its checkpoints, named in its summary
    assert json.loads(out)["vocab_sha256"] == hashlib.sha256((run / "spm.model").read_bytes()).hexdigest()
    assert any("dropped 1 training pairs longer than 400 subwords" in r.getMessage() for r in caplog.records)


def test_batches_never_exceed_the_token_budget(tmp_path: Path) -> None:
    from posenc.config import load_config
    from posenc.data.spm import Tokenizer
    from posenc.tasks.translation.config import RunConfig
    from posenc.tasks.translation.prepare import prepare
    from posenc.tasks.translation.train import train_split

    cfg = load_config(RunConfig, None, [f"out_dir={tmp_path}", *TOY, *TINY, "train.max_tokens=40", "data.max_train_len=30"])
    data = prepare(cfg.data, tmp_path / "data")
    tok = Tokenizer.from_file(data / "spm.model")
    split = train_split(cfg, tok, data, bos=False)
    assert split.dropped > 0 and len(split.src) + split.dropped == 60
    batches = split.batches(40, True, 0, 0)
    assert sum(len(b.indices) for b in batches) == len(split.src)
    for batch in batches:  # the padded size of both sides stays within the budget
        assert batch.src.numel() <= 40 and batch.tgt_in.numel() <= 40
        assert batch.src.shape[1] <= 30 and batch.tgt_in.shape[1] <= 30


# ------------------------------------------------------------------------------ finding 5

def test_corpus_option_stays_a_string(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "prepare", *run_overrides(tmp_path / "run"), "data.options.task=5")
    assert_one_line_error(code, err, "unknown toy task '5'")  # the text the user typed, not the number 5
    from posenc.tasks.translation.config import DataConfig

    assert DataConfig._option_types("options", {"corpus": "bible"})["src"] is str


def test_alias_override_order_does_not_matter(capsys: pytest.CaptureFixture[str], tmp_path: Path, prepared: Path) -> None:
    run = tmp_path / "run"
    code, _, err = cli(capsys, "train", *run_overrides(run, prepared, "model.position.max_shift=5",
                                                       "model.position.name=shape", "train.max_steps=1"))
    assert code == 0, err
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["position"]["shape"]["max_shift"] == 5


# ------------------------------------------------------------------------------ finding 7

def test_moved_run_dir_works_and_writes_inside_itself(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      own_run: Path) -> None:
    original = _copy(own_run, tmp_path / "a" / "run")
    moved = tmp_path / "b" / "run"
    moved.parent.mkdir()
    shutil.move(original, moved)
    code, out, err = cli(capsys, "translate", "--run", moved, "--split", "test")
    assert code == 0, err
    assert (moved / "translations" / "test.beam2.lp0.6.hyp").is_file() and not original.exists()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == []
    code, out, err = cli(capsys, "train", *run_overrides(moved, None, *NEAR_INIT, "train.max_steps=4"))
    assert code == 0 and json.loads(out)["steps"] == 4, err  # resumes in its new place
    assert not original.exists()


def test_untrusted_run_dir_cannot_reach_outside(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                own_run: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "test.src").write_text("ka lo\n")
    (secret / "test.tgt").write_text("LO KA\n")
    before = snapshot(secret)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["data_dir"], cfg["out_dir"] = str(secret), str(secret)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "test")
    assert_one_line_error(code, err, "outside the run directory")
    cfg["data_dir"] = "../secret"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert_one_line_error(*cli(capsys, "translate", "--run", run, "--split", "test")[::2], "outside the run directory")
    cfg["data_dir"] = ""
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    shutil.rmtree(run / "translations", ignore_errors=True)
    (run / "translations").symlink_to(secret)  # writing through a link is refused too
    assert_one_line_error(*cli(capsys, "translate", "--run", run, "--split", "test")[::2], "outside the run directory")
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "../secret/test")
    assert_one_line_error(code, err, "--split must be one of")
    assert snapshot(secret) == before


def test_experiment_run_translates_its_split_from_the_shared_prepared_data(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path, prepared: Path) -> None:
    """A run whose data lie outside it in a posenc-prepared directory (an experiment's shared data,
    as the quickstart's runs) translates ``--split test`` without ``--data``; the data are read,
    never written."""
    run = _copy(trained, tmp_path / "run")
    before = snapshot(prepared)
    code, out, err = cli(capsys, "translate", "--run", run, "--split", "test")
    assert code == 0, err
    scores = json.loads(out)
    assert scores["lines"] == len((prepared / "test.src").read_text().splitlines())
    assert (run / scores["hyp"]).is_file() and scores["hyp"].startswith("translations/")
    assert snapshot(prepared) == before


def test_prepared_data_named_by_a_run_cannot_link_outside(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          trained: Path, prepared: Path) -> None:
    """The prepared data a run's config names are read only inside that directory: a test.src
    that is a symlink to a file elsewhere is refused in one line (the run directory is untrusted)."""
    run, data = _copy(trained, tmp_path / "run"), Path(shutil.copytree(prepared, tmp_path / "data"))
    secret = tmp_path / "secret.txt"
    secret.write_text("ka lo\n")
    (data / "test.src").unlink()
    (data / "test.src").symlink_to(secret)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["data_dir"] = str(data)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    before = snapshot(run)
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "test")
    assert_one_line_error(code, err, "lies outside its prepared data")
    assert snapshot(run) == before  # nothing translated or written


# ------------------------------------------------------------------------------ finding 8

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_translate_on_cuda_without_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path, own_run: Path) -> None:
    code, _, err = cli(capsys, "translate", "--run", own_run, "--split", "test", "--device", "cuda")
    assert_one_line_error(code, err, "--device cuda", "no CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_train_on_cuda_without_cuda_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "train", *run_overrides(tmp_path / "run"), "train.device=cuda")
    assert_one_line_error(code, err, "train.device", "no CUDA device")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, needle", [
    (["--split", "test", "--device", "tpu9"], "--device"),
    (["--split", "test", "--input", "x"], "either --split"),
    (["--input", "x", "--data", "y"], "--data is only used with --split"),
    (["--split", "test", "--beam", "0"], "--beam"),
])
def test_translate_flags_are_validated(capsys: pytest.CaptureFixture[str], own_run: Path, argv: list[str], needle: str) -> None:
    before = snapshot(own_run)
    code, _, err = cli(capsys, "translate", "--run", own_run, *argv)
    assert_one_line_error(code, err, needle)
    assert snapshot(own_run) == before


def test_unknown_method_names_the_documented_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "train", *run_overrides(tmp_path / "run"), "model.position.name=foo")
    assert_one_line_error(code, err, "'foo'", "ape", "rpe", "rr", "rnn", "ape+shaw", "shape", "cape")
    assert not (tmp_path / "run").exists()


def test_metric_every_reports_validation_bleu(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                                              tmp_path: Path, prepared: Path) -> None:
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="posenc"):
        code, _, err = cli(capsys, "train", *run_overrides(run, prepared, *NEAR_INIT, "train.metric_every=3",
                                                           "train.validate_every=3"))
    assert code == 0, err
    rows = [r.split(",") for r in read(run / "valid.csv")[1:]]
    assert [r[0] for r in rows] == ["3"]
    code, out, err = cli(capsys, "translate", "--run", run, "--split", "valid", "--beam", "1", "--data", prepared,
                         "--checkpoint", "latest")
    assert code == 0
    # the BLEU logged during training is greedy sacreBLEU of the step-3 model on the valid split
    assert float(rows[0][3]) == pytest.approx(json.loads(out)["bleu"], abs=1e-6)
    assert any(f"metric={rows[0][3]}" in r.getMessage() for r in caplog.records)


def test_progress_line_without_a_terminal(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
                                          tmp_path: Path, prepared: Path) -> None:
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="posenc"):
        code, _, err = cli(capsys, "train", *run_overrides(run, prepared, "train.log_every=100", "train.validate_every=1000"))
    assert code == 0, err
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("step 1/3") for m in messages), messages
    assert not any("bleu=" in m for m in messages)  # no empty bleu= field without BLEU


def test_translate_split_prints_the_final_bleu(capsys: pytest.CaptureFixture[str], own_run: Path, tmp_path: Path) -> None:
    run = _copy(own_run, tmp_path / "run")
    code, out, err = cli(capsys, "translate", "--run", run, "--split", "test")
    scores = json.loads(out)
    hyps, refs = read(run / "translations" / "test.beam2.lp0.6.hyp"), read(run / "data" / "test.tgt")
    expected = sacrebleu.corpus_bleu(hyps, [refs])
    assert code == 0 and f"test: {expected} (signature {scores['bleu_signature']})\n" in err
