"""The Neishi & Yoshinaga model zoo: configs, parameter counts against Table 2 and by formula."""

from __future__ import annotations

import io

import pytest
import torch

from posenc.errors import ConfigError
from posenc.models.rnn_nmt import RNNNMT
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.helpers.zoo import (
    NEISHI_MODELS,
    build_model,
    count_parameters,
    model_config,
    parameter_table,
    print_parameter_table,
)


def meta_count(name: str, vocab: int, size: str = "base", **overrides) -> int:
    with torch.device("meta"):
        return count_parameters(build_model(name, vocab, size, **overrides))


def test_configs_follow_the_paper():
    cfgs = {name: model_config(name, 100) for name in NEISHI_MODELS}
    assert (cfgs["transformer"].encoder_layers, cfgs["transformer"].decoder_layers) == (6, 6)
    assert (cfgs["rnn-transformer"].encoder_layers, cfgs["rnn-transformer"].decoder_layers) == (6, 5)
    assert (cfgs["rr-transformer"].encoder_layers, cfgs["rr-transformer"].decoder_layers) == (6, 5)
    assert cfgs["rel-transformer"].position.methods.attention == "shaw"
    assert cfgs["rel-transformer"].position.shaw.k == 16
    assert cfgs["rr-transformer"].position.methods.input == "gru"
    assert (cfgs["rnn-nmt"].encoder_layers, cfgs["rnn-nmt"].decoder_layers, cfgs["rnn-nmt"].hidden) == (4, 3, 512)
    assert model_config("rnn-transformer", 100, "tiny").decoder_layers == 1
    assert model_config("transformer", 100, "tiny", d_model=32).d_model == 32


@pytest.mark.parametrize(
    "vocab,table2",
    [
        (16004, {"transformer": 68_736_644, "rel-transformer": 68_787_332, "rnn-transformer": 67_684_484, "rr-transformer": 67_730_948}),
        (40004, {"transformer": 105_624_644, "rel-transformer": 105_675_332, "rnn-transformer": 104_572_484, "rr-transformer": 104_618_948}),
    ],
)
def test_transformer_family_matches_neishi_table2(vocab, table2):
    """Neishi's output layer has a bias (V parameters) that ours does not; the rest is equal."""
    for name, count in table2.items():
        assert meta_count(name, vocab) + vocab == count, name


def test_rnn_transformer_minus_transformer_is_the_grus():
    d, v = 512, 1000
    gru = 3 * (2 * d * d + 2 * d)  # nn.GRU: 3 gates × (W_ih, W_hh, b_ih, b_hh)
    five_decoder_layers = meta_count("transformer", v, decoder_layers=5)
    assert meta_count("rnn-transformer", v) - five_decoder_layers == 2 * gru  # encoder + decoder GRU


def test_rr_minus_rnn_is_the_shaw_tables():
    v, k, head_dim = 1000, 16, 512 // 8
    layers = 6 + 5  # self-attention layers of the encoder and decoder
    tables = layers * 2 * (2 * k + 1) * head_dim  # a^K and a^V per layer (Shaw Eq. 3-4)
    assert meta_count("rr-transformer", v) - meta_count("rnn-transformer", v) == tables
    assert meta_count("rel-transformer", v) - meta_count("transformer", v) == 12 * 2 * (2 * k + 1) * head_dim


def test_build_and_run_tiny_models():
    src = torch.tensor([[4, 5, 6], [7, 8, 0]])
    tgt = torch.tensor([[2, 9], [2, 10]])
    for name in NEISHI_MODELS:
        model = build_model(name, 20, "tiny").eval()
        assert isinstance(model, RNNNMT if name == "rnn-nmt" else Seq2SeqTransformer)
        assert model(src, src != 0, tgt, tgt != 0).shape == (2, 2, 20)


def test_count_parameters_counts_tied_weights_once():
    tied = build_model("transformer", 50, "tiny", share_embeddings="all")
    untied = build_model("transformer", 50, "tiny")
    assert count_parameters(untied) - count_parameters(tied) == 3 * 50 * 64 - 50 * 64


def test_parameter_table_printing():
    buf = io.StringIO()
    rows = print_parameter_table(30, "tiny", file=buf)
    assert [r["model"] for r in rows] == list(NEISHI_MODELS)
    assert rows == parameter_table(30, "tiny")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 + len(NEISHI_MODELS)
    assert lines[2].split()[1] == f"{meta_count('transformer', 30, 'tiny'):,}"


def test_unknown_names_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown zoo model 'lstm'"):
        build_model("lstm", 10)
    with pytest.raises(ConfigError, match="unknown model size 'huge'"):
        build_model("transformer", 10, "huge")
