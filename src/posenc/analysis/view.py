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
        """Token ids of a text.

        Args:
            text: one sentence.

        Returns:
            Its token ids, without BOS/EOS.
        """
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
        """Length of each text in the units the runs read.

        Args:
            texts: sentences (sources, references or outputs).

        Returns:
            One length (subwords) per text.
        """
        ...

    # OUTPUTS
    def hyps(self, method: str) -> list[str]:
        """Test outputs of one method, pooled over the seeds.

        Args:
            method: one of :attr:`methods`.

        Returns:
            Its outputs, every seed of the view in order (aligned with :attr:`src`).
        """
        ...

    def hyps_by_seed(self, method: str, greedy: bool = False) -> list[list[str]]:
        """Test outputs of one method, seed by seed.

        Args:
            method: one of :attr:`methods`.
            greedy: read the greedy decoding's outputs instead of the scored ones.

        Returns:
            One list of outputs per seed of the view, in :attr:`seeds` order.

        Raises:
            ConfigError: one line, with ``greedy`` where the runs have no greedy outputs.
        """
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
        """The training split's texts.

        Returns:
            ``(sources, targets)``, in corpus order.
        """
        ...

    # MODELS
    @property
    def tok(self) -> TokenIds:
        """The tokenizer every run of the view shares."""
        ...

    def model(self, method: str) -> nn.Module:
        """The trained model of one method (of the view's first seed).

        Args:
            method: one of :attr:`methods`.

        Returns:
            The model, as its run loaded it.
        """
        ...

    def models(self) -> dict[str, nn.Module]:
        """Every method's trained model (of the view's first seed).

        Returns:
            Method → its model, in :attr:`methods` order.
        """
        ...

    def pairs(self, src: list[str], tgt: list[str], method: str) -> list[tuple[list[int], list[int]]]:
        """Sentence pairs as ids, in the input format one method was trained with.

        Args:
            src: source sentences.
            tgt: target sentences, aligned with ``src``.
            method: one of :attr:`methods` (its source format, e.g. CAPE's source BOS).

        Returns:
            (source ids, target ids) per pair, without BOS/EOS on the target.
        """
        ...

    def decoder(self, method: str) -> Callable[[list[str]], list[str]]:
        """The translation function of one method's model, with its run's own decoding settings.

        Args:
            method: one of :attr:`methods`.

        Returns:
            A function from source lines to their outputs, one per line.
        """
        ...

    # LOGS
    def run_dir(self, method: str) -> Path:
        """The run directory of one method (its training logs).

        Args:
            method: one of :attr:`methods`.

        Returns:
            The directory (of the view's first seed).
        """
        ...

    def device(self, method: str) -> str:
        """The device one method's run trained on.

        Args:
            method: one of :attr:`methods`.

        Returns:
            The device as its run's results name it (with the GPU's name), ``unknown`` where they do not.
        """
        ...

    def params(self, method: str) -> int:
        """One method's parameter count.

        Args:
            method: one of :attr:`methods`.

        Returns:
            The number of its model's parameters.
        """
        ...
