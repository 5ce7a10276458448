"""Abacus (McLeish et al. 2024, §3): k ~ U{0..K} added to the digit ids (> 0) only, in training only;
one k per batch as the reference code draws it, or one per sequence."""

from __future__ import annotations

import pytest
import torch

from posenc.config import from_dict
from posenc.errors import ConfigError
from posenc.models.lm import DecoderLM, LMConfig
from posenc.positions import resolve
from posenc.positions.abacus import AbacusAugmentation, AbacusParams
from posenc.tasks.lengthgen.generators import PLUS, SEP, SYM, coupled_positions

#: ``8 7 4 + 5 9 SEP 3 7 5 0`` (478 + 95 = 573, LSB first) → coupled ids 1 2 3 0 1 2 0 1 2 3 4.
TOKENS = [SYM + d for d in (8, 7, 4)] + [PLUS] + [SYM + d for d in (5, 9)] + [SEP] + [SYM + d for d in (3, 7, 5, 0)]
IDS = torch.tensor([coupled_positions(TOKENS)], dtype=torch.float32)


def test_the_hand_made_ids() -> None:
    assert IDS[0].long().tolist() == [1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]


@pytest.mark.parametrize("per_sequence", [False, True])
def test_digits_shift_by_one_k_and_separators_stay_zero(per_sequence: bool) -> None:
    aug = AbacusAugmentation(AbacusParams(max_shift=7, per_sequence=per_sequence)).train()
    ids = IDS.expand(500, -1)
    out = aug(ids, torch.ones_like(ids, dtype=torch.bool))
    k = out - ids
    digits = ids > 0
    assert torch.equal(k[~digits], torch.zeros_like(k[~digits]))  # PLUS and SEP keep id 0
    per_row = k[:, :1]
    assert torch.equal(k, per_row * digits), "one k per sequence on every digit"
    assert set(per_row.long().flatten().tolist()) <= set(range(8))
    distinct = len(set(per_row.long().flatten().tolist()))
    assert distinct == (8 if per_sequence else 1)  # the reference draws one k for the whole batch


def test_per_batch_offsets_cover_zero_to_k_uniformly() -> None:
    torch.manual_seed(0)
    aug = AbacusAugmentation(AbacusParams(max_shift=3)).train()
    draws = torch.stack([(aug(IDS, torch.ones_like(IDS, dtype=torch.bool)) - IDS)[0, 0] for _ in range(4000)])
    counts = torch.bincount(draws.long(), minlength=4).float() / len(draws)
    assert counts.numel() == 4 and torch.all((counts - 0.25).abs() < 0.03)  # k ∈ {0..K}, K inclusive


def test_identity_at_inference() -> None:
    aug = AbacusAugmentation(AbacusParams(max_shift=50)).eval()
    mask = torch.ones_like(IDS, dtype=torch.bool)
    assert torch.equal(aug(IDS, mask), IDS)
    src, tgt = aug.pair(IDS, mask, IDS, mask)
    assert torch.equal(src, IDS) and torch.equal(tgt, IDS)
    assert torch.equal(aug.eval_target(IDS), IDS)


def test_config_names_and_bounds() -> None:
    m = resolve("abacus")
    assert (m.input, m.attention, m.augment) == ("learned", None, "abacus")
    with pytest.raises(ConfigError, match="abacus augments absolute positions and needs input method learned"):
        resolve("sinusoidal+abacus")
    with pytest.raises(ConfigError, match="abacus.max_shift must be an integer"):
        AbacusParams(max_shift=-1)


def test_model_reads_the_shifted_digit_rows_of_the_learned_table() -> None:
    """In training the learned table is read at id + k for digits and at row 0 for separators; at
    inference the model equals a plain learned model over the same coupled ids."""
    def lm(name: str) -> DecoderLM:
        cfg = from_dict(LMConfig, {"layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "vocab_size": SYM + 10,
                                   "dropout": 0.0, "position": {"name": name, "abacus": {"max_shift": 0}}})
        return DecoderLM(cfg, pad_id=0)

    abacus, learned = lm("abacus"), lm("learned")
    learned.load_state_dict(abacus.state_dict(), strict=True)
    tokens = torch.tensor([TOKENS])
    mask = torch.ones_like(tokens, dtype=torch.bool)
    with torch.no_grad():
        ref = learned.eval()(tokens, mask, IDS)
        assert torch.equal(abacus.eval()(tokens, mask, IDS), ref)
        assert torch.equal(abacus.train()(tokens, mask, IDS), ref)  # K = 0: k is always 0
        abacus.augment.params.max_shift = 5
        candidates = [learned(tokens, mask, IDS + k * (IDS > 0)) for k in range(6)]
        seen = set()
        for _ in range(40):
            out = abacus(tokens, mask, IDS)
            match = [k for k, c in enumerate(candidates) if torch.equal(out, c)]
            assert len(match) == 1, "a training pass is the learned model at one k on the digits"
            seen.add(match[0])
        assert seen == set(range(6))


def test_refused_where_positions_are_token_indices() -> None:
    """Over token indices Abacus would shift every position but the first: a translation model, a
    speech model and the length suite with ``data.position_ids=index`` refuse it in one line."""
    from posenc.models.config import ModelConfig
    from posenc.models.ctc import CTCModelConfig
    from posenc.tasks.lengthgen.config import LengthgenConfig

    for schema, where in ((ModelConfig, "a translation model"), (CTCModelConfig, "a speech model")):
        with pytest.raises(ConfigError, match=f"abacus shifts task-given digit ids .*; {where} reads token indices") as err:
            from_dict(schema, {"position": {"name": "abacus"}})
        assert "\n" not in str(err.value)
    run = {"model": {"position": {"name": "abacus"}}, "data": {"task": "decimal_addition", "train_max_length": 9}}
    with pytest.raises(ConfigError, match="data.position_ids=index reads token indices"):
        from_dict(LengthgenConfig, run)
    cfg = from_dict(LengthgenConfig, {**run, "data": {**run["data"], "position_ids": "coupled"}})
    assert cfg.model.position.needs_task_ids
