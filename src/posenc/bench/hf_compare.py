"""``python -m posenc.bench.hf_compare``: posenc (APE) against Hugging Face MarianMT, side by side.

Shape legend: B batch, S source length, T target length, V vocabulary, D model width.

Same device, model dimensions, synthetic batches (:func:`posenc.bench.core.synthetic_batch`),
precision (bf16 autocast on CUDA, fp32 on CPU) and optimizer (:class:`posenc.bench.core.TrainStep`'s
Adam drives both models, through :class:`MarianSeq2Seq`). Training steps are timed in interleaved
rounds and paired (:func:`~posenc.bench.core.interleaved`, :func:`~posenc.bench.core.paired_ratio`);
so is beam-K decoding: posenc's :func:`~posenc.decoding.beam_search` (static KV cache) against
Marian's ``generate(num_beams=K)`` (Hugging Face's own KV cache), both forced to produce exactly
``S`` tokens + EOS per sentence (posenc: EOS suppressed until the length limit ``1.0·S``; Marian:
``min_new_tokens = max_new_tokens = S + 1``), i.e. ``S + 1`` decoder steps each.

The MarianConfig mirrors posenc's preset (layers, D, heads, d_ff, vocabulary, ReLU, dropout 0.1
also after the FFN activation as in posenc's FeedForward, no attention dropout, post-LN with no
final LayerNorm, embeddings scaled by √D, sinusoidal positions, one embedding table shared by
encoder, decoder and output projection). Known differences, none of them trainable:

* Marian keeps its sinusoidal table as a frozen ``(max_positions, D)`` parameter per stack (posenc
  computes PE on the fly) and lays out sin/cos as halves instead of interleaved (a permutation);
* Marian adds a zero ``final_logits_bias`` buffer ``(1, V)`` to the logits;
* Marian's attention modules are HF's ``MarianAttention`` (SDPA by default), posenc's its own.

The trainable parameter counts are equal, and :func:`load_posenc_weights` copies posenc's weights
(and its interleaved PE into Marian's tables), after which both compute the same logits (tested):
the two systems time the very same function.
fairseq and OpenNMT-py are not compared: they are not installable in this environment.


Relation to ``python -m posenc.bench.peers``: that script runs MarianMT (and OpenNMT-py, fairseq) in their
own virtual environments installed from PyPI, each a separate process with its own random
weights (CPU results in docs/performance.md). This module is the in-process variant for a
machine where ``transformers`` is already installed and nothing can be downloaded (the GPU
machine): same process, posenc's weights copied into Marian, so both time the same function."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor, nn

from posenc.bench.core import (
    BOS,
    EOS,
    TrainStep,
    autocast,
    batch_size,
    interleaved,
    paired_ratio,
    sync,
    synthetic_batch,
)
from posenc.bench.report import write_json
from posenc.bench.runner import NoEos, decode_runner
from posenc.errors import ConfigError, PosencError
from posenc.models.config import PRESETS, ModelConfig
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.runs.ownership import check_user_output

PAD = 0
SYSTEMS = ("posenc", "marian")
#: Keys of every record written by ``--out``.
RECORD_KEYS = ("kind", "method", "length", "batch", "tokens_per_s", "ratio_to_posenc", "seconds", "reps", "precision",
               "device")


@dataclass
class CompareConfig:
    preset: str = "transformer-base"
    vocab: int = 8000
    device: str = "cpu"
    lengths: list[int] = field(default_factory=lambda: [32, 128])
    batch_tokens: int = 8192  # per side; B = batch_tokens // L sentences of length L
    reps: int = 10
    warmup: int = 2
    decode_batch: int = 64
    decode_len: int = 32
    decode_reps: int = 3
    beam: int = 4
    seed: int = 0
    model: dict[str, Any] = field(default_factory=dict)  # extra ModelConfig overrides (tests: tiny dims)

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigError(f"hf_compare: unknown preset {self.preset!r} (known: {', '.join(PRESETS)})")
        if not self.lengths or min(self.lengths) < 2:
            raise ConfigError(f"hf_compare: lengths must be >= 2, got {self.lengths}")
        if (min(self.reps, self.batch_tokens, self.decode_batch, self.decode_len, self.decode_reps, self.beam) < 1
                or self.warmup < 0):
            raise ConfigError("hf_compare: reps, batch_tokens, decode_batch, decode_len, decode_reps, beam >= 1 "
                              "and warmup >= 0")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"hf_compare: --device must be cpu or cuda[:N], got {self.device!r}")

    @property
    def max_positions(self) -> int:
        """Marian's position table: the longest training length or decoded output (S + 1)."""
        return max(max(self.lengths), self.decode_len + 1) + 2

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_preset(self.preset, vocab_size=self.vocab, position={"name": "ape"}, **self.model)


