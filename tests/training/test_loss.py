import pytest
import torch
import torch.nn.functional as F

from posenc.models.seq2seq_loss import Seq2SeqLoss
from posenc.training import label_smoothed_nll
from tests.helpers.training import PAD, batch_of, random_pairs, tiny_model


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_torch_cross_entropy(eps: float) -> None:
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    out = label_smoothed_nll(logits, target, eps, ignore_index=PAD)
    ref = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=PAD, label_smoothing=eps, reduction="sum")
    nll = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=PAD, reduction="sum")
    assert int(out.ntokens) == int((target != PAD).sum()) == 15 - 2 - 4
    torch.testing.assert_close(out.loss, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.nll, nll, rtol=1e-6, atol=1e-6)


def test_hand_computed_two_classes() -> None:
    # logits (0, log 3): p = (1/4, 3/4); target 1, ε = 0.2:
    # 0.8·(−log 3/4) + 0.2·mean(−log 1/4, −log 3/4)
    logits = torch.tensor([[0.0, torch.log(torch.tensor(3.0))]])
    out = label_smoothed_nll(logits, torch.tensor([1]), 0.2)
    lp = torch.log(torch.tensor([0.25, 0.75]))
    expected = 0.8 * -lp[1] + 0.2 * (-lp).mean()
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(out.nll, -lp[1])


def test_padding_does_not_contribute_and_gradients_vanish_there() -> None:
    logits = torch.randn(2, 4, 7, requires_grad=True)
    target = torch.tensor([[3, 4, PAD, PAD], [5, PAD, PAD, PAD]])
    out = label_smoothed_nll(logits, target, 0.1, PAD)
    out.loss.backward()
    assert torch.all(logits.grad[0, 2:] == 0) and torch.all(logits.grad[1, 1:] == 0)
    assert int(out.ntokens) == 3


def test_seq2seq_hook_counts_target_tokens() -> None:
    pairs = random_pairs(4)
    batch = batch_of(pairs)
    out = Seq2SeqLoss(0.1, PAD)(tiny_model(), batch)
    assert int(out.ntokens) == batch.ntokens == sum(len(t) + 1 for _, t in pairs)
    assert out.loss.ndim == 0 and out.loss > 0
