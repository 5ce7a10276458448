"""``RunConfig``: everything one translation run needs (data, model, training, decoding)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from posenc.config import from_dict, require
from posenc.data.corpora import corpus_option_types
from posenc.decoding.config import DecodeConfig
from posenc.decoding.translate import MIN_SOURCE_LEN
from posenc.models.config import ModelConfig
from posenc.models.rnn_nmt import RNNConfig
from posenc.runs.spec import RunSpec
from posenc.tasks.translation.spec import SPEC
from posenc.training.config import TrainConfig

#: Architecture → the config section that configures its model.
ARCH_SECTIONS = {"transformer": "model", "rnn-nmt": "rnn"}
ARCHS = tuple(ARCH_SECTIONS)
SETTINGS = ("vanilla", "extrapolate", "interpolate")
LENGTH_SPLITS = ("", "short", "middle", "long")


@dataclass
class DataConfig:
    """Corpus, dataset setting (SHAPE §4 / Neishi §6) and subword vocabulary."""

    corpus: str = "bible"
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the corpus loader
    setting: str = "vanilla"
    max_len: int = 50  # EXTRAPOLATE: drop training pairs longer than this (subwords)
    group: int = 10  # INTERPOLATE: neighbouring pairs joined with <sep>
    length_split: str = ""  # Neishi's length-controlled training data: short | middle | long
    max_train_pairs: int = 0  # 0 = all; otherwise the first N after the setting is applied
    max_valid_pairs: int = 0
    max_test_pairs: int = 0
    vocab_size: int = 8000
    spm_type: str = "unigram"
    max_source_len: int = 1024  # longer inputs are an error at translation time
    max_train_len: int = 1024  # training pairs longer than this (subwords, either side) are dropped

    @staticmethod
    def _option_types(key: str, data: dict[str, Any]) -> dict[str, Any]:
        """Types of the corpus loader's keyword arguments, for typing command-line text: a
        parameter that accepts a string (or is unannotated) keeps the text as it was typed."""
        return corpus_option_types(str(data.get("corpus", "bible")))

    def __post_init__(self) -> None:
        require(self.setting in SETTINGS, f"data.setting must be one of {', '.join(SETTINGS)}, got {self.setting!r}")
        require(self.length_split in LENGTH_SPLITS,
                f"data.length_split must be short, middle, long or empty, got {self.length_split!r}")
        require(self.max_train_len >= 1, f"data.max_train_len must be >= 1, got {self.max_train_len}")
        require(self.max_source_len >= MIN_SOURCE_LEN, f"data.max_source_len must be >= {MIN_SOURCE_LEN} "
                f"(a source BOS where the run prepends one, and a token), got {self.max_source_len}")
        require(self.max_len >= 1, f"data.max_len must be >= 1, got {self.max_len}")
        require(self.group >= 2, f"data.group must be >= 2, got {self.group}")
        require(self.vocab_size >= 16, f"data.vocab_size must be >= 16, got {self.vocab_size}")
        require(self.spm_type in ("unigram", "bpe"), f"data.spm_type must be unigram or bpe, got {self.spm_type!r}")
        for name in ("max_train_pairs", "max_valid_pairs", "max_test_pairs"):
            require(getattr(self, name) >= 0, f"data.{name} must be >= 0")


@dataclass
class RunConfig:
    out_dir: str = "runs/default"
    data_dir: str = ""  # prepared data; default OUT_DIR/data (experiments share one per setting)
    data: DataConfig = field(default_factory=DataConfig)
    arch: str = "transformer"  # transformer | rnn-nmt (Neishi's RNN baseline, configured by ``rnn``)
    model: ModelConfig = field(default_factory=lambda: ModelConfig(preset="transformer-small"))
    rnn: RNNConfig = field(default_factory=RNNConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    #: What the task declares about its runs (runs/spec.py).
    run_spec: ClassVar[RunSpec] = SPEC

    def __post_init__(self) -> None:
        require(bool(self.out_dir), "out_dir must not be empty")
        require(self.arch in ARCHS, f"arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")

    @property
    def model_section(self) -> str:
        """Name of the section that configures the model of ``arch`` (``model`` or ``rnn``)."""
        return ARCH_SECTIONS[self.arch]

    @property
    def inactive_sections(self) -> tuple[str, ...]:
        """Model sections of the other architectures (not part of this run's fingerprint)."""
        return tuple(s for s in ARCH_SECTIONS.values() if s != self.model_section)

    @property
    def prepared_dir(self) -> str:
        return self.data_dir or f"{self.out_dir}/data"

    def stored_form(self) -> RunConfig:
        """This config as its run directory's config.yaml stores it: ``out_dir = "."`` and
        ``data_dir`` relative to the run directory when it lies inside it (absolute otherwise)."""
        out = Path(self.out_dir).resolve()
        data = Path(self.prepared_dir).resolve()
        if data == out / "data":
            data_dir = ""
        elif data.is_relative_to(out):
            data_dir = str(data.relative_to(out))
        else:
            data_dir = str(data)
        return replace(self, out_dir=".", data_dir=data_dir)


def located_config(data: dict[str, Any], run_dir: Path) -> RunConfig:
    """Inverse of :meth:`RunConfig.stored_form`: a stored config resolved against ``run_dir``."""
    cfg = from_dict(RunConfig, data)
    data_dir = cfg.data_dir
    if data_dir and not Path(data_dir).is_absolute():
        data_dir = str(run_dir / data_dir)
    return replace(cfg, out_dir=str(run_dir), data_dir=data_dir)
