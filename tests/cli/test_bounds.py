"""Bounded config loading, one-line config errors, bounded eval input.

Every case is a command line that today either eats memory, recurses, prints a huge value or
a traceback; each must end with exit 2, one short ``error: ...`` line and nothing written."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import assert_one_line_error, cli, run_overrides

#: Longest error line accepted (the message may quote ~200 characters of a value).
MAX_LINE = 1200


def alias_bomb(levels: int, indent: int = 6, width: int = 10) -> str:
    """A YAML block list whose last item holds ``width ** levels`` strings once its aliases are
    expanded, in a few hundred bytes (the "billion laughs"): item k is ``width`` aliases of k-1."""
    pad = " " * indent
    lines = [f"{pad}- &l0 [" + ",".join(["lol"] * width) + "]"]
    lines += [f"{pad}- &l{k} [" + ",".join([f"*l{k - 1}"] * width) + "]" for k in range(1, levels + 1)]
    return "\n".join(lines)


def bomb_config(tmp_path: Path, levels: int) -> Path:
    """A run config whose ``data.options.task`` is an alias bomb of ``10 ** levels`` strings."""
    path = tmp_path / "bomb.yaml"
    path.write_text(f"data:\n  corpus: toy\n  options:\n    task:\n{alias_bomb(levels)}\n", encoding="utf-8")
    return path


def short_error(code: int, err: str, *needles: str) -> str:
    message = assert_one_line_error(code, err, *needles)
    assert len(err) < MAX_LINE, f"error line of {len(err)} characters"
    return message


def test_alias_bomb_in_corpus_option_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """10**6 strings once expanded (a 30 MB repr): refused by the loader, nothing echoed."""
    config = bomb_config(tmp_path, 6)
    assert config.stat().st_size < 500
    code, out, err = cli(capsys, "train", "--config", config, f"out_dir={tmp_path / 'run'}")
    short_error(code, err, str(config), "aliases")  # not expanded: test_billion_laughs_stays_small caps memory
    assert out == ""
    assert not (tmp_path / "run").exists()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_billion_laughs_stays_small(tmp_path: Path) -> None:
    """The issue's ~500-byte bomb (10**9 strings), in a process capped at 3 GB of address space."""
    config = bomb_config(tmp_path, 9)
    argv = [sys.executable, "-m", "posenc.cli.main", "train", "--config", str(config), f"out_dir={tmp_path / 'run'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    short_error(proc.returncode, proc.stderr, "aliases")
    assert not (tmp_path / "run").exists()


def test_alias_bomb_in_analysis_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``analysis_options`` with ``--jobs 2``: refused before the spec is written for the workers."""
    path = write_experiment(tmp_path)
    text = path.read_text(encoding="utf-8") + f"analysis_options:\n  bomb:\n{alias_bomb(6, indent=4)}\n"
    path.write_text(text, encoding="utf-8")
    code, out, err = cli(capsys, "experiment", path, "--jobs", "2")
    short_error(code, err, str(path), "aliases")
    assert not (tmp_path / "exp").exists()


def test_recursive_alias_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "loop.yaml"
    config.write_text("data:\n  options:\n    task: &a [1, *a]\n", encoding="utf-8")
    code, _, err = cli(capsys, "train", "--config", config, f"out_dir={tmp_path / 'run'}")
    short_error(code, err, str(config), "recursive alias")


@pytest.mark.parametrize("where", ["file", "override"])
def test_deep_nesting_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str) -> None:
    """900 nested lists: a one-line error, not a RecursionError traceback."""
    deep = "[" * 900 + "1" + "]" * 900
    args = [f"out_dir={tmp_path / 'run'}"]
    if where == "file":
        config = tmp_path / "deep.yaml"
        config.write_text(f"data:\n  options:\n    task: {deep}\n", encoding="utf-8")
        args += ["--config", str(config)]
    else:
        args += [f"data.options.task={deep}"]
    code, _, err = cli(capsys, "train", *args)
    short_error(code, err, "nested deeper than")
    assert not (tmp_path / "run").exists()


def test_oversized_config_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "big.yaml"
    config.write_text("model:\n  position:\n    name: " + "x" * (2 << 20) + "\n", encoding="utf-8")
    code, _, err = cli(capsys, "train", "--config", config, f"out_dir={tmp_path / 'run'}")
    short_error(code, err, str(config), "limit is 1048576")


@pytest.mark.parametrize("key", ["model.position.name", "data.options.task", "data.setting", "train.device"])
def test_huge_value_is_not_echoed(capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str) -> None:
    """A 100 kB value (about the longest one argument may be) is quoted in at most ~200 characters."""
    code, _, err = cli(capsys, "train", *run_overrides(tmp_path / "run"), f"{key}={'q' * 100_000}")
    message = short_error(code, err)
    assert "q" * 100 in message and "q" * 300 not in message


def test_huge_method_label_in_experiment(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A method label of 500 kB in the experiment file (under the 1 MiB cap)."""
    path = write_experiment(tmp_path)
    exp = yaml.safe_load(path.read_text(encoding="utf-8"))
    exp["methods"] = {"a" * 500_000 + "!": {"model.position.name": "ape"}}
    path.write_text(yaml.safe_dump(exp, width=10**7), encoding="utf-8")
    code, _, err = cli(capsys, "experiment", path)
    message = short_error(code, err, "experiment label")
    assert "a" * 300 not in message


# ------------------------------------------------------------------------------ config values

NON_FINITE = {
    "lr inf": (["train.lr=.inf"], ["train.lr", "finite", "inf"]),
    "lr nan": (["train.lr=.nan"], ["train.lr", "finite", "nan"]),
    "eps -inf": (["train.eps=-.inf"], ["train.eps", "finite"]),
    "betas": (["train.betas=[0.9, .nan]"], ["train.betas", "finite"]),
    "decode": (["decode.length_penalty=.inf"], ["decode.length_penalty", "finite"]),
}


@pytest.mark.parametrize("case", list(NON_FINITE))
def test_non_finite_float_is_refused_up_front(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    """``train.lr=.inf`` used to fail with a FloatingPointError at step 2, after writing the run."""
    overrides, needles = NON_FINITE[case]
    code, out, err = cli(capsys, "train", *run_overrides(tmp_path / "run"), *overrides)
    short_error(code, err, *needles)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_non_finite_in_yaml_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("train: {lr: .inf}\n", encoding="utf-8")
    code, _, err = cli(capsys, "train", "--config", config, f"out_dir={tmp_path / 'run'}")
    short_error(code, err, "train.lr", "finite")
    assert not (tmp_path / "run").exists()


def test_train_config_checks_finiteness_itself() -> None:
    """Built in code (not from YAML), the dataclass refuses non-finite floats too."""
    from posenc.errors import ConfigError
    from posenc.training.config import TrainConfig

    for kwargs in ({"lr": float("inf")}, {"clip_norm": float("nan")}, {"betas": [0.9, float("nan")]}):
        with pytest.raises(ConfigError, match="finite"):
            TrainConfig(**kwargs)


BAD_DECODE = {
    "beam 100000": ("decode.beam=100000", ["decode.beam", "1..256", "100000"]),
    "beam 257": ("decode.beam=257", ["decode.beam", "1..256", "257"]),
    "beam 0": ("decode.beam=0", ["decode.beam", "1..256", "got 0"]),
    "length penalty": ("decode.length_penalty=-0.5", ["decode.length_penalty", ">= 0", "-0.5"]),
    "max_len_a": ("decode.max_len_a=-1", ["decode.max_len_a/b", ">= 0"]),
    "max_len_b": ("decode.max_len_b=-3", ["decode.max_len_a/b", ">= 0"]),
    "batch_tokens": ("decode.batch_tokens=0", ["decode.batch_tokens", ">= 1"]),
    # translate (and a CTranslate2 export) refuse a source bound below 2; the run refuses it first
    "max_source_len": ("data.max_source_len=1", ["data.max_source_len", ">= 2", "got 1"]),
}


@pytest.mark.parametrize("command", ["prepare", "train"])
@pytest.mark.parametrize("case", list(BAD_DECODE))
def test_bad_decode_options_are_refused_before_anything_is_written(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path, command: str, case: str) -> None:
    """``train decode.beam=100000`` used to be stored in config.yaml, so a later translate without
    --beam failed: every decode option translate would refuse is refused here."""
    override, needles = BAD_DECODE[case]
    code, out, err = cli(capsys, command, *run_overrides(tmp_path / "run"), override)
    short_error(code, err, *needles)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_the_largest_beam_translate_accepts_is_accepted() -> None:
    from posenc.decoding.translate import MAX_BEAM
    from posenc.tasks.translation.config import DecodeConfig

    assert DecodeConfig(beam=MAX_BEAM).beam == MAX_BEAM == 256


@pytest.mark.parametrize("command", ["prepare", "train"])
@pytest.mark.parametrize("value, shown", [("1e3", "'1e3'"), ("1.0e+3", "1000.0"), ("ten", "'ten'")])
def test_corpus_option_wrong_type(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str,
                                  value: str, shown: str) -> None:
    """Corpus options are typed like every other integer field: a one-line error naming the key."""
    code, _, err = cli(capsys, command, *run_overrides(tmp_path / "run"), f"data.options.n_train={value}")
    short_error(code, err, "data.options.n_train", "expected an integer", shown)
    assert list(tmp_path.iterdir()) == []


def test_unknown_key_in_run_config_names_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  trained: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    config = run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "bogus: 1\n", encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("ka lo mi\n", encoding="utf-8")
    code, _, err = cli(capsys, "translate", "--run", run, "--input", source, "--output", tmp_path / "out.txt")
    short_error(code, err, str(config), "bogus", "unknown option")
    assert not (tmp_path / "out.txt").exists()


# ------------------------------------------------------------------------------ workers

def _children(pid: int) -> list[int]:
    """Live (not zombie) direct children of ``pid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(cond: Callable[[], bool], timeout: float) -> bool:
    """Poll ``cond`` every 0.1 s for up to ``timeout`` seconds; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_workers_die_with_the_grid(tmp_path: Path, sig: signal.Signals) -> None:
    """``posenc experiment --jobs 2`` signalled while its two workers train: no worker survives it
    (they used to be orphaned and keep training); on TERM/INT the grid itself stops cleanly."""
    path = write_experiment(tmp_path, methods=("ape", "shape"),
                            train={"max_steps": 10**6, "validate_every": 0, "log_every": 1000})
    argv = [sys.executable, "-m", "posenc.cli.main", "experiment", str(path), "--jobs", "2"]
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers: list[int] = []
    try:
        assert _wait_for(lambda: len(_children(parent.pid)) == 2 or parent.poll() is not None, 120)
        workers = _children(parent.pid)
        assert len(workers) == 2, parent.communicate()
        time.sleep(1.0)  # the workers are importing / training
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=20)
        assert _wait_for(lambda: not any(_alive(w) for w in workers), 5), "a worker outlived the grid"
        if sig != signal.SIGKILL:
            assert parent.returncode == 128 + sig and err.strip().splitlines()[-1] == "error: interrupted", err
    finally:
        for pid in [parent.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait()


def test_one_method_experiment_skips_bootstrap(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """The paired bootstrap needs two methods: a one-method grid says so before training, skips
    that analysis with a note in the report and finishes (it used to train, then fail)."""
    path = write_experiment(tmp_path)
    exp = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**exp, "analyses": ["bootstrap", "length_diff"]}), encoding="utf-8")
    with caplog.at_level("INFO", logger="posenc"):
        code, out, err = cli(capsys, "experiment", path)
    assert code == 0, err
    notes = [r.getMessage() for r in caplog.records if "bootstrap" in r.getMessage()]
    assert notes and "at least 2 methods" in notes[0]
    assert caplog.records[0].getMessage() == notes[0]  # before anything else, training included
    report = (tmp_path / "exp" / "report" / "README.md").read_text(encoding="utf-8")
    assert "Skipped: bootstrap compares at least 2 methods; this experiment has 1." in report
    assert list((tmp_path / "exp" / "report" / "vanilla" / "length_diff").glob("*.csv"))


