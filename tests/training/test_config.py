import pytest

from posenc.config import from_dict, load_config, to_dict
from posenc.errors import ConfigError
from posenc.training import TrainConfig


def test_defaults_follow_shape_table4() -> None:
    cfg = TrainConfig(max_steps=10)
    assert cfg.betas == [0.9, 0.98] and cfg.warmup == 8000 and cfg.lr == 2.0
    assert cfg.label_smoothing == 0.1 and cfg.clip_norm == 0.0
    assert cfg.precision == "auto" and cfg.compile == "off"  # bf16 on CUDA, fp32 on CPU; eager unless asked


def test_round_trip_and_overrides(tmp_path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("max_steps: 100\nbetas: [0.9, 0.997]\npatience: 3\n")
    cfg = load_config(TrainConfig, path, ["update_freq=4", "precision=bf16"])
    assert (cfg.max_steps, cfg.betas, cfg.patience, cfg.update_freq, cfg.precision) == (100, [0.9, 0.997], 3, 4, "bf16")
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"max_steps": 0}, "set max_steps or max_epochs"),
        ({"max_steps": 5, "precision": "fp8"}, "train.precision must be one of auto|fp32|bf16|fp16"),
        ({"max_steps": 5, "compile": "maybe"}, "train.compile must be one of auto|on|off"),
        ({"max_steps": 5, "update_freq": 0}, "train.update_freq must be >= 1"),
        ({"max_steps": 5, "betas": [0.9]}, "train.betas must be two numbers"),
        ({"max_steps": 5, "label_smoothing": 1.0}, "train.label_smoothing must be in"),
        ({"max_steps": 5, "keep_last": 3, "average_last": 5}, "needs keep_last >= it"),
        ({"max_steps": 5, "device": "tpu"}, "train.device must be one of"),
        ({"max_steps": 5, "patience": 0}, "train.patience must be >= 1"),
        ({"max_steps": 5, "warmup": 0}, "train.warmup must be >= 1"),
    ],
)
def test_bad_values_give_one_line_errors(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        from_dict(TrainConfig, overrides)
    assert "\n" not in str(info.value)


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match="max_step: unknown option for TrainConfig"):
        from_dict(TrainConfig, {"max_step": 5})


def test_compile_accepts_yaml_booleans_and_cli_text(tmp_path) -> None:
    """YAML 1.1 reads ``on``/``off`` as booleans; both spellings give the same option."""
    path = tmp_path / "train.yaml"
    path.write_text("max_steps: 1\ncompile: off\n")
    assert load_config(TrainConfig, path).compile == "off"
    assert load_config(TrainConfig, path, ["compile=on"]).compile == "on"
    assert load_config(TrainConfig, path, ["compile=auto"]).compile == "auto"
    assert to_dict(TrainConfig(max_steps=1, compile=True))["compile"] == "on"
