"""Parameter counts against a hand formula of the architecture, and against the papers' tables."""

from __future__ import annotations

import pytest
import torch

from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer

METHODS = ["ape", "learned", "shape", "learned+shape", "cape", "rpe", "ape+shaw", "rnn", "rr", "nopos"]


def count(cfg: ModelConfig) -> int:
    with torch.device("meta"):  # no memory, no init cost
        model = Seq2SeqTransformer(cfg)
    return sum(p.numel() for p in model.parameters())


def gru_params(d: int, layers: int) -> int:
    """torch GRU per layer: W_ih, W_hh (3D × D each) and b_ih, b_hh (3D each)."""
    return layers * 3 * (d * d + d * d + 2 * d)


def shaw_params(cfg: ModelConfig) -> int:
    """(2k+1) × Dh per table (shared across heads, unique per layer), one or two tables."""
    shaw = cfg.position.shaw
    tables = 1 if (shaw.share_tables or not (shaw.keys and shaw.values)) else 2
    return (2 * shaw.k + 1) * (cfg.d_model // cfg.heads) * tables


def expected(cfg: ModelConfig) -> int:
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    ffn = d * f + f + f * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm  # self + cross attention
    embeddings = v * d * {"all": 1, "decoder": 2, "none": 3}[cfg.share_embeddings]
    total = embeddings + cfg.encoder_layers * encoder_layer + cfg.decoder_layers * decoder_layer
    if cfg.norm == "pre":
        total += 2 * norm  # final LayerNorm of each stack
    methods = cfg.position.methods
    stacks = 2  # encoder and decoder each have their own input and attention position modules
    if methods.input == "learned":
        total += stacks * cfg.position.learned.max_positions * d
    if methods.input == "gru":
        total += stacks * gru_params(d, cfg.position.gru.num_layers)
    if methods.attention == "shaw":
        total += (cfg.encoder_layers + cfg.decoder_layers) * shaw_params(cfg)  # per self-attention layer
    return total


def test_transformer_base_shared_32k_vocabulary() -> None:
    cfg = ModelConfig.from_preset("transformer-base", vocab_size=32000, share_embeddings="all")
    n = count(cfg)
    assert n == expected(cfg) == 60_522_496
    assert round(n / 1e6) == 61  # SHAPE Table 6: "61M" for APE, RPE and SHAPE


@pytest.mark.parametrize("name", METHODS)
def test_every_method_matches_the_formula(name: str) -> None:
    cfg = ModelConfig.from_preset("transformer-tiny", vocab_size=50, position={"name": name})
    assert count(cfg) == expected(cfg)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(norm="pre"),
        dict(share_embeddings="none"),
        dict(share_embeddings="decoder"),
        dict(encoder_layers=3, decoder_layers=1, d_model=48, heads=6, d_ff=96),
        dict(position={"name": "rpe", "shaw": {"k": 4, "share_tables": True}}),
        dict(position={"name": "rpe", "shaw": {"k": 5, "values": False}}),
        dict(position={"name": "rr", "gru": {"num_layers": 2}}),
        dict(position={"name": "learned+shape", "learned": {"max_positions": 37}}),
    ],
)
def test_variants_match_the_formula(overrides: dict) -> None:
    cfg = ModelConfig.from_preset("transformer-tiny", vocab_size=50, **overrides)
    assert count(cfg) == expected(cfg)


@pytest.mark.parametrize("layers", [1, 2])
def test_gru_adds_one_gru_per_stack(layers: int) -> None:
    base = ModelConfig.from_preset("transformer-tiny", vocab_size=50)
    rnn = ModelConfig.from_preset("transformer-tiny", vocab_size=50, position={"name": "rnn", "gru": {"num_layers": layers}})
    d = base.d_model
    assert count(rnn) - count(base) == 2 * layers * 3 * (d * d + d * d + 2 * d)


def test_augmentations_add_no_parameters() -> None:
    counts = {n: count(ModelConfig.from_preset("transformer-tiny", vocab_size=50, position={"name": n}))
              for n in ("ape", "shape", "cape", "nopos")}
    assert len(set(counts.values())) == 1
    learned = count(ModelConfig.from_preset("transformer-tiny", vocab_size=50, position={"name": "learned"}))
    assert count(ModelConfig.from_preset("transformer-tiny", vocab_size=50, position={"name": "learned+shape"})) == learned


def test_shaw_adds_two_tables_per_self_attention_layer() -> None:
    base = ModelConfig.from_preset("transformer-base", vocab_size=1000)
    rpe = ModelConfig.from_preset("transformer-base", vocab_size=1000, position={"name": "ape+shaw"})
    k, dh = 16, 512 // 8
    assert count(rpe) - count(base) == 12 * (2 * k + 1) * dh * 2


def test_differences_of_neishi_and_yoshinaga_table_2() -> None:
    """Table 2 (ASPEC): Transformer 68,736,644; Rel 68,787,332; RNN 67,684,484; RR 67,730,948.

    Their vocabulary is not ours, but the differences only involve the architecture: RNN- and
    RR-Transformer have 6 encoder and 5 decoder layers and one GRU per side; Shaw k = 16.
    """
    transformer = ModelConfig.from_preset("transformer-base", vocab_size=1000)
    rel = ModelConfig.from_preset("transformer-base", vocab_size=1000, position={"name": "rpe"})
    rnn = ModelConfig.from_preset("transformer-base", vocab_size=1000, decoder_layers=5, position={"name": "rnn"})
    rr = ModelConfig.from_preset("transformer-base", vocab_size=1000, decoder_layers=5, position={"name": "rr"})
    assert count(rel) - count(transformer) == 68_787_332 - 68_736_644
    assert count(rnn) - count(transformer) == 67_684_484 - 68_736_644
    assert count(rr) - count(rnn) == 67_730_948 - 67_684_484


@pytest.mark.parametrize("preset", ["transformer-base", "transformer-big", "transformer-small", "transformer-tiny"])
@pytest.mark.parametrize("name", ["ape", "rr"])
def test_presets_match_the_formula(preset: str, name: str) -> None:
    cfg = ModelConfig.from_preset(preset, vocab_size=1000, position={"name": name})
    assert count(cfg) == expected(cfg)
