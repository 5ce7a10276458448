"""What the analyses read of a grid: the :class:`GridView` protocol and the names of what a grid's
runs carry.

Each analysis entry (analysis/registry.py) says what it needs of the runs (``Analysis.needs``,
names below); a task says what its runs carry (its RunSpec's ``carries``) and its report builds a
view of them. An analysis fits a task's grids when the task's runs carry everything it needs, and
then reads them only through this protocol, so it runs on the grids of any task that does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from torch import nn

#: The test split: its sources and references as text, and their lengths in the runs' units.
TEST_SET = "test_set"
#: Each run's decoded test outputs as text (the scored beam's, and greedy ones where decoded).
OUTPUTS = "outputs"
#: The training split the runs were trained on: its texts and their lengths.
TRAINING_DATA = "training_data"
#: Each run's trained sequence-to-sequence model, the tokenizer that feeds it, and its decoding.
MODELS = "models"
#: Each run's training logs (``train.csv``, ``valid.csv``), its parameter count and its device.
LOGS = "logs"
#: The members of :class:`GridView` that every view has.
ALWAYS = ("carries", "setting", "methods", "baseline", "seeds")
#: What each name promises: the members of :class:`GridView` a view whose runs carry it provides.
MEMBERS: dict[str, tuple[str, ...]] = {
    TEST_SET: ("src", "ref", "lengths"),
    OUTPUTS: ("hyps", "hyps_by_seed"),
    TRAINING_DATA: ("train_lengths", "train_max_target", "group_size", "training_texts"),
    MODELS: ("tok", "model", "models", "pairs", "decoder"),
    LOGS: ("run_dir", "device", "params"),
}
#: Every name above, in this order.
CARRIED = tuple(MEMBERS)


class TokenIds(Protocol):
    """The tokenizer of a view's runs, as the analyses of models use it."""

    bos_id: int
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS)."""
        ...


class GridView(Protocol):
    """The runs of one setting of a grid for some of its seeds, as the analyses read them.

    Every view names its ``setting``, ``methods`` (grid order), ``baseline`` and ``seeds``; the
    other members come in groups, one per name of what runs carry (:data:`MEMBERS`), and a view
    provides the groups of its ``carries``. Text is pooled over the seeds: :attr:`src`/:attr:`ref` repeat the
    test set once per seed and :meth:`hyps` concatenates the seeds' outputs in that order.
    Members that read models read the view's first seed (an analysis of models runs on
    one-seed views).
    """

    #: What the view's runs carry (names of this module).
    carries: frozenset[str]
    setting: str
    methods: list[str]
    baseline: str
    seeds: list[int]

    # TEST_SET
    src: list[str]
    ref: list[str]

    def lengths(self, texts: list[str]) -> list[int]:
        """Length of each text in the units the runs read (subwords)."""
        ...

    # OUTPUTS
    def hyps(self, method: str) -> list[str]:
        """Test outputs of ``method``, every seed of the view in order (as :attr:`src`)."""
        ...

    def hyps_by_seed(self, method: str, greedy: bool = False) -> list[list[str]]:
        """Test outputs of ``method``, one list per seed: the scored ones, or with ``greedy``
        the greedy decoding's (a one-line ConfigError where the runs have none)."""
        ...

    # TRAINING_DATA
    @property
    def train_lengths(self) -> list[int]:
        """Source lengths of the training split (both bounds of what the runs saw)."""
        ...

    @property
    def train_max_target(self) -> int:
        """Length of the longest training target (tokens)."""
        ...

    @property
    def group_size(self) -> int:
        """Sentences per ``<sep>``-joined group of the training data (SHAPE's INTERPOLATE)."""
        ...

    def training_texts(self) -> tuple[list[str], list[str]]:
        """The training split's sources and targets, in corpus order."""
        ...

    # MODELS
    @property
    def tok(self) -> TokenIds:
        """The tokenizer every run of the view shares."""
        ...

    def model(self, method: str) -> nn.Module:
        """The trained model of ``method``."""
        ...

    def models(self) -> dict[str, nn.Module]:
        """Every method's trained model."""
        ...

    def pairs(self, src: list[str], tgt: list[str], method: str) -> list[tuple[list[int], list[int]]]:
        """(source ids, target ids) in the input format ``method`` was trained with."""
        ...

    def decoder(self, method: str) -> Callable[[list[str]], list[str]]:
        """Lines → outputs of ``method``'s model with its run's own decoding settings."""
        ...

    # LOGS
    def run_dir(self, method: str) -> Path:
        """``method``'s run directory (its training logs)."""
        ...

    def device(self, method: str) -> str:
        """The device ``method``'s run trained on."""
        ...

    def params(self, method: str) -> int:
        """``method``'s parameter count."""
        ...
