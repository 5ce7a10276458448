"""A trained encoder–decoder loaded to decode (:class:`LoadedRun`), whether its sources carry a
BOS (:func:`source_bos`) and the length penalty its reported scores were decoded with
(:func:`tuned_alpha`): what ``posenc translate``, ``posenc export`` and a task's scoring share.

The task that trained the run loads it (translation: :func:`posenc.tasks.translation.load.load_run`);
what decodes or exports it needs only this.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from posenc.data.spm import Tokenizer
from posenc.errors import ConfigError


def source_bos(cfg: Any) -> bool:
    """Whether a run's sources carry a BOS (CAPE §5.3), from its position config.

    Args:
        cfg: the run config (its ``model_section`` names the section of the model it trains).

    Returns:
        True when the model's position method needs a source BOS.
    """
    position = getattr(getattr(cfg, cfg.model_section), "position", None)
    return bool(position is not None and position.needs_source_bos)


@dataclass
class LoadedRun:
    """A trained run ready to decode.

    Attributes:
        cfg: its run config (``decode``, ``data.max_source_len``, ``out_dir``, ``prepared_dir``, ``arch``).
        model: the model with the checkpoint's weights, in eval mode.
        tokenizer: the run's vocabulary.
        checkpoint: the checkpoint its weights came from.
        run_dir: the run directory (default: ``cfg.out_dir``).
        confine: read and write nothing outside the run directory except what the caller names (the CLI).
    """

    cfg: Any
    model: nn.Module
    tokenizer: Tokenizer
    checkpoint: Path
    run_dir: Path | None = None
    confine: bool = False

    @property
    def prepend_src_bos(self) -> bool:
        """Whether its sources carry a BOS (:func:`source_bos`)."""
        return source_bos(self.cfg)

    @property
    def root(self) -> Path:
        """The run directory."""
        return self.run_dir if self.run_dir is not None else Path(self.cfg.out_dir)


def tuned_alpha(run_dir: str | Path, remedy: str = "pass --length-penalty A") -> float | None:
    """The α a run's reported BLEU was decoded with when its experiment tuned α: results.json's
    ``length_penalty.chosen``.

    Args:
        run_dir: the run directory.
        remedy: what the calling command lets the user do about a bad record (ends the error).

    Returns:
        The α, or None when the run has no results.json or did not tune α.

    Raises:
        ConfigError: one line, for a results.json that is not a JSON object or a chosen α that is
            not a number >= 0.
    """
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid JSON ({err}); {remedy}") from None
    tuning = data.get("length_penalty") if isinstance(data, dict) else None
    if not isinstance(tuning, dict) or "chosen" not in tuning:
        return None
    chosen = tuning["chosen"]
    if isinstance(chosen, bool) or not isinstance(chosen, (int, float)) or not 0 <= chosen < math.inf:
        raise ConfigError(f"{path}: length_penalty.chosen must be a finite number >= 0, got {chosen!r}; {remedy}")
    return float(chosen)