# ------------------------------------------------------------------------------ eval input

LONG_WORDS = 160_000  # 920 kB a line: under the 1 MiB line bound, far over 400 subwords


def _long_line_corpus(tmp_path: Path) -> dict[str, Path]:
    """The files corpus of test_files_corpus with a 160,000-word pair in train, valid and test."""
    from tests.cli.test_files_corpus import write_corpus

    files = write_corpus(tmp_path / "corpus")
    words = " ".join(["alpha beta gamma delta"] * (LONG_WORDS // 4))
    for split in ("train", "valid", "test"):
        for side, text in (("src", words), ("tgt", words.upper())):
            path = files[f"{split}_{side}"]
            lines = path.read_text(encoding="utf-8").splitlines()
            path.write_text("\n".join([*lines[:2], text, *lines[2:]]) + "\n", encoding="utf-8")
    return files


def test_long_validation_and_test_lines_are_bounded(tmp_path: Path) -> None:
    """A 160,000-word line in valid/test: validation skips it with a count (it used to run for
    minutes on it) and scoring the test split truncates it with a warning (it used to fail)."""
    from tests.cli.test_files_corpus import files_overrides
    from tests.helpers.tiny import TINY

    files, run = _long_line_corpus(tmp_path), tmp_path / "run"
    posenc = [sys.executable, "-m", "posenc.cli.main"]
    train = [*posenc, "train", f"out_dir={run}", *files_overrides(files), *TINY, "train.validate_every=1",
             "data.max_source_len=32"]
    proc = subprocess.run(train, capture_output=True, text=True, timeout=900, preexec_fn=_limit_memory)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dropped 1 training pairs longer than 400 subwords" in proc.stderr
    assert "skipped 1 validation pairs longer than 400 subwords" in proc.stderr
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["stopping_signal"] == "all 6 validation pairs (1 longer than 400 subwords skipped)"
    score = [*posenc, "translate", "--run", str(run), "--split", "test"]
    proc = subprocess.run(score, capture_output=True, text=True, timeout=300, preexec_fn=_limit_memory)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "input line 3:" in proc.stderr and "exceed max_source_len=32; truncated" in proc.stderr
    assert json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])["lines"] == 6


