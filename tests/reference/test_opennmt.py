"""Shaw et al. (2018) relative positions against OpenNMT-py's ``MultiHeadedAttention``
(``max_relative_positions``: one table for a^K and a^V), and with separate key and value tables
through OpenNMT-py's ``gen_relative_positions`` and ``relative_matmul`` (tensor2tensor's
``_relative_attention_inner``), on the same weights: an encoder with padding, a causal decoder, at
L = 10 and 140 (posenc's banded CPU path from 128 on), and decoding step by step with a cache."""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import types

import pytest
import torch

from posenc.models.attention import MultiHeadAttention, may_attend_mask
from posenc.positions.shaw import ShawParams, ShawRelativePosition

D, H, K = 24, 3, 4


def opennmt_attention() -> types.ModuleType:
    """``onmt/modules/multi_headed_attn.py`` of the installed OpenNMT-py, loaded without ``onmt/__init__``
    (which imports its whole toolkit: spacy, fasttext, ...; the attention module needs torch only)."""
    spec = importlib.util.find_spec("onmt")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the Shaw reference needs OpenNMT-py (pip install --no-deps OpenNMT-py==3.5.1; see Makefile)",
                    allow_module_level=True)
    name = "_opennmt_modules_reference"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [f"{spec.submodule_search_locations[0]}/modules"]
        sys.modules[name] = package
    return importlib.import_module(f"{name}.multi_headed_attn")


onmt = opennmt_attention()


def pair(share: bool, causal: bool) -> tuple[MultiHeadAttention, ShawRelativePosition, torch.nn.Module]:
    """posenc's attention with Shaw (k = K) and OpenNMT-py's, holding the same weights and table."""
    rel = ShawRelativePosition(D, ShawParams(k=K, share_tables=share), num_layers=1, num_heads=H)
    ours = MultiHeadAttention(D, H, hook=rel.hook(0)).eval()
    theirs = onmt.MultiHeadedAttention(H, D, dropout=0.0, is_decoder=causal, max_relative_positions=K,
                                       attn_type="self", add_qkvbias=True).eval()
    with torch.no_grad():
        for mine, their in ((ours.q_proj, theirs.linear_query), (ours.k_proj, theirs.linear_keys),
                            (ours.v_proj, theirs.linear_values), (ours.out_proj, theirs.final_linear)):
            mine.bias.normal_(0, 0.1)
            their.weight.copy_(mine.weight)
            their.bias.copy_(mine.bias)
        theirs.relative_positions_embeddings.weight.copy_(rel.hook(0).key_table)
    return ours, rel, theirs


def inputs(length: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x ``(2, L, D)``, positions, and posenc's ``allowed (2, 1, L, L)``: row 1 padded after 2L/3."""
    x = torch.randn(2, length, D)
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, 2 * length // 3 :] = False
    return x, torch.arange(length, dtype=torch.float32).expand(2, -1), may_attend_mask(mask, length, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("length", [10, 140])
def test_shaw_shared_tables_equal_opennmt(length: int, causal: bool) -> None:
    ours, rel, theirs = pair(share=True, causal=causal)
    x, pos, allowed = inputs(length, causal)
    with torch.no_grad():
        mine = ours(x, x, allowed, rel.context(pos, pos))
        expected, _ = theirs(x, x, x, mask=~allowed)
    torch.testing.assert_close(mine, expected, rtol=0, atol=1e-5)


def test_shaw_decoding_steps_equal_opennmt() -> None:
    """One token at a time, keys and values cached: OpenNMT-py's step uses the last row of the
    clipped distances (``gen_relative_positions(cache=True)``), posenc the context of one query."""
    ours, rel, theirs = pair(share=True, causal=True)
    length = 12
    x = torch.randn(2, length, D)
    pos = torch.arange(length, dtype=torch.float32).expand(2, -1)
    theirs.layer_cache = (True, {"keys": torch.tensor([]), "values": torch.tensor([])})
    cache: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for step in range(length):
            token = x[:, step : step + 1]
            allowed = torch.ones(2, 1, 1, step + 1, dtype=torch.bool)
            mine = ours(token, token, allowed, rel.context(pos[:, step : step + 1], pos[:, : step + 1]), cache)
            expected, _ = theirs(token, token, token, step=step)
            torch.testing.assert_close(mine, expected, rtol=0, atol=1e-5)


def separate_tables_reference(ours: MultiHeadAttention, key_table: torch.Tensor, value_table: torch.Tensor,
                              x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Shaw Eq. 3-4 with a^K and a^V from separate tables, OpenNMT-py's helpers doing the relative parts
    (as tensor2tensor's ``_relative_attention_inner``): e = (q·kᵀ + q·a^Kᵀ)/√Dh, z = α·v + α·a^V."""
    dh, length = D // H, x.shape[1]
    q, k, v = (onmt.shape(lin(x), dh) for lin in (ours.q_proj, ours.k_proj, ours.v_proj))
    q = q / math.sqrt(dh)
    index = onmt.gen_relative_positions(length, K)
    scores = q @ k.transpose(2, 3) + onmt.relative_matmul(q, key_table[index], True)
    attn = scores.masked_fill(~allowed, -1e18).softmax(-1)
    out = attn @ v + onmt.relative_matmul(attn, value_table[index], False)
    return ours.out_proj(onmt.unshape(out))


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("length", [10, 140])
def test_shaw_separate_tables_equal_the_relative_attention_inner_form(length: int, causal: bool) -> None:
    ours, rel, _ = pair(share=False, causal=causal)
    hook = rel.hook(0)
    assert hook.key_table is not hook.value_table
    x, pos, allowed = inputs(length, causal)
    with torch.no_grad():
        mine = ours(x, x, allowed, rel.context(pos, pos))
        expected = separate_tables_reference(ours, hook.key_table, hook.value_table, x, allowed)
    torch.testing.assert_close(mine, expected, rtol=0, atol=1e-5)
