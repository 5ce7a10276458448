"""Bit-identity of the translation models and the decoder-only LM across refactors (issue 19).

Small seeded models for several position methods run a teacher-forced forward pass, greedy search,
beam-4 search and the fixed-shape (CUDA-graph form, eager on CPU) greedy search on fixed inputs;
the outputs must equal, with ``torch.equal``, the reference tensors stored in
``tests/models/data/bit_identical.safetensors`` (written by the code before the refactor) on the
processor that wrote them (its metadata names it: CPU kernels differ between processors, e.g. the
oneDNN/MKL paths of an AMD Zen 4 and an Intel Xeon). On another processor the decoded tokens must
still be equal and the floats equal to 1e-5: the test says which check it ran.

The methods come from the registry (tests/helpers/methods.py): a new method is covered once its
reference is stored, which adds the missing entries and leaves every stored one as it is::

    python -m tests.models.test_bit_identical --add

Regenerate everything (only when a change is *meant* to alter the numbers)::

    python -m tests.models.test_bit_identical
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from posenc.config import from_dict
from posenc.decoding.search import beam_search, greedy_search
from posenc.models.lm import DecoderLM, LMConfig
from posenc.models.rnn_nmt import RNNConfig, RNNNMT
from posenc.models.seq2seq import Seq2SeqTransformer
from tests.conftest import tiny_config
from tests.helpers.methods import params_for, sequence_methods, uses

DATA = Path(__file__).parent / "data" / "bit_identical.safetensors"
V, PAD, BOS, EOS = 20, 0, 2, 3
#: Reference keys of the methods stored before the registry named them (the stored tensors apply).
OLD_KEYS = {"sinusoidal": "ape", "sinusoidal+shape": "shape", "shaw": "rpe", "gru": "rnn", "gru+shaw": "rr"}
#: Reference key -> position name: every method of the registry, per model (tests/helpers/methods.py).
SEQ2SEQ = {OLD_KEYS.get(n, n): n for n in sequence_methods(causal=False)}
LM = {OLD_KEYS.get(n, n): n for n in sequence_methods(causal=True)}


def _params(name: str) -> dict:
    """Shaw with small k (clipping exercised), randomized positions sequential; others at defaults."""
    params = {"shaw": {"k": 2}} if uses(name, "shaw") else {}
    return {**params, **({"randomized": params_for(name)["randomized"]} if uses(name, "randomized") else {})}


def _inputs() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Fixed right-padded source ``(2, 6)`` and target ``(2, 4)`` with masks."""
    g = torch.Generator().manual_seed(19)
    src_mask = torch.arange(6)[None] < torch.tensor([6, 4])[:, None]
    tgt_mask = torch.arange(4)[None] < torch.tensor([4, 3])[:, None]
    src = torch.randint(4, V, (2, 6), generator=g).masked_fill(~src_mask, PAD)
    tgt = torch.randint(4, V, (2, 4), generator=g).masked_fill(~tgt_mask, PAD)
    tgt[:, 0] = BOS
    return src, src_mask, tgt, tgt_mask


def _ids(hyps: list[list[int]]) -> Tensor:
    """Token lists → one padded ``(B, T)`` long tensor (−1 after each end) for exact comparison."""
    width = max([len(h) for h in hyps] + [1])
    return torch.tensor([h + [-1] * (width - len(h)) for h in hyps], dtype=torch.long)


def _translate(model: torch.nn.Module) -> dict[str, Tensor]:
    src, src_mask, tgt, tgt_mask = _inputs()
    with torch.no_grad():
        out = {"logits": model(src, src_mask, tgt, tgt_mask)}
    kw = dict(max_len_a=1.0, max_len_b=3)
    out["greedy"] = _ids(greedy_search(model, src, src_mask, BOS, EOS, **kw))
    out["fixed"] = _ids(greedy_search(model, src, src_mask, BOS, EOS, cuda_graph=True, **kw))
    beams = beam_search(model, src, src_mask, BOS, EOS, beam=4, n_best=2, **kw)
    out["beam4"] = _ids([h.tokens for sent in beams for h in sent])
    out["beam4_scores"] = torch.tensor([h.score for sent in beams for h in sent], dtype=torch.float64)
    return out


def seq2seq_outputs(key: str) -> dict[str, Tensor]:
    torch.manual_seed(0)
    name = SEQ2SEQ[key]
    cfg = tiny_config(name, vocab=V, position_params=_params(name), norm="pre" if key == "rope" else "post")
    return _translate(Seq2SeqTransformer(cfg, pad_id=PAD).eval())


