"""The one registry of analyses (analysis/registry.py): typed options validated on construction,
the previous defaults, and the same registry behind the experiment schema and ``posenc analyze``."""

from __future__ import annotations

import argparse
import inspect

import pytest

from posenc.analysis import significance
from posenc.analysis.options import LengthOptions
from posenc.analysis.registry import REGISTRY, check_options, option_owners
from posenc.config import load_config
from posenc.errors import ConfigError
from posenc.experiments.runner import find_experiment
from posenc.tasks.translation.experiment import ExperimentConfig
from tests.helpers.tiny import assert_one_line_error, cli

#: The defaults tasks/translation/report.py read with ``analysis_options.get(key, default)`` before the registry.
PREVIOUS_DEFAULTS = {"bucket_width": 10, "bootstrap_samples": 1000, "shift_sentences": 100,
                     "stack_tokens": 300, "swapped_pairs": 10_000, "shift_offsets": [0, 100, 250, 500],
                     "outputs": "beam"}  # outputs: added with experiment.greedy_splits, its default the scored beam


def test_defaults_equal_the_previous_defaults() -> None:
    parsed = {name: a.parse_options({}) for name, a in REGISTRY.items()}
    defaults = {k: v for options in parsed.values() for k, v in vars(options).items()}
    assert defaults == PREVIOUS_DEFAULTS
    assert set(option_owners()) == set(PREVIOUS_DEFAULTS)
    assert option_owners()["bucket_width"] == ["length_bleu", "length_diff"]  # one key, both length analyses
    n_samples = inspect.signature(significance.bootstrap_table).parameters["n_samples"].default
    assert parsed["bootstrap"].bootstrap_samples == n_samples


def test_each_analysis_reads_its_own_options() -> None:
    values = {"bucket_width": 4, "stack_tokens": 40}
    assert REGISTRY["length_bleu"].parse_options(values) == LengthOptions(bucket_width=4)
    assert REGISTRY["position_nll"].parse_options(values).stack_tokens == 40
    assert vars(REGISTRY["speed"].parse_options(values)) == {}


@pytest.mark.parametrize(("values", "message"), [
    ({"bucket_widht": 5}, "experiment.analysis_options.bucket_widht: unknown analysis option (known: "),
    ({"bucket_width": 0}, "experiment.analysis_options.bucket_width must be >= 1, got 0"),
    ({"stack_tokens": "many"}, "experiment.analysis_options.stack_tokens: expected an integer"),
    ({"shift_sentences": True}, "experiment.analysis_options.shift_sentences: expected an integer"),
    ({"shift_offsets": [0, -40]}, "experiment.analysis_options.shift_offsets must be integers >= 0, got -40"),
    ({"shift_offsets": [0]}, "experiment.analysis_options.shift_offsets needs at least two offsets"),
    ({"shift_offsets": [0, 10, 10]}, "experiment.analysis_options.shift_offsets has a repeated offset"),
    ({"shift_offsets": 40}, "experiment.analysis_options.shift_offsets: expected a list"),
    ([1, 2], "experiment.analysis_options: expected a mapping"),
])
def test_a_bad_option_is_a_one_line_error(values: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_options(values)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="analysis_options"):
        ExperimentConfig(methods={"ape": {}}, analysis_options=values)  # type: ignore[arg-type]


def test_options_are_validated_on_construction() -> None:
    with pytest.raises(ConfigError, match="bucket_width must be >= 1"):
        LengthOptions(bucket_width=-1)
    with pytest.raises(ConfigError, match="bucket_width: expected an integer"):
        LengthOptions(bucket_width=2.5)  # type: ignore[arg-type]


def test_shipped_experiment_with_a_bad_override_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped toy experiment loads; a misspelt option (command line) is one line naming it."""
    exp = load_config(ExperimentConfig, find_experiment("toy"))
    check_options(exp.analysis_options)
    code, _, err = cli(capsys, "analyze", "length_bleu", "-e", "toy", "analysis_options.bucket_widht=5")
    assert_one_line_error(code, err, "analysis_options.bucket_widht: unknown analysis option")


def test_a_translation_grid_runs_every_registered_analysis(capsys: pytest.CaptureFixture[str]) -> None:
    """Translation runs carry everything an analysis may need, so its schema asks for every
    registered analysis by default and refuses an unknown one in one line, and ``posenc analyze``
    names each with its description."""
    from posenc.cli import analyze

    assert ExperimentConfig(methods={"ape": {}}).analyses == list(REGISTRY)
    with pytest.raises(ConfigError) as err:
        ExperimentConfig(methods={"ape": {}}, analyses=["speed", "sped"])
    assert str(err.value).startswith("experiment.analyses: unknown analysis 'sped' (known: length_bleu, ")
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    help_text = next(a.help for a in parser._actions if a.dest == "name")
    assert all(f"{k} ({a.description})" in help_text for k, a in REGISTRY.items())
    code, _, err_text = cli(capsys, "analyze", "no_such", "-e", "toy")
    assert_one_line_error(code, err_text, f"(known: {', '.join(REGISTRY)})")


def test_an_analysis_that_compares_methods_is_skipped_on_one() -> None:
    one, two = ExperimentConfig(methods={"ape": {}}), ExperimentConfig(methods={"ape": {}, "rpe": {}})
    assert one.skip_reason("bootstrap") == "bootstrap compares at least 2 methods; this experiment has 1"
    assert two.skip_reason("bootstrap") == "" and one.skip_reason("length_bleu") == ""
