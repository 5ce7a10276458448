"""GRU positional encoder (Neishi & Yoshinaga 2019 Eq. 8): one call over the padded batch, float32 under
autocast by default, the prefetch that overlaps the decoder GRU with the encoder, and CUDA equalities."""

from __future__ import annotations

import pytest
import torch

from posenc.models.config import ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions.base import default_positions
from posenc.positions.gru import GRUParams, GRUPosition
from tests.helpers.cuda import cuda_only

D = 8
CUDA = cuda_only("cuDNN GRU and CUDA streams need a GPU")


def _ones(b: int, length: int, device: str = "cpu") -> torch.Tensor:
    return torch.ones(b, length, dtype=torch.bool, device=device)


@pytest.mark.parametrize("layers", [1, 2])
def test_right_padded_batch_equals_each_row_alone(layers: int) -> None:
    """Real tokens never see padding: one call over a right-padded batch = every row run unpadded."""
    torch.manual_seed(0)
    module = GRUPosition(D, GRUParams(num_layers=layers))
    lengths = [5, 2, 7, 1]
    x = torch.randn(len(lengths), 7, D)  # padding slots hold random embeddings, not zeros
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    out = module(x, default_positions(mask), mask)
    for row, n in enumerate(lengths):
        alone = module(x[row : row + 1, :n], default_positions(_ones(1, n)), _ones(1, n))
        torch.testing.assert_close(out[row : row + 1, :n], alone, atol=1e-6, rtol=0)


def test_default_runs_in_float32_under_autocast_and_matches_no_autocast() -> None:
    module = GRUPosition(D, GRUParams())
    x = torch.randn(2, 6, D)
    mask = _ones(2, 6)
    plain = module(x, default_positions(mask), mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = module(x.bfloat16(), default_positions(mask), mask)
    assert cast.dtype == torch.float32
    torch.testing.assert_close(cast, module(x.bfloat16().float(), default_positions(mask), mask), atol=0, rtol=0)
    assert plain.dtype == torch.float32


def test_params_are_validated() -> None:
    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match="gru.autocast"):
        GRUParams(autocast="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_layers"):
        GRUParams(num_layers=0)


def test_prefetch_is_returned_once_and_only_for_the_same_tensor() -> None:
    module = GRUPosition(D, GRUParams())
    x, other = torch.randn(2, 4, D), torch.randn(2, 4, D)
    mask = _ones(2, 4)
    pos = default_positions(mask)
    expected, expected_other = module(x, pos, mask), module(other, pos, mask)
    module.prefetch(x, pos, mask)
    assert torch.equal(module(x, pos, mask), expected)
    assert module._pending is None  # consumed
    module.prefetch(x, pos, mask)
    assert torch.equal(module(other, pos, mask), expected_other)  # a stale prefetch is never returned for another input
    assert module._pending is None and torch.equal(module(x, pos, mask), expected)


def _rnn_model(device: str = "cpu", name: str = "rnn") -> Seq2SeqTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig.from_preset("transformer-tiny", vocab_size=30, position={"name": name}, dropout=0.0)
    return Seq2SeqTransformer(cfg).to(device).train()


def _loss_and_grads(model: Seq2SeqTransformer, prefetch: bool, device: str) -> tuple[torch.Tensor, dict]:
    gen = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 30, (3, 6), generator=gen).to(device), torch.randint(4, 30, (3, 5), generator=gen).to(device)
    src_mask = (torch.arange(6) < torch.tensor([[6], [4], [2]])).to(device)
    tgt_mask = (torch.arange(5) < torch.tensor([[5], [3], [5]])).to(device)
    gru, calls = model.decoder.input_pos, []
    # shadow the hint for this call: a spy that runs it, or a no-op
    gru.prefetch = lambda *a: calls.append(type(gru).prefetch(gru, *a) if prefetch else None)
    try:
        logits = model(src, src_mask, tgt, tgt_mask)
    finally:
        del gru.prefetch
    assert len(calls) == 1  # the model gives the hint once per forward
    loss = logits.float().square().mean()
    model.zero_grad(set_to_none=True)
    loss.backward()
    return logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["rnn", "rr"])
def test_model_forward_and_gradients_are_the_same_with_and_without_prefetch(name: str) -> None:
    model = _rnn_model(name=name)
    with_logits, with_grads = _loss_and_grads(model, True, "cpu")
    without_logits, without_grads = _loss_and_grads(model, False, "cpu")
    assert torch.equal(with_logits, without_logits)
    assert with_grads.keys() == without_grads.keys() and any("decoder.input_pos" in n for n in with_grads)
    for n in with_grads:
        assert torch.equal(with_grads[n], without_grads[n]), n


@CUDA
def test_cuda_prefetch_on_the_side_stream_gives_the_same_logits_and_gradients() -> None:
    model = _rnn_model("cuda")
    with_logits, with_grads = _loss_and_grads(model, True, "cuda")
    without_logits, without_grads = _loss_and_grads(model, False, "cuda")
    torch.testing.assert_close(with_logits, without_logits, atol=1e-6, rtol=0)
    for n in with_grads:
        torch.testing.assert_close(with_grads[n], without_grads[n], atol=1e-6, rtol=1e-5, msg=n)


