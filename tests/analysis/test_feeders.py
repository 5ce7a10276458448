"""Every registered analysis runs on a hand-made grid through its feeder, reading only what its
entry says it needs of the runs; an analysis asked of runs that do not carry that is refused in
one line."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from posenc.analysis.registry import REGISTRY, fitting, fitting_names
from posenc.analysis.view import ALWAYS, CARRIED, LOGS, MEMBERS, MODELS, OUTPUTS, TEST_SET
from posenc.errors import ConfigError
from tests.helpers.tiny import assert_one_line_error, cli
from tests.helpers.training import BOS, EOS, PAD, tiny_model

#: Ten words and their targets (the toy corpus's reversal: words reversed and upper-cased), ids 4..23.
WORDS = "abcdefghij"
OPTIONS = {"bucket_width": 2, "bootstrap_samples": 20, "shift_sentences": 4, "shift_offsets": [0, 3],
           "stack_tokens": 12, "swapped_pairs": 40}


class WordIds:
    """A word-level tokenizer of :data:`WORDS` and their upper-case forms (any other word: 1)."""

    bos_id, eos_id, pad_id = BOS, EOS, PAD

    def encode(self, text: str) -> list[int]:
        return [4 + WORDS.index(w.lower()) + (10 if w.isupper() else 0) if w.lower() in WORDS else 1
                for w in text.split()]


def reverse(text: str) -> str:
    return " ".join(w.upper() for w in reversed(text.split()))


def sentences(rng: random.Random, n: int, lo: int, hi: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


class HandMadeView:
    """Two methods × two seeds of a reversal task: training sources of 2-4 words in
    ``<sep>``-joined groups of 3, test sources up to 7 words, tiny untrained models, outputs
    with a method's own mistakes, and training logs written under ``root``."""

    carries = frozenset(CARRIED)
    setting, methods, baseline, seeds = "extrapolate", ["ape", "shape"], "ape", [1, 2]
    group_size, tok = 3, WordIds()

    def __init__(self, root: Path) -> None:
        rng = random.Random(0)
        test = sentences(rng, 12, 2, 7)
        self.src, self.ref = test * len(self.seeds), [reverse(s) for s in test] * len(self.seeds)
        groups = [sentences(rng, 3, 2, 4) for _ in range(20)]
        self._train = ([" <sep> ".join(g) for g in groups], [" <sep> ".join(reverse(s) for s in g) for g in groups])
        self._models = {m: tiny_model(position=m, seed=i) for i, m in enumerate(self.methods)}
        self._root = root
        for m in self.methods:
            self._write_logs(root / m, slower=m != self.baseline)

    def _write_logs(self, run: Path, slower: bool) -> None:
        run.mkdir(parents=True)
        (run / "train.csv").write_text("step,wall_s,tokens_per_s\n" + "".join(
            f"{s},{s * (1.1 if slower else 1.0)},{900 if slower else 1000}\n" for s in (100, 200)))
        (run / "valid.csv").write_text("step,loss,metric\n100,3.0,20\n200,2.0,25\n")

    def lengths(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def hyps_by_seed(self, method: str, greedy: bool = False) -> list[list[str]]:
        n = len(self.src) // len(self.seeds)
        cut = 1 if method == self.baseline else 0  # the baseline drops the last word of long outputs
        return [[" ".join(r.split()[: len(r.split()) - cut * (len(r.split()) > 4 + seed)]) for r in self.ref[:n]]
                for seed in self.seeds]

    def hyps(self, method: str) -> list[str]:
        return [h for per_seed in self.hyps_by_seed(method) for h in per_seed]

    @property
    def train_lengths(self) -> list[int]:
        return self.lengths([s for text in self._train[0] for s in text.split(" <sep> ")])

    @property
    def train_max_target(self) -> int:
        return max(len(t.split()) for text in self._train[1] for t in text.split(" <sep> "))

    def training_texts(self) -> tuple[list[str], list[str]]:
        return self._train

    def model(self, method: str) -> nn.Module:
        return self._models[method].eval()

    def models(self) -> dict[str, nn.Module]:
        return {m: self.model(m) for m in self.methods}

    def pairs(self, src: list[str], tgt: list[str], method: str) -> list[tuple[list[int], list[int]]]:
        return [(self.tok.encode(s), self.tok.encode(t)) for s, t in zip(src, tgt)]

    def decoder(self, method: str) -> Callable[[list[str]], list[str]]:
        return lambda lines: [reverse(line) for line in lines]

    def run_dir(self, method: str) -> Path:
        return self._root / method

    def device(self, method: str) -> str:
        return "cpu"

    def params(self, method: str) -> int:
        return sum(p.numel() for p in self.model(method).parameters())


class Carrying:
    """``view`` seen through what its runs carry: only the members of ``carries`` (view.MEMBERS)
    and those every view has; any other is an AttributeError naming the group it belongs to."""

    def __init__(self, view: Any, carries: Collection[str]) -> None:  # noqa: ANN401 - any view
        self._view, self.carries = view, frozenset(carries)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the view's member
        group = next((g for g, members in MEMBERS.items() if name in members), None)
        if name not in ALWAYS and group not in self.carries:
            raise AttributeError(f"{name} belongs to {group}, which these runs do not carry")
        return getattr(self._view, name)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> HandMadeView:
    return HandMadeView(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_analysis_runs_on_a_hand_made_grid_reading_only_what_it_needs(
        name: str, view: HandMadeView, tmp_path: Path) -> None:
    analysis = REGISTRY[name]
    with torch.inference_mode():
        analysis.feeder(Carrying(view, analysis.needs), analysis.parse_options(OPTIONS), tmp_path)
    written = {p.suffix for p in tmp_path.rglob("*") if p.is_file()}
    assert {".csv", ".png"} <= written, (name, written)
    assert analysis.reads_models == (MODELS in analysis.needs)


def test_an_analysis_asked_of_runs_that_lack_what_it_needs_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    texts_only = {TEST_SET, OUTPUTS}
    assert set(fitting_names(texts_only)) == {"bootstrap"}  # the only analysis of test outputs alone
    assert fitting("bootstrap", "summaries", texts_only) is REGISTRY["bootstrap"]
    with pytest.raises(ConfigError) as err:
        fitting("speed", "summaries", texts_only, "experiment.analyses")
    assert str(err.value) == ("experiment.analyses: analysis speed does not fit the runs of task summaries: "
                              f"it needs {LOGS}; they carry {OUTPUTS}, {TEST_SET}")
    with pytest.raises(ConfigError, match=r"^unknown analysis 'speeed' \(known: length_bleu, "):
        fitting("speeed", "summaries", texts_only)
    code, _, err_text = cli(capsys, "analyze", "tokenwise", "-e", "vision/fashion_mnist_small")
    assert_one_line_error(code, err_text, "analysis tokenwise does not fit the runs of task vision: it needs "
                          "models, test_set, training_data; they carry nothing an analysis reads")


def test_a_view_refuses_what_its_runs_do_not_carry(view: HandMadeView, tmp_path: Path) -> None:
    """The guard the test above reads through: a feeder reaching for a member its needs do not
    name fails, so a wrong ``needs`` cannot pass unnoticed."""
    speed = REGISTRY["speed"]
    with pytest.raises(AttributeError, match="^device belongs to logs, which these runs do not carry$"):
        speed.feeder(Carrying(view, {TEST_SET, OUTPUTS}), speed.parse_options({}), tmp_path)


def test_speed_compares_only_the_runs_of_the_baselines_device(view: HandMadeView, tmp_path: Path) -> None:
    """Wall clock compares runs of one machine: a baseline alone on its device gets a note naming
    every run's device instead of a table."""

    class Elsewhere(HandMadeView):
        def device(self, method: str) -> str:
            return "cpu" if method == self.baseline else "cuda"

    moved = Elsewhere.__new__(Elsewhere)
    moved.__dict__.update(view.__dict__)
    speed = REGISTRY["speed"]
    speed.feeder(moved, speed.parse_options({}), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["speed.md"]
    assert (tmp_path / "speed.md").read_text() == ("Not compared (seed 1): its runs trained on different devices "
                                                    "(ape: cpu, shape: cuda); wall-clock speed compares runs of one "
                                                    "machine.\n")
