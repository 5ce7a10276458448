"""The one dict comparison behind every verdict (posenc.runs.differences)."""

from __future__ import annotations

from posenc.runs.differences import ABSENT, config_differences, describe_differences, flatten
from posenc.runs.same_run import RunRecord, same_run
from posenc.tasks.translation.config import RunConfig


def test_flatten_names_every_leaf_and_keeps_empty_sections():
    assert flatten({"a": {"b": 1, "c": {}}, "d": [1, 2]}) == {"a.b": 1, "a.c": {}, "d": [1, 2]}
    assert flatten({}, "model.") == {"model": {}}
    assert flatten({}) == {}  # nothing at the top: no key named ''


def test_an_empty_side_differs_at_the_other_sides_keys_only():
    diffs = config_differences({}, {"decode": {"beam": 4}, "splits": ["test"]})
    assert diffs == [("decode.beam", ABSENT, 4), ("splits", ABSENT, ["test"])]
    assert describe_differences(diffs) == "decode.beam (<absent> -> 4), splits (<absent> -> ['test'])"


def test_rescore_of_a_run_that_recorded_no_evaluation_names_the_evaluation_keys():
    cfg = RunConfig()
    verdict = same_run(RunRecord.of(cfg), cfg, {"decode": {"beam": 4}, "splits": ["test"]})
    assert verdict.kind == "rescore"
    assert verdict.keys == ("decode.beam", "splits")
    assert not verdict.detail.startswith(" (")