@CUDA
@pytest.mark.parametrize("layers", [1, 2])
def test_cuda_cudnn_full_pass_matches_cpu_and_incremental_steps(layers: int) -> None:
    torch.manual_seed(0)
    cpu = GRUPosition(64, GRUParams(num_layers=layers))
    gpu = GRUPosition(64, GRUParams(num_layers=layers)).cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(4, 33, 64)
    mask = _ones(4, 33)
    ref = cpu(x, default_positions(mask), mask)
    full = gpu(x.cuda(), default_positions(mask.cuda()), mask.cuda())
    torch.testing.assert_close(full.cpu(), ref, atol=5e-3, rtol=0)  # cuDNN may use TF32
    state: dict = {}
    steps = [gpu(x[:, t : t + 1].cuda(), torch.full((4, 1), float(t), device="cuda"), mask[:, :1].cuda(), state)
             for t in range(33)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=5e-3, rtol=0)


@CUDA
def test_cuda_autocast_dtypes() -> None:
    x = torch.randn(2, 5, 64, device="cuda")
    mask = _ones(2, 5, "cuda")
    fp32 = GRUPosition(64, GRUParams()).cuda()
    half = GRUPosition(64, GRUParams(autocast=True)).cuda()
    half.load_state_dict(fp32.state_dict())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = fp32(x, default_positions(mask), mask), half(x, default_positions(mask), mask)
    assert a.dtype == torch.float32 and b.dtype == torch.float16  # PyTorch's cuDNN RNN autocast is fp16
    torch.testing.assert_close(a, fp32(x, default_positions(mask), mask), atol=0, rtol=0)
    torch.testing.assert_close(b.float(), a, atol=5e-3, rtol=0)


def test_dynamo_traced_model_skips_the_prefetch_and_matches_eager() -> None:
    """Under torch.compile (Dynamo, eager backend: tracing only) the GRU is a graph break, no prefetch."""
    model = _rnn_model()
    src = torch.randint(4, 30, (2, 6))
    mask = _ones(2, 6)
    expected = model(src, mask, src, mask)
    compiled = torch.compile(model, backend="eager")
    torch.testing.assert_close(compiled(src, mask, src, mask), expected, atol=1e-6, rtol=0)
    assert model.decoder.input_pos._pending is None


def test_cuda_graph_option_needs_float32_and_is_ignored_off_cuda() -> None:
    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match="cuda_graph"):
        GRUParams(cuda_graph=True, autocast=True)
    module = GRUPosition(D, GRUParams(cuda_graph=True)).train()
    x = torch.randn(2, 4, D, requires_grad=True)
    mask = _ones(2, 4)
    eager = GRUPosition(D, GRUParams())
    eager.load_state_dict(module.state_dict())
    assert torch.equal(module(x, default_positions(mask), mask), eager(x, default_positions(mask), mask))


@CUDA
def test_cuda_graphed_full_pass_matches_eager_over_steps_with_updates() -> None:
    """Replays see new inputs and in-place weight updates; gradients match the eager pass."""
    torch.manual_seed(0)
    graphed = GRUPosition(64, GRUParams(cuda_graph=True)).cuda().train()
    eager = GRUPosition(64, GRUParams()).cuda().train()
    eager.load_state_dict(graphed.state_dict())
    mask = _ones(3, 9, "cuda")
    pos = default_positions(mask)
    for step in range(3):
        x = torch.randn(3, 9, 64, device="cuda", requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        out_g, out_e = graphed(x, pos, mask), eager(x2, pos, mask)
        torch.testing.assert_close(out_g, out_e, atol=1e-5, rtol=0)
        (out_g * out_e.detach()).sum().backward()
        (out_e * out_e.detach()).sum().backward()
        if step == 0:  # gradient accumulation: a second pass adds to .grad (static buffers must not alias it)
            x_b = torch.randn(3, 9, 64, device="cuda", requires_grad=True)
            graphed(x_b, pos, mask).sum().backward()
            eager(x_b.detach().clone().requires_grad_(True), pos, mask).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad, atol=1e-4, rtol=1e-4)
        for (n, pg), pe in zip(graphed.named_parameters(), eager.parameters()):
            torch.testing.assert_close(pg.grad, pe.grad, atol=1e-4, rtol=1e-4, msg=n)
            with torch.no_grad():  # the same SGD step on both, in place (the graph keeps its pointers)
                pg -= 0.1 * pg.grad
                pe -= 0.1 * pe.grad
            pg.grad = pe.grad = None
    with torch.no_grad():  # no-grad / eval run eagerly
        torch.testing.assert_close(graphed.eval()(x, pos, mask), eager.eval()(x, pos, mask), atol=1e-5, rtol=0)
