"""The RNN-Transformer's GRU (Neishi & Yoshinaga 2019, Eq. 8) against the paper, which has no public
code: its cell is PyTorch's (cuDNN's) GRU, not Cho et al.'s (2014, Eq. 5-8), and it reads the √D-scaled
embeddings. The parameter gap RR − RNN of the paper's Table 2 is pinned in tests/models/test_params.py."""

from __future__ import annotations

import math

import torch

from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions.gru import GRUParams, GRUPosition
from tests.conftest import tiny_config

D, L = 12, 9


def recurrence(gru: torch.nn.GRU, x: torch.Tensor, cho: bool) -> torch.Tensor:
    """Gates r, z and candidate n of both forms from nn.GRU's weights (rows r, z, n):
    PyTorch n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n)); Cho et al. n = tanh(W_n x + b_n + U_n (r ⊙ h) + c_n);
    h' = (1 − z) ⊙ n + z ⊙ h in both."""
    w_ih, w_hh, b_ih, b_hh = gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0
    (w_r, w_z, w_n), (u_r, u_z, u_n) = w_ih.chunk(3), w_hh.chunk(3)
    (b_r, b_z, b_n), (c_r, c_z, c_n) = b_ih.chunk(3), b_hh.chunk(3)
    h, out = x.new_zeros(x.shape[0], D), []
    for t in range(x.shape[1]):
        xt = x[:, t]
        r = torch.sigmoid(xt @ w_r.T + b_r + h @ u_r.T + c_r)
        z = torch.sigmoid(xt @ w_z.T + b_z + h @ u_z.T + c_z)
        recurrent = (r * h) @ u_n.T + c_n if cho else r * (h @ u_n.T + c_n)
        n = torch.tanh(xt @ w_n.T + b_n + recurrent)
        h = (1 - z) * n + z * h
        out.append(h)
    return torch.stack(out, 1)


def test_gru_cell_is_pytorchs_form_not_chos() -> None:
    method = GRUPosition(D, GRUParams()).eval()
    with torch.no_grad():
        for p in method.gru.parameters():
            p.normal_(0, 0.5)
        x = torch.randn(2, L, D)
        out = method(x, torch.zeros(2, L), torch.ones(2, L, dtype=torch.bool))
        torch.testing.assert_close(out, recurrence(method.gru, x, cho=False), rtol=0, atol=1e-5)
        assert (out - recurrence(method.gru, x, cho=True)).abs().max() > 0.05


def test_gru_reads_the_embeddings_scaled_by_sqrt_d() -> None:
    model = Seq2SeqTransformer(tiny_config("rnn", vocab=30), pad_id=0).eval()
    seen: list[torch.Tensor] = []
    model.encoder.input_pos.gru.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    src = torch.randint(1, 30, (2, 7))
    with torch.no_grad():
        model.encode(src, torch.ones_like(src, dtype=torch.bool))
    torch.testing.assert_close(seen[0], model.src_embed.weight[src] * math.sqrt(model.cfg.d_model))
