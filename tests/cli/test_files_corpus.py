"""The ``files`` corpus: a user's own line-aligned parallel files through ``posenc prepare``/``train``."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.tiny import TINY, assert_one_line_error, cli, hidden_leftovers, read

WORDS = "alpha beta gamma delta eps zeta eta theta iota kappa".split()
SIZES = {"train": 40, "valid": 6, "test": 5}


def _sentences(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))) for _ in range(n)]


def write_corpus(directory: Path) -> dict[str, Path]:
    """{split}.src/.tgt with target = reversed, upper-cased source; returns option name → path."""
    rng = random.Random(7)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for split, n in SIZES.items():
        src = _sentences(rng, n)
        tgt = [" ".join(reversed(s.split())).upper() for s in src]
        for side, lines in (("src", src), ("tgt", tgt)):
            path = directory / f"{split}.{side}"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            files[f"{split}_{side}"] = path
    return files


def files_overrides(files: dict[str, Path]) -> list[str]:
    return ["data.corpus=files", "data.vocab_size=40", *(f"data.options.{k}={v}" for k, v in files.items())]


def test_prepare_user_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    code, out, _ = cli(capsys, "prepare", f"out_dir={run}", *files_overrides(files), *TINY)
    assert code == 0 and out.startswith(f"prepared {run / 'data'}: train 40, valid 6, test 5 pairs")
    data = run / "data"
    for split in SIZES:
        for side in ("src", "tgt"):
            assert read(data / f"{split}.{side}") == read(files[f"{split}_{side}"])
        assert read(data / f"{split}.doc") == [f"{split}\t{i}" for i in range(1, SIZES[split] + 1)]
    assert json.loads((data / "meta.json").read_text())["data"]["corpus"] == "files"


def test_gzipped_user_files_give_the_same_prepared_data(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    zipped = dict(files)
    for key in ("train_src", "valid_tgt"):
        zipped[key] = files[key].with_name(files[key].name + ".gz")
        zipped[key].write_bytes(gzip.compress(files[key].read_bytes()))
    for name, chosen in (("plain", files), ("gz", zipped)):
        assert cli(capsys, "prepare", f"out_dir={tmp_path / name}", *files_overrides(chosen), *TINY)[0] == 0
    for split in SIZES:
        for side in ("src", "tgt"):
            name = f"{split}.{side}"
            assert (tmp_path / "gz" / "data" / name).read_bytes() == (tmp_path / "plain" / "data" / name).read_bytes()


def test_train_and_translate_user_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    code, out, _ = cli(capsys, "train", f"out_dir={run}", *files_overrides(files), *TINY)
    assert code == 0 and json.loads(out)["steps"] == 3
    code, out, _ = cli(capsys, "translate", "--run", run, "--split", "valid")
    assert code == 0 and json.loads(out)["lines"] == SIZES["valid"]
    assert len(read(run / "translations" / "valid.beam2.lp0.6.hyp")) == SIZES["valid"]


def _drop_last_line(path: Path) -> None:
    path.write_text("".join(line + "\n" for line in read(path)[:-1]), encoding="utf-8")


def _blank_line_3(path: Path) -> None:
    lines = read(path)
    lines[2] = "   "
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _bad_byte_line_2(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1] + b" \xff\xfe"
    path.write_bytes(b"\n".join(lines))


BAD_FILES: dict[str, tuple[str, Callable[[Path], None], Callable[[dict[str, Path]], list[str]]]] = {
    "line counts": ("train_tgt", _drop_last_line,
                    lambda f: ["line counts differ", f"{f['train_src']} has 40 lines", f"{f['train_tgt']} has 39"]),
    "empty line": ("valid_src", _blank_line_3, lambda f: [f"{f['valid_src']}: line 3: empty line"]),
    "undecodable": ("test_tgt", _bad_byte_line_2, lambda f: [f"{f['test_tgt']}: line 2: invalid UTF-8", "0xff"]),
    "missing": ("valid_tgt", lambda p: p.unlink(), lambda f: [f"{f['valid_tgt']}: no such file"]),
}


@pytest.mark.parametrize("command", ["prepare", "train"])
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_user_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, case: str) -> None:
    files = write_corpus(tmp_path / "corpus")
    key, damage, needles = BAD_FILES[case]
    damage(files[key])
    run = tmp_path / "run"
    code, out, err = cli(capsys, command, f"out_dir={run}", *files_overrides(files), *TINY)
    assert_one_line_error(code, err, *needles(files))
    assert out == ""
    assert not run.exists()  # neither the prepared directory nor the run directory
    assert hidden_leftovers(tmp_path) == []


def test_only_one_test_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = write_corpus(tmp_path / "corpus")
    del files["test_tgt"]
    code, _, err = cli(capsys, "prepare", f"out_dir={tmp_path / 'run'}", *files_overrides(files), *TINY)
    assert_one_line_error(code, err, "test_src and test_tgt")
    assert not (tmp_path / "run").exists()


def test_a_nul_byte_stops_prepare_with_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """NUL bytes in a training line: one line naming the file and line, exit 2, no prepared data."""
    files = write_corpus(tmp_path / "corpus")
    lines = files["train_src"].read_bytes().split(b"\n")
    lines[4] = lines[4][:3] + b"\x00" + lines[4][3:]
    files["train_src"].write_bytes(b"\n".join(lines))
    run = tmp_path / "run"
    code, _, err = cli(capsys, "prepare", f"out_dir={run}", *files_overrides(files), *TINY)
    assert_one_line_error(code, err, f"{files['train_src']}: line 5: NUL byte at column 4")
    assert not (run / "data" / "train.src").exists()