def rnn_nmt_outputs() -> dict[str, Tensor]:
    torch.manual_seed(0)
    cfg = from_dict(RNNConfig, {"hidden": 16, "encoder_layers": 1, "decoder_layers": 2, "dropout": 0.0, "vocab_size": V})
    return _translate(RNNNMT(cfg, pad_id=PAD).eval())


def lm_outputs(key: str) -> dict[str, Tensor]:
    torch.manual_seed(0)
    cfg = from_dict(LMConfig, {"layers": 2, "d_model": 32, "heads": 4, "d_ff": 64, "vocab_size": V,
                               "position": {"name": LM[key], **_params(LM[key])}})
    model = DecoderLM(cfg, pad_id=PAD).eval()
    _, _, tokens, mask = _inputs()
    with torch.no_grad():
        full = model(tokens, mask)
        state = model.init_state(2)
        steps = torch.stack([model.step(tokens[:, t], state) for t in range(tokens.shape[1])], 1)
        greedy, state, tok = [], model.init_state(2, horizon=5), tokens[:, 0]
        for _ in range(5):
            tok = model.step(tok, state).argmax(-1)
            greedy.append(tok)
    return {"logits": full, "steps": steps, "greedy": torch.stack(greedy, 1)}


def all_outputs() -> dict[str, Tensor]:
    """Every reference tensor, keyed ``model/method/output``."""
    out: dict[str, Tensor] = {}
    for name in SEQ2SEQ:
        out.update({f"seq2seq/{name}/{k}": v for k, v in seq2seq_outputs(name).items()})
    out.update({f"rnn-nmt/-/{k}": v for k, v in rnn_nmt_outputs().items()})
    for name in LM:
        out.update({f"lm/{name}/{k}": v for k, v in lm_outputs(name).items()})
    return out


def processor() -> str:
    """The CPU model that computes the outputs (``model name`` of /proc/cpuinfo, else platform's)."""
    import platform

    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def _written_on() -> str:
    from safetensors import safe_open

    with safe_open(str(DATA), "pt") as f:
        return (f.metadata() or {}).get("processor", "")


@pytest.fixture(scope="module")
def reference() -> dict[str, Tensor]:
    return load_file(str(DATA))


def _check(reference: dict[str, Tensor], prefix: str, got: dict[str, Tensor]) -> None:
    same_cpu = _written_on() == processor()
    for key, value in got.items():
        assert f"{prefix}/{key}" in reference, (f"no stored reference for {prefix} (a new method?): "
                                                "python -m tests.models.test_bit_identical --add")
        want = reference[f"{prefix}/{key}"]
        assert value.dtype == want.dtype
        if same_cpu or not value.is_floating_point():  # tokens are equal on every processor
            assert torch.equal(value, want), f"{prefix}/{key} is not bit-identical"
        else:
            torch.testing.assert_close(value, want, rtol=1e-5, atol=1e-5, msg=f"{prefix}/{key} (written on {_written_on()!r})")


@pytest.mark.parametrize("name", list(SEQ2SEQ))
def test_seq2seq_bit_identical(reference: dict[str, Tensor], name: str) -> None:
    _check(reference, f"seq2seq/{name}", seq2seq_outputs(name))


def test_rnn_nmt_bit_identical(reference: dict[str, Tensor]) -> None:
    _check(reference, "rnn-nmt/-", rnn_nmt_outputs())


@pytest.mark.parametrize("name", list(LM))
def test_lm_bit_identical(reference: dict[str, Tensor], name: str) -> None:
    _check(reference, f"lm/{name}", lm_outputs(name))


def test_reference_covers_every_case(reference: dict[str, Tensor]) -> None:
    assert {k.rsplit("/", 1)[0] for k in reference} == (
        {f"seq2seq/{n}" for n in SEQ2SEQ} | {"rnn-nmt/-"} | {f"lm/{n}" for n in LM})


if __name__ == "__main__":  # regenerate (or --add the missing) references, one intra-op thread as under pytest
    import sys

    torch.set_num_threads(1)
    new = {k: v.contiguous() for k, v in all_outputs().items()}
    add = "--add" in sys.argv[1:] and DATA.is_file()
    if add and _written_on() != processor():
        raise SystemExit(f"the reference was written on {_written_on()!r}; add to it on that processor")
    kept = load_file(str(DATA)) if add else {}
    save_file({**new, **kept}, str(DATA), metadata={"processor": processor()})
    print(f"wrote {DATA}: {len(set(new) - set(kept))} new entries, {len(kept)} kept")
