"""The typed config system: validation, YAML, dotted overrides (incl. aliases), presets, round trips."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from posenc.config import apply_mapping, from_dict, load_config, merge_overrides, parse_override, parse_text, to_dict
from posenc.errors import ConfigError, PosencError
from posenc.models.config import PRESETS, ModelConfig
from posenc.positions import Methods, PositionConfig, resolve
from posenc.positions.base import NullAttention, NullAugmentation
from posenc.positions.cape import CapeAugmentation
from posenc.positions.factory import build_attention, build_augmentation, build_input
from posenc.positions.gru import GRUPosition
from posenc.positions.learned import LearnedPosition
from posenc.positions.none import NoPosition
from posenc.positions.shape import ShapeAugmentation
from posenc.positions.shaw import ShawRelativePosition
from posenc.positions.sinusoidal import SinusoidalPosition
from posenc.tasks.translation.config import RunConfig
from tests.conftest import tiny_config

METHODS = ["ape", "learned", "shape", "learned+shape", "cape", "rpe", "ape+shaw", "rnn", "rr", "nopos"]

# name -> (input, attention, augmentation), from the papers' model definitions.
EXPECTED = {
    "ape": Methods("sinusoidal", None, None),
    "learned": Methods("learned", None, None),
    "shape": Methods("sinusoidal", None, "shape"),
    "learned+shape": Methods("learned", None, "shape"),
    "cape": Methods("sinusoidal", None, "cape"),
    "rpe": Methods("none", "shaw", None),
    "ape+shaw": Methods("sinusoidal", "shaw", None),
    "rnn": Methods("gru", None, None),
    "rr": Methods("gru", "shaw", None),
    "nopos": Methods("none", None, None),
    # aliases inside combinations
    "sinpos+rpe": Methods("sinusoidal", "shaw", None),
    "abspos+shape": Methods("learned", None, "shape"),
    "rnn+rpe": Methods("gru", "shaw", None),
    "ape+shaw+cape": Methods("sinusoidal", "shaw", "cape"),
    " shape ": Methods("sinusoidal", None, "shape"),
}

INPUT_CLASSES = {"sinusoidal": SinusoidalPosition, "learned": LearnedPosition, "gru": GRUPosition, "none": NoPosition}


def config_error(fn, *args, **kwargs) -> str:
    """Call ``fn`` expecting a ConfigError; return its (checked one-line) message."""
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert message and "\n" not in message
    assert isinstance(info.value, PosencError)
    return message


@pytest.mark.parametrize("name", list(EXPECTED))
def test_resolve_names_and_aliases(name: str) -> None:
    assert resolve(name) == EXPECTED[name]
    assert PositionConfig(name=name).methods == EXPECTED[name]


@pytest.mark.parametrize("name", METHODS)
def test_factory_builds_the_resolved_modules(name: str) -> None:
    cfg = PositionConfig(name=name)
    methods = cfg.methods
    assert type(build_input(cfg, 16)) is INPUT_CLASSES[methods.input]
    attention = build_attention(cfg, 16, num_layers=3, num_heads=2)
    if methods.attention is None:
        assert type(attention) is NullAttention
    else:
        assert isinstance(attention, ShawRelativePosition) and len(attention.hooks) == 3
    augment = build_augmentation(cfg)
    expected_aug = {None: NullAugmentation, "shape": ShapeAugmentation, "cape": CapeAugmentation}[methods.augment]
    assert type(augment) is expected_aug


@pytest.mark.parametrize(
    "name, needle",
    [
        ("sinusoidl", "sinusoidl"),  # unknown method
        ("ape+foo", "foo"),
        ("gru+shape", "shape"),  # SHAPE shifts absolute positions; a GRU has none
        ("rnn+cape", "cape"),
        ("cape+shaw", "cape"),  # CAPE without an absolute input method
        ("nopos+shape", "shape"),
        ("ape+learned", "two input"),  # two input methods
        ("rnn+ape", "two input"),
        ("shape+cape", "two augment"),
    ],
)
def test_bad_position_names(name: str, needle: str) -> None:
    assert needle in config_error(PositionConfig, name=name)


@pytest.mark.parametrize(
    "block, value, needle",
    [
        ("shape", {"max_shift": -1}, "max_shift"),  # K < 0
        ("shape", {"inference_offset": -2}, "inference_offset"),
        ("shape", {"max_shift": 0, "exclusive_max": True}, "exclusive_max"),
        ("shaw", {"k": 0}, "shaw.k"),  # k < 1
        ("shaw", {"keys": False, "values": False}, "keys or values"),
        ("cape", {"max_global_shift": -0.1}, "max_global_shift"),
        ("cape", {"max_local_shift": -1.0}, "max_local_shift"),
        ("cape", {"max_global_scaling": 0.5}, "max_global_scaling"),
        ("cape", {"source_scale": -1.0}, "source_scale"),
        ("learned", {"max_positions": 0}, "max_positions"),
        ("gru", {"num_layers": 0}, "num_layers"),
        ("sinusoidal", {"base": 1.0}, "base"),
        ("sinusoidal", {"scale": 0.0}, "scale"),
    ],
)
def test_bad_method_params(block: str, value: dict, needle: str) -> None:
    assert needle in config_error(from_dict, PositionConfig, {"name": "ape", block: value})


def test_method_params_defaults_follow_the_papers() -> None:
    cfg = PositionConfig()
    assert cfg.name == "ape"
    assert cfg.shape.max_shift == 500 and cfg.shape.inference_offset == 0 and not cfg.shape.exclusive_max  # SHAPE §3.1
    assert cfg.shaw.k == 16 and cfg.shaw.keys and cfg.shaw.values and not cfg.shaw.share_tables  # Shaw §4.1
    assert cfg.gru.num_layers == 1  # Neishi & Yoshinaga §5: one GRU layer per side
    assert cfg.cape.max_local_shift == 0.5  # CAPE §5.3: U(-0.5, 0.5)
    assert cfg.sinusoidal.base == 10000.0 and cfg.sinusoidal.scale == 1.0


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"d_model": "big"}, "d_model"),
        ({"d_model": 64.0}, "d_model"),  # float where an int is expected
        ({"heads": True}, "heads"),  # bool is not an int
        ({"dropout": "0.1"}, "dropout"),
        ({"position": {"shape": {"max_shift": 1.5}}}, "max_shift"),
        ({"position": {"shaw": {"values": "no"}}}, "values"),
        ({"position": "ape"}, "position"),  # a section given as a scalar
        ({"position": {"name": 3}}, "name"),
    ],
)
def test_wrong_types_are_one_line_errors(data: dict, needle: str) -> None:
    assert needle in config_error(from_dict, ModelConfig, data)


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"d_model": 63, "heads": 1}, "d_model"),
        ({"d_model": 64, "heads": 5}, "heads"),
        ({"norm": "sandwich"}, "norm"),
        ({"share_embeddings": "some"}, "share_embeddings"),
        ({"dropout": 1.0}, "dropout"),
        ({"activation": "tanh"}, "activation"),
        ({"preset": "transformer-huge"}, "transformer-huge"),
    ],
)
def test_bad_model_values(data: dict, needle: str) -> None:
    assert needle in config_error(from_dict, ModelConfig, data)


def test_int_is_accepted_for_float_fields() -> None:
    cfg = from_dict(ModelConfig, {"dropout": 0, "position": {"cape": {"max_global_shift": 2}}})
    assert cfg.dropout == 0.0 and isinstance(cfg.dropout, float)
    assert isinstance(cfg.position.cape.max_global_shift, float)


def test_unknown_yaml_key(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("preset: transformer-tiny\nposition:\n  name: shape\n  shpae:\n    max_shift: 3\n")
    message = config_error(load_config, ModelConfig, path)
    assert "shpae" in message and "PositionConfig" in message
    path.write_text("d_modle: 64\n")
    assert "d_modle" in config_error(load_config, ModelConfig, path)
    path.write_text("position:\n  shape:\n    max_shfit: 3\n")
    assert "max_shfit" in config_error(load_config, ModelConfig, path)


def test_bad_yaml_files(tmp_path: Path) -> None:
    assert "not found" in config_error(load_config, ModelConfig, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("d_model: [1, 2\n")
    assert "YAML" in config_error(load_config, ModelConfig, bad)
    bad.write_text("- 1\n- 2\n")
    assert "mapping" in config_error(load_config, ModelConfig, bad)


def test_yaml_file_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("preset: transformer-small\nvocab_size: 100\nposition:\n  name: shape\n  shape:\n    max_shift: 40\n")
    cfg = load_config(ModelConfig, path, ["position.max_shift=7", "heads=8"])
    assert cfg.position.shape.max_shift == 7
    assert cfg.heads == 8 and cfg.d_model == PRESETS["transformer-small"]["d_model"] and cfg.vocab_size == 100


def test_alias_override_on_position_config() -> None:
    out = merge_overrides({"name": "shape"}, ["max_shift=7"], PositionConfig)
    assert out == {"name": "shape", "shape": {"max_shift": 7}}
    assert from_dict(PositionConfig, out).shape.max_shift == 7
    # the alias follows the active methods, including a name set by an earlier override
    out = merge_overrides({}, ["name=rr", "k=8", "num_layers=2", "share_tables=true"], PositionConfig)
    assert out == {"name": "rr", "shaw": {"k": 8, "share_tables": True}, "gru": {"num_layers": 2}}


def test_alias_override_through_model_config() -> None:
    cfg = load_config(ModelConfig, None, ["preset=transformer-tiny", "position.name=shape", "position.max_shift=500"])
    assert cfg.position.shape.max_shift == 500
    cfg = load_config(ModelConfig, None, ["position.name=cape", "position.source_scale=1.25"])
    assert cfg.position.cape.source_scale == 1.25
    # explicit dotted paths work for any method, active or not
    cfg = load_config(ModelConfig, None, ["position.shaw.k=4", "position.shaw.values=false"])
    assert cfg.position.shaw.k == 4 and cfg.position.shaw.values is False


def test_bad_overrides() -> None:
    # max_shift belongs to no active method of "ape"
    assert "max_shift" in config_error(merge_overrides, {"name": "ape"}, ["max_shift=7"], PositionConfig)
    assert "d_modl" in config_error(merge_overrides, {}, ["d_modl=3"], ModelConfig)
    assert "KEY=VALUE" in config_error(parse_override, "d_model")
    assert "empty" in config_error(parse_override, "position..name=ape")
    assert "section" in config_error(merge_overrides, {"position": "ape"}, ["position.name=shape"])


def test_override_values_are_parsed_as_yaml() -> None:
    def value(text: str) -> object:
        return merge_overrides({}, [text])["x"]

    assert parse_override("a.b=0.25") == (["a", "b"], "0.25")  # kept as text until typed
    assert value("x=0.25") == 0.25 and value("x=false") is False and value("x=[1, 2]") == [1, 2]
    assert value("x=ape+shaw") == "ape+shaw" and value("x=") == ""


def test_override_values_follow_the_schema() -> None:
    """A string field keeps ``5`` as ``"5"``; corpus options follow the loader."""
    assert parse_text("5", str) == "5" and parse_text("5", int) == 5 and parse_text("5", float) == 5
    assert parse_text('"5"', str) == "5" and parse_text("true", str) == "true"
    assert parse_text("null", str | None) is None and parse_text("null", str) == "null"
    cfg = load_config(RunConfig, None, ["out_dir=2024", "data.corpus=bible", "data.options.src=5",
                                        "data.options.valid_frac=0.1"])
    assert cfg.out_dir == "2024" and cfg.data.options == {"src": "5", "valid_frac": 0.1}
    cfg = load_config(RunConfig, None, ["data.options.n_train=7", "data.corpus=toy"])  # order-free
    assert cfg.data.options == {"n_train": 7}


def test_aliases_resolve_after_all_overrides() -> None:
    """Issue 9: ``max_shift=500 name=shape`` works like the reverse order."""
    a = load_config(RunConfig, None, ["model.position.max_shift=500", "model.position.name=shape"])
    b = load_config(RunConfig, None, ["model.position.name=shape", "model.position.max_shift=500"])
    assert a == b and a.model.position.shape.max_shift == 500
    # the same through one mapping (the experiments' applier) and through a YAML file's nesting
    c = from_dict(RunConfig, apply_mapping({"model": {"position": {"max_shift": 500}}}, {"model.position.name": "shape"}, RunConfig))
    assert c == a


def test_presets() -> None:
    base = ModelConfig.from_preset("transformer-base")
    # Vaswani et al. base, as used by SHAPE (Table 4) and Shaw et al. (§4.1)
    assert (base.encoder_layers, base.decoder_layers, base.d_model, base.heads, base.d_ff, base.dropout) == (
        6, 6, 512, 8, 2048, 0.1)
    big = ModelConfig.from_preset("transformer-big")
    assert (big.d_model, big.heads, big.d_ff) == (1024, 16, 4096)
    for name, values in PRESETS.items():
        cfg = ModelConfig.from_preset(name)
        assert {k: getattr(cfg, k) for k in values} == values
    # explicit keys win over the preset
    cfg = ModelConfig.from_preset("transformer-base", d_model=256, heads=4, decoder_layers=5)
    assert (cfg.d_model, cfg.heads, cfg.decoder_layers, cfg.d_ff) == (256, 4, 5, 2048)
    assert "nope" in config_error(ModelConfig.from_preset, "nope")


@pytest.mark.parametrize("name", METHODS)
def test_round_trip(name: str, tmp_path: Path) -> None:
    cfg = tiny_config(name, position_params={"shape": {"max_shift": 9}, "shaw": {"k": 3}})
    data = to_dict(cfg)
    assert isinstance(data["position"], dict) and data["position"]["name"] == name
    again = from_dict(ModelConfig, data)
    assert again == cfg and to_dict(again) == data
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert load_config(ModelConfig, path) == cfg
    # every field survives, nested ones included
    assert dataclasses.asdict(again) == dataclasses.asdict(cfg)


def test_config_differences_is_the_one_comparison() -> None:
    """Sorted dotted keys with both values; an absent side, tuple = list and NaN = NaN; the
    checkpoint check and the fingerprint diff both read it."""
    from posenc.runs.differences import ABSENT, config_differences
    from posenc.runs.fingerprint import describe_diff, diff_keys

    saved = {"heads": 2, "dims": (4, 8), "drop": float("nan"), "pos": {"name": "ape", "gone": 1}}
    current = {"heads": 4, "dims": [4, 8], "drop": float("nan"), "pos": {"name": "ape", "new": {}}}
    assert config_differences(saved, current, "model") == [
        ("model.heads", 2, 4), ("model.pos.gone", 1, ABSENT), ("model.pos.new", ABSENT, {})]
    assert config_differences(saved, saved) == [] and repr(ABSENT) == "<absent>"
    assert diff_keys(saved, current) == ["heads", "pos.gone", "pos.new"]
    assert describe_diff(saved, current, limit=2) == "heads (2 -> 4), pos.gone (1 -> <absent>) and 1 more"


@pytest.mark.parametrize("order", [["train.max_steps=5", "train={lr: 1}"], ["train={lr: 1}", "train.max_steps=5"]])
def test_a_section_override_and_a_key_inside_it_are_refused_in_one_line(order: list[str]) -> None:
    """Issue 28: ``train.max_steps=5 'train={lr: 1}'`` silently replaced the whole train section
    (max_steps back to its default, 100,000)."""
    with pytest.raises(ConfigError, match=r"replaces the whole train section; give its keys one by one") as err:
        load_config(RunConfig, None, order)
    assert "\n" not in str(err.value)
    both = load_config(RunConfig, None, ["train={lr: 1, max_steps: 5}"])
    keys = load_config(RunConfig, None, ["train.max_steps=5", "train.lr=1"])
    assert (both.train.max_steps, both.train.lr) == (keys.train.max_steps, keys.train.lr) == (5, 1.0)
