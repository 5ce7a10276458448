"""Load a trained run and translate/score its data splits.

``load_run(run_dir, checkpoint)`` rebuilds the model from ``config.yaml`` and loads weights
from ``checkpoints/average`` (if present), the latest checkpoint, or a given path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.config import from_dict, load_yaml
from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines
from posenc.decoding.translate import translate_file
from posenc.errors import CheckpointError
from posenc.evaluation.metrics import corpus_scores
from posenc.pipeline.config import DecodeConfig, RunConfig
from posenc.pipeline.train import build_model, source_bos
from posenc.training import checkpoint as ck


@dataclass
class LoadedRun:
    cfg: RunConfig
    model: nn.Module
    tokenizer: Tokenizer
    checkpoint: Path

    @property
    def prepend_src_bos(self) -> bool:
        return source_bos(self.model)


def find_checkpoint(run_dir: Path, which: str = "auto") -> Path:
    """``auto``: averaged if present else latest; ``latest``; ``average``; or a path."""
    ckpt_dir = run_dir / "checkpoints"
    if which in ("auto", "average") and (ckpt_dir / "average").is_dir():
        return ckpt_dir / "average"
    if which in ("auto", "latest"):
        latest = ck.latest_checkpoint(ckpt_dir)
        if latest is None:
            raise CheckpointError(f"{run_dir}: no checkpoints (train the run first)")
        return latest
    if which == "average":
        raise CheckpointError(f"{run_dir}: no averaged checkpoint (set train.average_last or run `posenc average`)")
    return Path(which)


def load_run(run_dir: str | Path, checkpoint: str = "auto", device: str = "cpu") -> LoadedRun:
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise CheckpointError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = from_dict(RunConfig, load_yaml(run_dir / "config.yaml"))
    tok = Tokenizer.from_file(run_dir / "spm.model")
    model = build_model(cfg, tok.pad_id)
    path = find_checkpoint(run_dir, checkpoint)
    ck.restore_model(model, ck.load_checkpoint(path, with_optimizer=False))
    return LoadedRun(cfg, model.to(device).eval(), tok, path)


def decode_options(dc: DecodeConfig, run: LoadedRun) -> dict[str, Any]:
    return dict(
        beam=dc.beam, length_penalty=dc.length_penalty, max_len_a=dc.max_len_a, max_len_b=dc.max_len_b,
        batch_tokens=dc.batch_tokens, max_source_len=run.cfg.data.max_source_len,
        prepend_src_bos=run.prepend_src_bos,
    )


def translate_split(run: LoadedRun, split: str, decode: DecodeConfig | None = None) -> dict[str, Any]:
    """Translate ``split`` of the run's prepared data; write hypotheses and scores; return scores."""
    out = Path(run.cfg.out_dir)
    data = Path(run.cfg.prepared_dir)
    dc = decode or run.cfg.decode
    hyp = out / "translations" / f"{split}.beam{dc.beam}.hyp"
    hyp.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        translate_file(run.model, run.tokenizer, data / f"{split}.src", hyp, **decode_options(dc, run))
    scores = corpus_scores(read_lines(hyp), read_lines(data / f"{split}.tgt"), hyp_name=str(hyp), ref_name=f"{split}.tgt")
    keep = {k: scores[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature", "lines")}
    keep.update(split=split, beam=dc.beam, hyp=str(hyp), checkpoint=str(run.checkpoint))
    (out / "translations" / f"{split}.beam{dc.beam}.json").write_text(json.dumps(keep, indent=2), encoding="utf-8")
    return keep
