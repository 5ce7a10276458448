"""The length-generalization LM's batches padded to static shapes for a captured training step
(``train.compile: reduce-overhead``): same loss, token count and gradients as the unpadded batch."""

from __future__ import annotations

import pytest
import torch

from posenc.config import from_dict
from posenc.models.lm import DecoderLM, LMConfig
from posenc.tasks.lengthgen.generators import PAD, VOCAB_SIZE, example
from posenc.tasks.lengthgen.task import collate, output_loss


def _model(position: dict) -> DecoderLM:
    torch.manual_seed(0)
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 32, "heads": 2, "d_ff": 64, "vocab_size": VOCAB_SIZE,
                               "position": position})
    return DecoderLM(cfg, pad_id=PAD).train()


@pytest.mark.parametrize("position, ids", [
    ({"name": "rope"}, "index"), ({"name": "alibi"}, "index"), ({"name": "t5"}, "index"),
    ({"name": "nope"}, "index"), ({"name": "xpos"}, "index"), ({"name": "rope"}, "coupled"),
])
def test_bucketed_batch_has_the_same_loss_and_gradients(position: dict, ids: str) -> None:
    task = "decimal_addition" if ids == "coupled" else "reverse"
    batch = collate([example(task, n, 1, i) for i, n in enumerate((3, 5, 6, 4, 7))], ids)
    padded = batch.bucketed()
    assert padded.tokens.shape[0] == 8 and (padded.tokens.shape[1] - 1) % 8 == 0
    assert padded.tokens.shape[1] > batch.tokens.shape[1]  # the test pads lengths too
    model, results = _model(position), []
    for b in (batch, padded):
        model.zero_grad(set_to_none=True)
        out = output_loss(model, b)
        out.loss.backward()
        results.append((out, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (ref, ref_grads), (got, grads) = results
    assert int(got.ntokens) == int(ref.ntokens) > 0
    torch.testing.assert_close(got.loss, ref.loss, rtol=1e-5, atol=1e-5)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        # float32 sums over another shape, in another order: measured <= 6.7e-6 absolute (AMD EPYC)
        torch.testing.assert_close(g, r, rtol=1e-4, atol=5e-5)
