"""Command-line parsing: dotted overrides may come before or after the options."""

from __future__ import annotations

import pytest

from posenc.cli.main import parse


def test_overrides_after_options_are_overrides() -> None:
    args = parse(["experiment", "toy", "seeds=[1]", "--jobs", "3", "out_dir=/tmp/x", "train.max_steps=5"])
    assert (args.config, args.jobs) == ("toy", 3)
    assert args.overrides == ["seeds=[1]", "out_dir=/tmp/x", "train.max_steps=5"]


def test_unknown_options_are_still_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["experiment", "toy", "--jobz", "3"], ["evaluate", "--hyp", "a", "--ref", "b", "x=1"]):
        with pytest.raises(SystemExit) as exc:
            parse(argv)
        assert exc.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
