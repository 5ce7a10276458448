"""Tiny runs for the translation task, CLI and experiment tests: toy data, a 2-layer d_model=32
transformer, a few steps. All paths are absolute (under pytest's tmp_path), so nothing
depends on the current directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posenc.cli.main import main

N_TRAIN, N_VALID, N_TEST = 60, 8, 8

#: The toy corpus (target = reversed, upper-cased source) with a 40-piece vocabulary.
TOY = [
    "data.corpus=toy", "data.vocab_size=40", f"data.options.n_train={N_TRAIN}",
    f"data.options.n_valid={N_VALID}", f"data.options.n_test={N_TEST}",
]
#: A tiny model trained for 3 steps; lr is the Noam factor. decode.beam=2 keeps decoding cheap.
TINY = [
    "model.preset=transformer-tiny", "model.d_model=32", "model.d_ff=64",
    "train.max_steps=3", "train.max_tokens=400", "train.warmup=2", "train.device=cpu",
    "train.log_every=1", "decode.beam=2",
]
#: A Noam factor so small that the weights stay near their random initialisation: the
#: outputs are then long non-empty strings instead of the immediate EOS a briefly trained
#: model emits, so comparisons of translations are not trivially between empty lines.
NEAR_INIT = ["train.lr=0.001"]

#: Position methods of the papers and the RNN-NMT baseline, as override lists.
METHODS: dict[str, list[str]] = {
    "ape": ["model.position.name=ape"],
    "shape": ["model.position.name=shape", "model.position.max_shift=20"],
    "cape": ["model.position.name=cape"],
    "rpe": ["model.position.name=rpe", "model.position.k=4"],
    "rnn": ["model.position.name=rnn"],
    "rr": ["model.position.name=rr", "model.position.k=4"],
    "rnn-nmt": ["arch=rnn-nmt", "rnn.hidden=16", "rnn.encoder_layers=1", "rnn.decoder_layers=1"],
}


def run_overrides(out_dir: Path, data_dir: Path | None = None, *extra: str) -> list[str]:
    """TOY + TINY overrides for a run in ``out_dir`` (sharing ``data_dir`` when given)."""
    dirs = [f"out_dir={out_dir}"] + ([f"data_dir={data_dir}"] if data_dir is not None else [])
    return [*dirs, *TOY, *TINY, *extra]


def cli(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    """Run ``posenc ARGV`` in-process; returns (exit code, stdout, stderr) of this call only."""
    capsys.readouterr()  # drop anything printed before
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> str:
    """Exit status 2 and stderr exactly one line ``error: ...`` containing every needle."""
    assert code == 2, f"exit code {code}, stderr {err!r}"
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, repr(err)
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    return err[len("error: "):].rstrip("\n")


def hidden_leftovers(directory: Path) -> list[str]:
    """Temporary files/dirs (names starting with '.') that a failed atomic write left behind."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name != ".spm-cache")


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()
