"""A trained posenc translation run written as a CTranslate2 model (``posenc export``).

Shape legend: D model width, Dh head width, H heads, V vocabulary, T rows of a position table,
R = 2k+1 Shaw distance buckets (T5: its buckets).

:func:`export_run` writes the run's Transformer into CTranslate2's ``TransformerSpec`` through its
Python spec API (no converter of another toolkit): encoder and decoder layers, post- or pre-norm
as trained, embeddings scaled by √D (Vaswani et al. §3.4), shared embeddings and the tied output
projection. Each position method declares its own CTranslate2 form next to its code
(positions/base.py): an input method its position table (:meth:`InputPosition.ct2_table`: posenc's
interleaved sinusoid, the learned table, nothing), an attention method the spec keywords that switch
it on and its per-layer terms (:meth:`AttentionPosition.ct2_spec`/``ct2_layer``: Shaw's a^K, a^V,
T5's bias table, RoPE's interleaved rotary dimensions and NTK base), or ``ct2_refusal``, why it has
none, which the export refuses with in one line naming the method. An augmentation exports when its
inference positions are a constant integer shift of 0, 1, … (SHAPE's ``inference_offset``: the
table starts at that row); CAPE's scaled positions and randomized eval positions are refused.
An export is opened and translated with by :mod:`posenc.serving.exported`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from posenc.data.spm import Tokenizer
from posenc.decoding.loaded import LoadedRun, tuned_alpha
from posenc.errors import ConfigError
from posenc.files import atomic_write_text, new_dir_mode, replacement_mode
from posenc.models.attention import MultiHeadAttention
from posenc.models.seq2seq import Seq2SeqTransformer
from posenc.positions import registry
from posenc.runs.ownership import (
    EXPORT_MANIFEST,
    check_outside_posenc_dirs,
    check_target,
    write_marker,
)
from posenc.serving.validate import file_checksums

#: ``posenc export --quantization`` → CTranslate2's weight type (``bf16`` is an alias).
QUANTIZATIONS = {"float32": "float32", "int8": "int8", "bfloat16": "bfloat16", "bf16": "bfloat16"}
#: The marker kind of an export directory (runs/ownership.write_marker) and its description file.
EXPORT_KIND, EXPORT_INFO = "export", EXPORT_MANIFEST


def require_ctranslate2() -> ModuleType:
    """The ``ctranslate2`` module, or a one-line ConfigError naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError("the ctranslate2 engine needs the ctranslate2 package: pip install 'posenc[serve]'") from None
    return ctranslate2


# --------------------------------------------------------------------------- positions
def _exported(family: Mapping[str, registry.Entry]) -> str:
    """The registered methods of ``family`` that declare a CTranslate2 form, comma-separated."""
    return ", ".join(n for n in sorted(family) if getattr(family[n].builder, "ct2_refusal", "") is None)


def eval_offsets(model: Seq2SeqTransformer) -> tuple[int, int]:
    """Integer ``(c_src, c_tgt)`` with inference positions ``c + (0, 1, …)`` on each side, checked
    on sentences of different lengths; a ConfigError naming the augmentation when they are not
    (CAPE's scaled or mean-normalised positions, randomized eval positions)."""
    mask = torch.arange(9)[None, :] < torch.tensor([[4], [9]])  # (2, 9): lengths 4 and 9
    was = model.training
    model.eval()
    try:
        src, tgt = model.positions(mask, mask)
        steps = model.augment.decode_positions(9, mask.device)  # (1, 9) positions of decoding steps
    finally:
        model.train(was)
    base = torch.arange(9, dtype=src.dtype)
    shifts = [src - base, tgt - base, steps.to(src.dtype) - base]
    offsets = [s[mask if s.shape[0] == 2 else mask[1:]] for s in shifts]
    if not all(torch.equal(o, o[:1].expand_as(o)) and float(o[0]).is_integer() for o in offsets):
        name = model.cfg.position.methods.augment
        raise ConfigError(f"posenc export: position augmentation {name!r} changes inference positions "
                          "beyond a constant shift (no CTranslate2 position table expresses it)")
    if float(offsets[1][0]) != float(offsets[2][0]):
        raise ConfigError("posenc export: target positions of teacher forcing and decoding differ")
    return int(offsets[0][0]), int(offsets[1][0])


def check_exportable(run: LoadedRun) -> None:
    """One-line ConfigError for a run whose model has no exact CTranslate2 form."""
    model = run.model
    if not isinstance(model, Seq2SeqTransformer):
        raise ConfigError(f"posenc export: arch {run.cfg.arch!r} is not a Transformer; "
                          "CTranslate2's TransformerSpec cannot hold it")
    methods = model.cfg.position.methods
    for name, method in ((methods.input, model.encoder.input_pos), (methods.attention, model.encoder.attn_pos)):
        if method.ct2_refusal is not None:  # declared by the method (positions/*.py)
            raise ConfigError(f"posenc export: position method {name!r} ({method.ct2_refusal}) does not export to "
                              f"CTranslate2; exported: input {_exported(registry.INPUT)}, "
                              f"attention {_exported(registry.ATTENTION)}")
    adds_table = model.encoder.input_pos.ct2_table(1, 0) is not None
    if methods.attention is not None and adds_table:  # measured: CTranslate2 then drops the table
        raise ConfigError(f"posenc export: position {model.cfg.position.name!r} combines input {methods.input!r} with "
                          f"attention {methods.attention!r}; "
                          "a CTranslate2 spec with relative positions has no position table")
    if model.cfg.encoder_layers < 1:
        raise ConfigError("posenc export: a model without encoder layers has no CTranslate2 TransformerSpec")


