"""posenc vs Hugging Face MarianMT: same model (parameter counts, logits), the record schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed")

from posenc.bench.core import synthetic_batch  # noqa: E402
from posenc.bench.hf_compare import RECORD_KEYS, CompareConfig, build_models, main, parameter_counts  # noqa: E402
from posenc.errors import ConfigError  # noqa: E402

TINY_MODEL = {"d_model": 32, "heads": 2, "d_ff": 48, "dropout": 0.0}


def _cfg(**kw) -> CompareConfig:
    return CompareConfig(preset="transformer-tiny", vocab=50, lengths=[8], decode_len=5, model=dict(TINY_MODEL), **kw)


def test_parameter_counts_are_equal_up_to_marians_frozen_position_tables() -> None:
    cfg = _cfg()
    models = build_models(cfg)
    ours, theirs = parameter_counts(models["posenc"]), parameter_counts(models["marian"])
    d, ff, v, layers = 32, 48, 50, 2
    attn, norm = 4 * (d * d + d), 2 * d
    enc = layers * (attn + d * ff + ff + ff * d + d + 2 * norm)
    dec = layers * (2 * attn + d * ff + ff + ff * d + d + 3 * norm)
    assert ours == {"trainable": v * d + enc + dec, "frozen": 0}
    assert theirs == {"trainable": ours["trainable"], "frozen": 2 * cfg.max_positions * d}


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_marian_with_posenc_weights_computes_the_same_logits(mode: str) -> None:
    models = build_models(_cfg())
    batch = synthetic_batch(3, 7, 50, "cpu", seed=2)
    batch["src_mask"] = batch["src_mask"].clone()
    batch["src_mask"][1, 5:] = False  # one padded source
    args = (batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
    for model in models.values():
        model.train(mode == "train")  # dropout is 0: train and eval agree
    ours, theirs = models["posenc"](*args), models["marian"](*args)
    assert ours.shape == theirs.shape == (3, 7, 50)
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_cli_writes_records_with_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hf.json"
    argv = ["--preset", "transformer-tiny", "--vocab", "50", "--lengths", "8", "--batch-tokens", "16", "--reps", "1",
            "--warmup", "0", "--decode-batch", "2", "--decode-len", "4", "--decode-reps", "1",
            "--model", json.dumps(TINY_MODEL), "--out", str(out)]
    assert main(argv) == 0
    records = json.loads(out.read_text())
    assert [(r["kind"], r["method"]) for r in records] == [("train", "posenc"), ("train", "marian"), ("beam4", "posenc"), ("beam4", "marian")]
    for r in records:
        assert set(RECORD_KEYS) <= set(r) and r["tokens_per_s"] > 0 and r["precision"] == "fp32"
        assert r["ratio_to_posenc"] == 1.0 if r["method"] == "posenc" else r["ratio_to_posenc"] > 0
    train, beam = records[0], records[2]
    assert train["batch"] == 2 and train["tokens_per_s"] == pytest.approx(2 * 2 * 8 / train["seconds"])
    assert beam["sentences_per_s"] == pytest.approx(2 / beam["seconds"]) and beam["beam"] == 4
    assert records[1]["params"]["trainable"] == train["params"]["trainable"]
    assert "| train | 8 | 2 |" in capsys.readouterr().out


@pytest.mark.cuda  # runs on CPU too; on a GPU it also runs the CUDA comparison
def test_bad_options_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="lengths"):
        CompareConfig(lengths=[1])
    with pytest.raises(ConfigError, match="preset"):
        CompareConfig(preset="nope")
    assert main(["--lengths", "x"]) == 2
    assert main(["--device", "tpu"]) == 2
    assert main(["--model", "[1]"]) == 2
    assert capsys.readouterr().err.count("error: ") == 3
    assert main(["--device", "cuda", "--preset", "transformer-tiny", "--lengths", "4", "--reps", "1", "--warmup", "0",
                 "--decode-batch", "1", "--decode-len", "2", "--decode-reps", "1", "--vocab", "20",
                 "--model", json.dumps(TINY_MODEL)]) == (0 if torch.cuda.is_available() else 2)