def test_unknown_key_in_older_run_config_names_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        trained: Path) -> None:
    """A run without fingerprint.json (an older posenc's) is refused until ``posenc upgrade``
    writes one from its config.yaml; a config.yaml that no longer reads is named there."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "fingerprint.json").unlink()
    config = run / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "bogus: 1\n", encoding="utf-8")
    code, _, err = cli(capsys, "train", *run_overrides(run))
    short_error(code, err, str(run), "fingerprint.json", "posenc upgrade")
    code, _, err = cli(capsys, "upgrade", str(run))
    short_error(code, err, str(config), "bogus", "unknown option", "nothing was changed")
    assert not (run / "fingerprint.json").exists()


def test_alias_bomb_in_checkpoint_config(tmp_path: Path, trained: Path) -> None:
    """The config stored with a checkpoint is read with the same bounds as any config (in a process
    capped at 3 GB of address space)."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    latest = sorted((run / "checkpoints").glob("ckpt_*"))[-1]
    (latest / "config.yaml").write_text(f"model:\n  bomb:\n{alias_bomb(9, indent=4)}\n", encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("ka lo mi\n", encoding="utf-8")
    argv = [sys.executable, "-m", "posenc.cli.main", "translate", "--run", str(run), "--checkpoint", str(latest),
            "--input", str(source), "--output", str(tmp_path / "out.txt")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory)
    short_error(proc.returncode, proc.stderr, "config.yaml", "not valid YAML")


def test_sigterm_stops_a_one_job_grid_cleanly(tmp_path: Path) -> None:
    """``--jobs 1`` trains in the parent: SIGTERM unwinds it like Ctrl-C (one line, exit 143)
    instead of killing it in the middle of whatever it was writing."""
    path = write_experiment(tmp_path, train={"max_steps": 10**6, "validate_every": 0, "log_every": 1000})
    argv = [sys.executable, "-m", "posenc.cli.main", "experiment", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run = tmp_path / "exp" / "vanilla" / "ape" / "seed1"
        assert _wait_for(lambda: (run / "train.csv").exists() or proc.poll() is not None, 120)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 143 and err.strip().splitlines()[-1] == "error: interrupted", err  # 128 + SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.parametrize("argv", [
    ["--seeds", "9" * 5000],
    ["seeds=[" + "9" * 5000 + "]"],
    ["base.train.max_steps=" + "9" * 5000],
    ["seeds=[1, 0x" + "f" * 5000 + "]"],
])
def test_an_integer_of_thousands_of_digits_is_refused_before_conversion(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]) -> None:
    """Python refuses to convert more than 4,300 digits (a ValueError): every integer posenc reads is
    bounded to MAX_INT_DIGITS before it is converted, so the answer is one line, exit 2."""
    from posenc.config import MAX_INT_DIGITS

    exp = write_experiment(tmp_path)
    code, out, err = cli(capsys, "experiment", exp, *argv)
    assert_one_line_error(code, err, f"the limit is {MAX_INT_DIGITS}")
    assert len(err) < MAX_LINE and not (tmp_path / "exp").exists()


def test_integers_within_the_bound_and_seeds_within_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A YAML integer of MAX_INT_DIGITS digits converts; a seed outside [-2**63, 2**63), which torch
    cannot take, is one line naming the key before anything runs."""
    from posenc.config import MAX_INT_DIGITS, check_int_text, safe_load_bounded

    assert safe_load_bounded("x: " + "9" * MAX_INT_DIGITS) == {"x": int("9" * MAX_INT_DIGITS)}
    assert check_int_text("-12", "--seeds") == -12
    exp = write_experiment(tmp_path)
    for argv, key in ((["seeds=[" + str(2**63) + "]"], "experiment.seeds"), (["--seeds", "x"], "--seeds must be")):
        code, _, err = cli(capsys, "experiment", exp, *argv)
        assert_one_line_error(code, err, key)
    code, _, err = cli(capsys, "train", *run_overrides(tmp_path / "run", None), f"train.seed={-(2**63) - 1}")
    assert_one_line_error(code, err, "train.seed must be in [-2**63, 2**63)")