# --------------------------------------------------------------------------- spec
def _np(t: Tensor) -> np.ndarray:
    """A float32 copy (never a view: CTranslate2's quantization rewrites its arrays in place, and a
    view would rewrite the live model's weights)."""
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec: Any, *layers: nn.Linear) -> None:
    """``spec.weight (ΣD_out, D_in)`` and ``bias`` from one or several (fused, in order) Linear layers."""
    spec.weight = _np(torch.cat([lin.weight for lin in layers]))
    spec.bias = _np(torch.cat([lin.bias for lin in layers]))


def _norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _self_attention(spec: Any, attn: MultiHeadAttention, norm: nn.LayerNorm, stack: nn.Module, layer: int) -> None:
    """Fused q/k/v, output projection, the sub-layer's LayerNorm and the attention method's terms of
    layer ``layer`` (:meth:`AttentionPosition.ct2_layer`: tables as float32 arrays, integers as int32)."""
    _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    _linear(spec.linear[1], attn.out_proj)
    _norm(spec.layer_norm, norm)
    for name, value in stack.attn_pos.ct2_layer(layer).items():
        setattr(spec, name, _np(value) if isinstance(value, Tensor) else np.int32(value))


def _ffn(spec: Any, layer: nn.Module, norm: nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, layer.ff.fc1)
    _linear(spec.linear_1, layer.ff.fc2)


def _encoder(spec: Any, model: Seq2SeqTransformer) -> None:
    for i, (ls, layer) in enumerate(zip(spec.layer, model.encoder.layers)):
        _self_attention(ls.self_attention, layer.self_attn, layer.res1.norm, model.encoder, i)
        _ffn(ls.ffn, layer, layer.res2.norm)


def _decoder(spec: Any, model: Seq2SeqTransformer) -> None:
    for i, (ls, layer) in enumerate(zip(spec.layer, model.decoder.layers)):
        _self_attention(ls.self_attention, layer.self_attn, layer.res[0].norm, model.decoder, i)
        cross = layer.cross_attn  # query, fused key/value (of the memory), output
        _linear(ls.attention.linear[0], cross.q_proj)
        _linear(ls.attention.linear[1], cross.k_proj, cross.v_proj)
        _linear(ls.attention.linear[2], cross.out_proj)
        _norm(ls.attention.layer_norm, layer.res[1].norm)
        _ffn(ls.ffn, layer, layer.res[2].norm)


def _stack_common(spec: Any, stack: nn.Module, table: Tensor | None) -> None:
    """Position table (absolute methods) and the final LayerNorm of a pre-norm stack."""
    if table is not None:
        spec.position_encodings.encodings = _np(table)
    if isinstance(stack.final_norm, nn.LayerNorm):
        _norm(spec.layer_norm, stack.final_norm)


def _position_table(stack: nn.Module, rows: int, offset: int, width: int) -> Tensor:
    """The input method's table ``(rows, D)`` from position ``offset`` (:meth:`InputPosition.ct2_table`);
    all zeros when the method adds nothing (CTranslate2 adds a sinusoid when no table is given)."""
    table = stack.input_pos.ct2_table(rows, offset)
    return torch.zeros(rows, width) if table is None else table


def position_rows(run: LoadedRun) -> int:
    """Rows of the exported position tables: the longest source and the longest output."""
    dc, longest = run.cfg.decode, run.cfg.data.max_source_len
    return max(longest, math.floor(dc.max_len_a * longest + dc.max_len_b) + 1) + 1


def _stack_specs(model: Seq2SeqTransformer, specs: ModuleType) -> tuple[Any, Any]:
    """Encoder and decoder specs, with the attention method's keywords
    (:meth:`AttentionPosition.ct2_spec`: relative terms or rotary q/k in every self-attention)."""
    cfg = model.cfg
    act = specs.Activation.GELU if cfg.activation == "gelu" else specs.Activation.RELU
    kw: dict[str, Any] = dict(pre_norm=cfg.norm == "pre", activation=act, **model.encoder.attn_pos.ct2_spec())
    return (specs.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, **kw),
            specs.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, **kw))