def marian_config(mcfg: ModelConfig, max_positions: int) -> Any:
    """A ``MarianConfig`` with posenc's dimensions (see the module doc for the differences)."""
    from transformers import MarianConfig

    if mcfg.norm != "post" or mcfg.share_embeddings != "all" or mcfg.attention_dropout:
        raise ConfigError("hf_compare: Marian is post-LN with all embeddings shared and no attention dropout")
    return MarianConfig(
        vocab_size=mcfg.vocab_size, decoder_vocab_size=mcfg.vocab_size, d_model=mcfg.d_model,
        encoder_layers=mcfg.encoder_layers, decoder_layers=mcfg.decoder_layers,
        encoder_attention_heads=mcfg.heads, decoder_attention_heads=mcfg.heads,
        encoder_ffn_dim=mcfg.d_ff, decoder_ffn_dim=mcfg.d_ff, activation_function=mcfg.activation,
        dropout=mcfg.dropout, activation_dropout=mcfg.dropout, attention_dropout=0.0,
        max_position_embeddings=max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=None,
    )


class MarianSeq2Seq(nn.Module):
    """posenc's training interface over a ``MarianMTModel``: ``(src, src_mask, tgt_in, tgt_mask)`` → logits
    ``(B, T, V)``."""

    def __init__(self, marian: nn.Module) -> None:
        super().__init__()
        self.marian = marian

    @property
    def width(self) -> int:
        """d_model (the bench's precision rule reads it)."""
        return int(self.marian.config.d_model)

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor) -> Tensor:
        out = self.marian(input_ids=src, attention_mask=src_mask.long(), decoder_input_ids=tgt_in,
                          decoder_attention_mask=tgt_mask.long(), use_cache=False)
        return out.logits


