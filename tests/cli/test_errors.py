"""Every bad input: exit status 2, one line ``error: ...`` on stderr, nothing half written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.tiny import assert_one_line_error, cli, hidden_leftovers, run_overrides

# ------------------------------------------------------------------------------ configs

BAD_OVERRIDES = {
    "unknown key": (["model.bogus=1"], ["bogus", "ModelConfig"]),
    "unknown section key": (["train.bogus=1"], ["bogus", "TrainConfig"]),
    "wrong type": (["model.d_model=abc"], ["model.d_model", "expected an integer", "'abc'"]),
    "wrong type bool": (["train.lr=true"], ["train.lr", "expected a number"]),
    "section given a scalar": (["train=3"], ["train", "expected a mapping"]),
    "negative max_shift": (["model.position.name=shape", "model.position.max_shift=-1"], ["max_shift", "-1"]),
    "unknown method": (["model.position.name=foo"], ["unknown position method 'foo'"]),
    "gru+shape": (["model.position.name=gru+shape"], ["gru+shape", "shape", "gru"]),
    "two input methods": (["model.position.name=ape+rnn"], ["ape+rnn"]),
    "odd d_model": (["model.d_model=33"], ["model.d_model", "33"]),
    "bad setting": (["data.setting=sideways"], ["data.setting", "sideways"]),
    "unknown arch": (["arch=lstm"], ["arch", "lstm"]),
    "unknown preset": (["model.preset=huge"], ["model.preset", "huge"]),
    "unknown corpus": (["data.corpus=nope"], ["unknown corpus 'nope'"]),
    "bad corpus option": (["data.options.bogus=1"], ["corpus 'toy'", "bogus"]),
    "no step limit": (["train.max_steps=0"], ["max_steps"]),
    "no equals sign": (["model.d_model"], ["'model.d_model'", "KEY=VALUE"]),
    "empty key": (["=3"], ["'=3'", "empty key"]),
    "empty key part": (["model..d_model=3"], ["'model..d_model=3'", "empty key"]),
}


@pytest.mark.parametrize("command", ["prepare", "train"])
@pytest.mark.parametrize("case", list(BAD_OVERRIDES))
def test_bad_override(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, case: str) -> None:
    overrides, needles = BAD_OVERRIDES[case]
    run = tmp_path / "run"
    code, out, err = cli(capsys, command, *run_overrides(run), *overrides)
    assert_one_line_error(code, err, *needles)
    assert out == "" and list(tmp_path.iterdir()) == []  # not even the run directory


BAD_YAML = {
    "unknown key": ("model: {d_modle: 32}\n", ["model.d_modle", "unknown option"]),
    "wrong type": ("train: {max_steps: three}\n", ["train.max_steps", "expected an integer"]),
    "bad value": ("model: {position: {name: shape, shape: {max_shift: -1}}}\n", ["max_shift", "-1"]),
    "not a mapping": ("- a\n- b\n", ["top level must be a mapping"]),
    "malformed": ("model: {d_model: 32\ntrain: [\n", ["not valid YAML"]),
}


@pytest.mark.parametrize("case", list(BAD_YAML))
def test_bad_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    text, needles = BAD_YAML[case]
    config = tmp_path / "bad.yaml"
    config.write_text(text, encoding="utf-8")
    code, _, err = cli(capsys, "train", "--config", config, *run_overrides(tmp_path / "run")[:1])
    assert_one_line_error(code, err, *needles)
    assert not (tmp_path / "run").exists()


def test_missing_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "prepare", "--config", tmp_path / "nope.yaml")
    assert_one_line_error(code, err, str(tmp_path / "nope.yaml"), "not found")


def test_overrides_apply_on_top_of_the_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The file's value is used unless overridden (here: the file's bad value is fixed)."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"model": {"d_model": 33}}), encoding="utf-8")
    run = tmp_path / "run"
    code, _, err = cli(capsys, "prepare", "--config", config, *run_overrides(run))
    assert code == 0 and (run / "data" / "meta.json").is_file(), err


# ------------------------------------------------------------------------------ translate-time errors

def test_missing_run_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    src = tmp_path / "src.txt"
    src.write_text("ka lo\n", encoding="utf-8")
    code, _, err = cli(capsys, "translate", "--run", tmp_path / "nope", "--input", src, "--output", out)
    assert_one_line_error(code, err, str(tmp_path / "nope"), "not a run directory")
    assert not out.exists()
    code, _, err = cli(capsys, "average", "--run", tmp_path / "nope")
    assert_one_line_error(code, err, "no checkpoints")


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory, prepared: Path) -> Path:
    """A run whose data.max_source_len is 8 tokens."""
    from posenc.cli.main import main

    run = tmp_path_factory.mktemp("short") / "run"
    assert main(["train", *run_overrides(run, prepared, "data.max_source_len=8")]) == 0
    return run


def test_overlong_input_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, short_run: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("ka lo\n" + " ".join(["ka lo mi"] * 10) + "\nmi\n", encoding="utf-8")
    out = tmp_path / "sub" / "out.txt"
    out.parent.mkdir()  # an output file's directory must exist
    code, _, err = cli(capsys, "translate", "--run", short_run, "--input", src, "--output", out)
    assert_one_line_error(code, err, "line 2", "max_source_len=8")
    assert not out.exists() and hidden_leftovers(out.parent) == []


def test_overlong_input_line_truncated_on_request(capsys: pytest.CaptureFixture[str], tmp_path: Path, short_run: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("ka lo\n" + " ".join(["ka lo mi"] * 10) + "\nmi\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    with pytest.warns(UserWarning, match="input line 2: .* exceed max_source_len=8; truncated"):
        code, _, _ = cli(capsys, "translate", "--run", short_run, "--input", src, "--output", out, "--too-long", "truncate")
    assert code == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3  # every line translated, line 2 cut


def test_undecodable_translate_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_bytes(b"ka lo\nmi \xff nu\n")
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src, "--output", out)
    assert_one_line_error(code, err, str(src), "line 2")
    assert not out.exists() and hidden_leftovers(tmp_path) == []


def _latest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("ckpt_*"))[-1]


def _truncate(model: Path) -> None:
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2])


def _garbage_same_size(model: Path) -> None:
    model.write_bytes(bytes((b * 7 + 13) % 256 for b in model.read_bytes()))


def _garbage_with_matching_checksum(model: Path) -> None:
    """Garbage that passes the size/SHA-256 check, so the safetensors parser must reject it."""
    model.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json" + b"\x00" * 64)
    state_path = model.parent / "state.json"
    state = json.loads(state_path.read_text())
    data = model.read_bytes()
    state["files"]["model.safetensors"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    state_path.write_text(json.dumps(state))


CORRUPTIONS = {
    "truncated": (_truncate, ["model.safetensors", "truncated or corrupt"]),
    "garbage": (_garbage_same_size, ["model.safetensors", "checksum"]),
    "garbage with checksum": (_garbage_with_matching_checksum, ["model.safetensors", "corrupt or truncated safetensors"]),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path, prepared: Path, case: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    shutil.rmtree(run / "translations", ignore_errors=True)
    corrupt, needles = CORRUPTIONS[case]
    corrupt(_latest(run) / "model.safetensors")
    out = tmp_path / "out.txt"
    code, _, err = cli(capsys, "translate", "--run", run, "--input", prepared / "test.src", "--output", out)
    assert_one_line_error(code, err, _latest(run).name, *needles)
    assert not out.exists()
    code, _, err = cli(capsys, "translate", "--run", run, "--split", "test", "--data", prepared)
    assert_one_line_error(code, err, *needles)
    assert not (run / "translations").exists()


def test_bad_checkpoint_choice(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    code, _, err = cli(capsys, "translate", "--run", trained, "--split", "test", "--checkpoint", "average")
    assert_one_line_error(code, err, "no averaged checkpoint")
    code, _, err = cli(capsys, "translate", "--run", trained, "--split", "test", "--checkpoint", tmp_path / "nope")
    assert_one_line_error(code, err, str(tmp_path / "nope"))
    code, _, err = cli(capsys, "translate", "--run", trained, "--split", "test", "--beam", "0")
    assert_one_line_error(code, err, "decode.beam")


# ------------------------------------------------------------------------------ other commands

def test_evaluate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a b\nc d\n", encoding="utf-8")
    ref.write_text("a b\n", encoding="utf-8")
    code, _, err = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert_one_line_error(code, err, "line counts differ", str(hyp), "2", str(ref), "1")
    code, _, err = cli(capsys, "evaluate", "--hyp", tmp_path / "nope.txt", "--ref", ref)
    assert_one_line_error(code, err, str(tmp_path / "nope.txt"), "no such file")
    ref.write_bytes(b"a b\n\xc3\x28\n")
    code, _, err = cli(capsys, "evaluate", "--hyp", hyp, "--ref", ref)
    assert_one_line_error(code, err, str(ref), "line 2")


def test_average_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path) -> None:
    out = tmp_path / "avg"
    code, _, err = cli(capsys, "average", "--run", trained, "--last", "0", "--output", out)
    assert_one_line_error(code, err, "--last")
    assert not out.exists()


def test_unknown_experiment_and_analysis(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "experiment", "no-such-experiment")
    assert_one_line_error(code, err, "unknown experiment 'no-such-experiment'", "toy")
    code, _, err = cli(capsys, "analyze", "no_such_analysis", "--experiment", "toy")
    assert_one_line_error(code, err, "unknown analysis", "length_bleu")
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: x\nmethods: {a: {}}\nseeds: [1, 1]\n", encoding="utf-8")
    code, _, err = cli(capsys, "experiment", exp)
    assert_one_line_error(code, err, "seeds")


# ------------------------------------------------------------------------------ known bugs

def test_translate_without_input_or_split(capsys: pytest.CaptureFixture[str], trained: Path) -> None:
    try:
        code = cli(capsys, "translate", "--run", trained)[0]
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    assert code == 2


@pytest.mark.parametrize("content", [None, b"ka lo\nmi \xff nu\n"], ids=["missing", "undecodable"])
def test_translate_to_stdout_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, trained: Path,
                                       content: bytes | None) -> None:
    src = tmp_path / "src.txt"
    if content is not None:
        src.write_bytes(content)
    code, _, err = cli(capsys, "translate", "--run", trained, "--input", src)
    assert_one_line_error(code, err, str(src))


# ------------------------------------------------------------------------------ the real console script

def _console_script() -> list[str]:
    script = Path(sys.executable).with_name("posenc")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "posenc.cli.main"]


def test_console_script_exit_code(tmp_path: Path) -> None:
    """One real process: the installed ``posenc`` script prints one line and exits with 2."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([*_console_script(), "translate", "--run", str(tmp_path / "nope"), "--split", "test"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == f"error: {tmp_path / 'nope'}: not a run directory (no config.yaml)\n"