def build_spec(run: LoadedRun, ct2: ModuleType) -> Any:
    """The run's model as a filled ``ctranslate2.specs.TransformerSpec`` (vocabularies registered)."""
    check_exportable(run)
    model, specs = run.model, ct2.specs
    encoder, decoder = _stack_specs(model, specs)
    spec = specs.TransformerSpec(encoder, decoder)
    src_offset, tgt_offset = eval_offsets(model)
    rows = position_rows(run)
    for side, stack, offset in ((encoder, model.encoder, src_offset), (decoder, model.decoder, tgt_offset)):
        has_table = hasattr(side, "position_encodings")  # none with relative terms, nor in a rotary decoder
        _stack_common(side, stack, _position_table(stack, rows, offset, model.cfg.d_model) if has_table else None)
    _encoder(encoder, model)
    _decoder(decoder, model)
    encoder.embeddings[0].weight = _np(model.src_embed.weight)
    decoder.embeddings.weight = _np(model.tgt_embed.weight)
    decoder.projection.weight = _np(model.output.weight if model.output is not None else model.tgt_embed.weight)
    encoder.scale_embeddings = decoder.scale_embeddings = True  # × √D (Vaswani et al. §3.4)
    _vocabularies(spec, run.tokenizer)
    return spec


def _vocabularies(spec: Any, tok: Tokenizer) -> None:
    """The SentencePiece pieces as both vocabularies; special tokens by posenc's fixed ids."""
    pieces = tok.pieces
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token, spec.config.bos_token = pieces[tok.unk_id], pieces[tok.bos_id]
    spec.config.eos_token = pieces[tok.eos_id]
    spec.config.decoder_start_token = pieces[tok.bos_id]
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's


# --------------------------------------------------------------------------- export
def export_run(run: LoadedRun, out: str | Path, quantization: str = "float32") -> dict[str, Any]:
    """Write ``run`` as a CTranslate2 model into ``out`` (new, empty or an earlier export):
    ``model.bin``, ``config.json``, the vocabulary, ``spm.model`` and ``posenc_export.json`` (its
    decoding options, with the run's tuned α: :func:`export_alpha`, and the size and sha256 of
    the first three: :func:`~posenc.serving.validate.check_files`).
    Everything is built and saved in a temporary directory next to ``out`` first, so a refused or
    failing export leaves ``out`` as it was. Returns the description written."""
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    ct2, out = require_ctranslate2(), Path(out)
    check_outside_posenc_dirs(out, "--out")  # never into a run (its checkpoints/, translations/), data, ...
    check_target(out, EXPORT_KIND, "--out")
    spec = build_spec(run, ct2)
    spec.validate()
    spec.optimize(quantization=QUANTIZATIONS[quantization])
    info = _describe(run, ct2, QUANTIZATIONS[quantization])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, new_dir_mode())  # mkdtemp made it 0700; a new export follows the umask
        spec.save(str(tmp))
        shutil.copyfile(run.root / "spm.model", tmp / "spm.model")
        info["files"] = file_checksums(tmp)  # what translate checks before it trusts the export
        atomic_write_text(tmp / EXPORT_INFO, json.dumps(info, indent=1) + "\n")
        write_marker(tmp, EXPORT_KIND)
        _move_into(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _move_into(tmp: Path, out: Path) -> None:
    """``tmp``'s files into ``out``: a rename when ``out`` is new, else marker first, file by file
    (each keeping the mode of the file it replaces)."""
    if not out.exists():
        os.rename(tmp, out)
        return
    write_marker(out, EXPORT_KIND)
    for f in sorted(tmp.iterdir()):
        if (out / f.name).is_file():
            os.chmod(f, replacement_mode(out / f.name))
        os.replace(f, out / f.name)


def export_alpha(run: LoadedRun) -> tuple[float, str]:
    """The length penalty α an export decodes with by default, and where it was read: the α the
    run's experiment chose on validation (results.json ``length_penalty.chosen``, the α behind the
    run's reported BLEU, as ``posenc translate --run`` uses it), else the run's
    ``decode.length_penalty``."""
    tuned = tuned_alpha(run.root, remedy="fix it, or move it away to export with the run's decode.length_penalty")
    if tuned is None:
        return run.cfg.decode.length_penalty, "decode.length_penalty"
    return tuned, "results.json length_penalty.chosen"


def _describe(run: LoadedRun, ct2: ModuleType, quantization: str) -> dict[str, Any]:
    """What ``posenc translate --engine ctranslate2`` needs besides the model (the run's decoding
    options, with its tuned α, and source format), and where it came from."""
    dc = run.cfg.decode
    alpha, alpha_from = export_alpha(run)
    src_offset, tgt_offset = eval_offsets(run.model)
    return {
        "format": "ctranslate2", "ctranslate2_version": ct2.__version__, "quantization": quantization,
        "run": str(run.root.resolve()), "checkpoint": str(run.checkpoint), "position": run.model.cfg.position.name,
        "position_offsets": [src_offset, tgt_offset], "position_rows": position_rows(run),
        "max_source_len": run.cfg.data.max_source_len, "prepend_src_bos": run.prepend_src_bos,
        "decode": {"beam": dc.beam, "length_penalty": alpha, "max_len_a": dc.max_len_a,
                   "max_len_b": dc.max_len_b, "batch_tokens": dc.batch_tokens},
        "length_penalty_from": alpha_from,
    }