def _layer_pairs(posenc: Seq2SeqTransformer, marian: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """(posenc module, Marian module) pairs with the same parameters, layer by layer."""
    pairs: list[tuple[nn.Module, nn.Module]] = []
    for ours, theirs in zip(posenc.encoder.layers, marian.model.encoder.layers):
        pairs += [(ours.self_attn, theirs.self_attn), (ours.ff.fc1, theirs.fc1), (ours.ff.fc2, theirs.fc2),
                  (ours.res1.norm, theirs.self_attn_layer_norm), (ours.res2.norm, theirs.final_layer_norm)]
    for ours, theirs in zip(posenc.decoder.layers, marian.model.decoder.layers):
        pairs += [(ours.self_attn, theirs.self_attn), (ours.cross_attn, theirs.encoder_attn),
                  (ours.ff.fc1, theirs.fc1), (ours.ff.fc2, theirs.fc2), (ours.res[0].norm, theirs.self_attn_layer_norm),
                  (ours.res[1].norm, theirs.encoder_attn_layer_norm), (ours.res[2].norm, theirs.final_layer_norm)]
    return pairs


@torch.no_grad()
def load_posenc_weights(marian: nn.Module, posenc: Seq2SeqTransformer) -> None:
    """Make ``marian`` compute posenc's function: copy every weight, and posenc's interleaved
    sin/cos PE (:func:`~posenc.positions.sinusoidal.sinusoidal_embedding`) into Marian's frozen tables."""
    from posenc.positions.sinusoidal import sinusoidal_embedding

    if (len(posenc.encoder.layers) != len(marian.model.encoder.layers)
            or len(posenc.decoder.layers) != len(marian.model.decoder.layers)):
        raise ConfigError("hf_compare: posenc and Marian have different numbers of layers")
    marian.model.shared.weight.copy_(posenc.src_embed.weight)
    for ours, theirs in _layer_pairs(posenc, marian):
        theirs.load_state_dict(ours.state_dict())
    for stack in (marian.model.encoder, marian.model.decoder):
        table = stack.embed_positions.weight
        table.copy_(sinusoidal_embedding(torch.arange(table.shape[0], device=table.device), table.shape[1]))


def build_models(cfg: CompareConfig) -> dict[str, nn.Module]:
    """Both systems on ``cfg.device`` with identical weights; keys are :data:`SYSTEMS`."""
    from transformers import MarianMTModel

    mcfg = cfg.model_config()
    torch.manual_seed(cfg.seed)
    posenc = Seq2SeqTransformer(mcfg, pad_id=PAD).to(cfg.device)
    marian = MarianMTModel(marian_config(mcfg, cfg.max_positions)).to(cfg.device)
    load_posenc_weights(marian, posenc)
    return {"posenc": posenc, "marian": MarianSeq2Seq(marian)}


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Distinct parameters (tied ones once): trainable and frozen element counts."""
    seen: dict[int, nn.Parameter] = {id(p): p for p in model.parameters()}
    return {
        "trainable": sum(p.numel() for p in seen.values() if p.requires_grad),
        "frozen": sum(p.numel() for p in seen.values() if not p.requires_grad),
    }


def _record(kind: str, system: str, length: int, batch: int, tokens: int, times: dict[str, list[float]],
            cfg: CompareConfig) -> dict[str, Any]:
    sec = statistics.median(times[system])
    return {
        "kind": kind, "method": system, "length": length, "batch": batch, "tokens_per_s": tokens / sec,
        "ratio_to_posenc": paired_ratio(times, system, ref="posenc"), "seconds": sec, "reps": len(times[system]),
        "precision": "bf16" if cfg.device.startswith("cuda") else "fp32", "device": cfg.device,
    }


def train_compare(cfg: CompareConfig, length: int, models: dict[str, nn.Module]) -> list[dict[str, Any]]:
    """Interleaved training steps of both systems on one synthetic batch of length ``length``."""
    b = batch_size(length, cfg.batch_tokens)
    batch = synthetic_batch(b, length, cfg.vocab, cfg.device, cfg.seed)
    steps = {name: TrainStep(models[name], batch, cfg.device) for name in SYSTEMS}
    times = interleaved(steps, cfg.reps, cfg.warmup)
    records = []
    for name in SYSTEMS:
        rec = _record("train", name, length, b, steps[name].tokens, times, cfg)
        rec["params"] = parameter_counts(models[name])
        records.append(rec)
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return records


def marian_decoder(marian: nn.Module, src: Tensor, mask: Tensor, beam: int, device: str) -> Callable[[], float]:
    """A timed ``generate(num_beams=beam)`` of exactly ``S + 1`` tokens per sentence (see the module doc)."""
    steps = src.shape[1] + 1

    def run() -> float:
        sync(device)
        start = time.perf_counter()
        with torch.inference_mode(), autocast(device):
            marian.generate(input_ids=src, attention_mask=mask.long(), num_beams=beam, num_return_sequences=1,
                            do_sample=False, max_new_tokens=steps, min_new_tokens=steps, length_penalty=0.6,
                            early_stopping=False)
        sync(device)
        return time.perf_counter() - start

    return run


def decode_compare(cfg: CompareConfig, models: dict[str, nn.Module]) -> list[dict[str, Any]]:
    """Beam-K sentences/s of both systems on one random source batch, interleaved rounds."""
    batch = synthetic_batch(cfg.decode_batch, cfg.decode_len, cfg.vocab, cfg.device, cfg.seed + 1)
    src, mask = batch["src"], batch["src_mask"]
    posenc, marian = models["posenc"].eval(), models["marian"].marian.eval()
    runs = {
        "posenc": decode_runner(f"beam{cfg.beam}", NoEos(posenc), src, mask, cfg.beam, cfg.device,
                                cfg.device.startswith("cuda")),
        "marian": marian_decoder(marian, src, mask, cfg.beam, cfg.device),
    }
    times = interleaved(runs, cfg.decode_reps, 1)
    records = []
    for name in SYSTEMS:
        rec = _record(f"beam{cfg.beam}", name, cfg.decode_len, cfg.decode_batch, cfg.decode_batch * cfg.decode_len,
                      times, cfg)
        rec["sentences_per_s"] = cfg.decode_batch / rec["seconds"]
        rec["beam"] = cfg.beam
        records.append(rec)
    return records


def run(cfg: CompareConfig, log: Callable[[str], None] = lambda _: None) -> list[dict[str, Any]]:
    """Training at every length, then beam decoding; the models are built once."""
    models = build_models(cfg)
    records: list[dict[str, Any]] = []
    for length in cfg.lengths:
        records += train_compare(cfg, length, models)
        log(f"train L={length} done")
    records += decode_compare(cfg, models)
    return records


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: per kind and length, tokens/s of both systems and posenc's speed-up over Marian."""
    lines = ["| kind | length | batch | posenc tok/s | Marian tok/s | Marian ×posenc | posenc ×Marian |",
             "|---|---|---|---|---|---|---|"]
    by_key = {(r["kind"], r["length"], r["method"]): r for r in records}
    for kind, length in dict.fromkeys((r["kind"], r["length"]) for r in records):
        p, m = by_key[(kind, length, "posenc")], by_key[(kind, length, "marian")]
        lines.append(f"| {kind} | {length} | {p['batch']} | {p['tokens_per_s']:.0f} | {m['tokens_per_s']:.0f} | "
                     f"{m['ratio_to_posenc']:.3f} | {1.0 / m['ratio_to_posenc']:.3f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> tuple[CompareConfig, str | None]:
    """The comparison config and the ``--out`` path."""
    p = argparse.ArgumentParser(prog="python -m posenc.bench.hf_compare", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (cuda: bf16 autocast)")
    p.add_argument("--preset", default="transformer-base", help="posenc model preset mirrored by the MarianConfig")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--lengths", default="32,128", help="comma-separated training lengths (source = target)")
    p.add_argument("--batch-tokens", type=int, default=8192, help="tokens per side per training batch")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--decode-len", type=int, default=32, help="source length = output length (+ EOS)")
    p.add_argument("--decode-reps", type=int, default=3)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--model", default="{}", help='JSON ModelConfig overrides, e.g. \'{"d_model": 64}\'')
    p.add_argument("--out", help="write the records as a JSON list to this file")
    a = p.parse_args(argv)
    try:
        lengths, model = [int(t) for t in a.lengths.split(",") if t.strip()], json.loads(a.model)
    except ValueError as err:
        raise ConfigError(f"hf_compare: bad --lengths or --model: {err}") from None
    if not isinstance(model, dict):
        raise ConfigError(f"hf_compare: --model must be a JSON object, got {a.model!r}")
    cfg = CompareConfig(a.preset, a.vocab, a.device, lengths, a.batch_tokens, a.reps, a.warmup, a.decode_batch,
                        a.decode_len, a.decode_reps, a.beam, model=model)
    return cfg, a.out


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, out = parse_args(argv)
        if cfg.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"--device {cfg.device}: CUDA is not available on this machine")
        if out:
            check_user_output(out, "--out")  # before measuring: the results are never lost at the end
        log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
        log(f"hf_compare: torch {torch.__version__}, "
            f"{torch.cuda.get_device_name() if cfg.device.startswith('cuda') else 'cpu'}")
        records = run(cfg, log)
        if out:
            write_json(records, out)
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
