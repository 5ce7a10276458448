"""Paper-faithful protocol fixes in the experiment report."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posenc.analysis.feeders import feed_position_nll
from posenc.analysis.position_nll import position_nll
from posenc.analysis.registry import REGISTRY
from posenc.config import load_config
from posenc.data.spm import Tokenizer
from posenc.tasks.translation.experiment import ExperimentConfig
from posenc.tasks.translation.report import SettingView
from tests.experiments.claims import csv_rows
from tests.experiments.tiny_grid import write_experiment
from tests.helpers.tiny import cli


def test_each_model_is_scored_with_its_own_source_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Fix 1: CAPE trained with a source BOS is scored with it; APE (the baseline) without."""
    path = write_experiment(tmp_path, methods=("ape", "cape"))
    assert cli(capsys, "experiment", path)[0] == 0
    exp = load_config(ExperimentConfig, path)
    exp.analysis_options["stack_tokens"] = 10
    view = SettingView(exp, "vanilla")
    bos = view.tok.bos_id
    assert (view.source_bos("ape"), view.source_bos("cape")) == (False, True)
    ape, cape = view.pairs(view.src, view.ref, "ape"), view.pairs(view.src, view.ref, "cape")
    assert cape == [([bos] + a, t) for a, t in ape] and all(a[:1] != [bos] for a, _ in ape)
    with torch.inference_mode():
        feed_position_nll(view, REGISTRY["position_nll"].parse_options(exp.analysis_options), tmp_path / "nll")
        src, tgt = _stacked(view)
        position_nll({"cape": view.run("cape").model}, view.pairs(src, tgt, "cape"), tmp_path / "own",
                     bos, view.tok.eos_id, view.tok.pad_id)
        position_nll({"cape": view.run("cape").model}, view.pairs(src, tgt, "ape"), tmp_path / "foreign",
                     bos, view.tok.eos_id, view.tok.pad_id)
    report_rows = [r for r in csv_rows(tmp_path / "nll" / "position_nll.csv") if r["model"] == "cape"]
    assert report_rows == csv_rows(tmp_path / "own" / "position_nll.csv")  # scored with its BOS
    assert report_rows != csv_rows(tmp_path / "foreign" / "position_nll.csv")  # the old, wrong format differs


def _stacked(view: SettingView) -> tuple[list[str], list[str]]:
    from posenc.data import settings as data_settings
    from posenc.data.corpora import Pair

    pairs = [Pair(s, t) for s, t in zip(view.src, view.ref)]
    stacked = data_settings.stack(pairs, 10, length_fn=lambda s: len(view.tok.encode(s)))
    return [p.src for p in stacked], [p.tgt for p in stacked]


def test_seen_shading_knows_both_training_bounds(tmp_path: Path) -> None:
    """A bucket is seen only when every sentence in it lies inside the training range: below the
    shortest training sentence (a Middle/Long split) or beyond the longest is unseen, and so is a
    bucket of which only the shorter sentences fit (issue 26: 16-19 with a bound of 18)."""
    from posenc.analysis.common import Buckets
    from posenc.analysis.length_bleu import seen_buckets

    buckets = Buckets.uniform(10, 40)  # 0-9, 10-19, 20-29, 30-39, 40-
    middle = [12, 15, 19, 25, 29]  # a Middle split: no sentence shorter than 12
    assert seen_buckets(buckets, middle, None) == [False, False, True, False, False]  # 10-11 unseen
    test = [3, 13, 14, 22, 28, 35, 44]
    assert seen_buckets(buckets, middle, None, test) == [False, True, True, False, False]
    assert seen_buckets(buckets, None, 18, [4, 12, 17, 19]) == [True, False, False, False, False]
    assert seen_buckets(buckets, None, None) == [None] * 5


def test_report_shades_by_training_lengths(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from posenc.analysis.feeders import feed_length_bleu, source_buckets
    from posenc.analysis.length_bleu import seen_buckets
    from posenc.data.text import read_lines

    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    view = SettingView(load_config(ExperimentConfig, path), "vanilla")
    assert view.train_lengths == [len(view.tok.encode(s)) for s in read_lines(view.data_dir / "train.src")]
    options = REGISTRY["length_bleu"].parse_options(view.exp.analysis_options)
    feed_length_bleu(view, options, tmp_path / "lb")
    rows = [r for r in csv_rows(tmp_path / "lb" / "length_bleu.csv") if r["model"] == "ape"]
    lengths = [len(view.tok.encode(s)) for s in read_lines(view.data_dir / "test.src")]
    assert [r["seen"] == "True" for r in rows] == seen_buckets(source_buckets(view, options.bucket_width),
                                                               view.train_lengths, None, lengths)


def test_interpolate_note_counts_the_shorter_runs_interpolate_keeps() -> None:
    """INTERPOLATE drops nothing; the report counts the joined pairs shorter than a group."""
    from posenc.data.corpora import Pair
    from posenc.data.settings import interpolate
    from posenc.tasks.translation.report import interpolate_short_runs

    pairs = [Pair(f"s{d}{i}", f"t{d}{i}", f"doc{d}", i) for d, n in enumerate((23, 10, 7, 31)) for i in range(n)]
    joined = interpolate(pairs, group=10)
    short = [p for p in joined if p.src.count(" <sep> ") + 1 < 10]
    assert interpolate_short_runs(pairs, 10) == len(short) == 3  # docs of 23, 7 and 31 sentences
    assert sum(p.src.count(" <sep> ") + 1 for p in joined) == len(pairs)


def test_swapped_uses_a_training_subsample_and_protocol_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Fix 4: SHAPE Table 1 runs on training pairs (a fixed-seed subsample), not the test set;
    fix 6: the report names decoding, checkpoint and BLEU variant."""
    from posenc.analysis.feeders import training_subsample
    from posenc.data.text import read_lines

    path = write_experiment(tmp_path)
    assert cli(capsys, "experiment", path)[0] == 0
    view = SettingView(load_config(ExperimentConfig, path), "vanilla")
    train = list(zip(read_lines(view.data_dir / "train.src"), read_lines(view.data_dir / "train.tgt")))
    src, tgt = training_subsample(view, 7)
    assert len(src) == 7 and set(zip(src, tgt)) <= set(train)
    assert [train.index(p) for p in zip(src, tgt)] == sorted(train.index(p) for p in zip(src, tgt))
    assert training_subsample(view, 7) == (src, tgt) and training_subsample(view, 10**6)[0] == [s for s, _ in train]
    text = (view.exp.root / "report" / "README.md").read_text(encoding="utf-8")
    assert "## Evaluation protocol" in text and "beam search (beam 2, GNMT length penalty α = 0.6)" in text
    assert "- checkpoint: the last checkpoint" in text and "sacreBLEU on detokenized text (`nrefs:1" in text
    assert "- training: a fixed budget of 3 updates without early stopping" in text  # tiny.yaml: no patience
    sha = Tokenizer(view.data_dir / "spm.model").identity[:12]
    runs = len(view.exp.methods) * len(view.exp.seeds)  # every run of the setting shares its prepared tokenizer
    assert f"- tokenizer (vanilla): 1 SentencePiece model: `{sha}` ({runs} run{'s' * (runs > 1)})" in text


def test_no_import_circle_between_report_and_runner() -> None:
    import ast

    import posenc.experiments.runner as runner
    import posenc.tasks.translation.report as report
    import posenc.tasks.translation.task as task

    def imports(module) -> set[str]:
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    assert "posenc.experiments.runner" not in imports(report)
    assert "posenc.tasks.translation.report" in imports(task)  # the task writes the report; never the reverse
    assert "posenc.tasks.translation.task" not in imports(report)
    assert not any(m.startswith("posenc.tasks") for m in imports(runner))  # the runner knows no task


def test_position_nll_compares_the_seeds_in_the_report_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """CAPE Fig. 8's endpoint is over training seeds: `posenc analyze position_nll` writes one
    result per seed and, beside them, the per-seed span means compared by Welch."""
    import yaml

    path = write_experiment(tmp_path, methods=("ape", "cape"), seeds=(1, 2))
    exp = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**exp, "analysis_options": {"stack_tokens": 10}}), encoding="utf-8")
    assert cli(capsys, "experiment", str(path))[0] == 0
    assert cli(capsys, "analyze", "position_nll", "-e", str(path), "--setting", "vanilla")[0] == 0
    out = tmp_path / "exp" / "report" / "vanilla" / "position_nll"
    spans = {s: csv_rows(out / f"seed{s}" / "position_nll_spans.csv") for s in (1, 2)}
    seeds = csv_rows(out / "position_nll_seeds.csv")
    assert {(r["span"], r["model"]) for r in seeds} == {(r["span"], r["model"]) for r in spans[1]}
    for r in seeds:
        per_seed = [float(next(x["nll"] for x in spans[s] if (x["span"], x["model"]) == (r["span"], r["model"])))
                    for s in (1, 2)]
        assert r["seeds"] == "1 2" and float(r["nll"]) == pytest.approx(sum(per_seed) / 2)
    assert {(r["model"], r["other"]) for r in csv_rows(out / "position_nll_pairs.csv")} == {("ape", "cape")}


def test_protocol_names_each_settings_tokenizers() -> None:
    """Per setting: the distinct SentencePiece models (12 hex digits, run counts) and the runs that
    predate the record; no line at all when no run records one."""
    from posenc.experiments.runner import find_experiment
    from posenc.tasks.translation.report import tokenizer_lines

    exp = load_config(ExperimentConfig, find_experiment("multi30k_select"), [])
    a, b = "a" * 64, "b" * 64
    results = [{"setting": "extrapolate", "summary": {"tokenizer": a}},
               {"setting": "extrapolate", "summary": {"tokenizer": a}},
               {"setting": "extrapolate", "summary": {"vocab_sha256": b}},
               {"setting": "vanilla", "summary": {"tokenizer": b}},
               {"setting": "vanilla", "summary": {"tokenizer": a}}]
    assert tokenizer_lines(exp, results) == [
        "- tokenizer (vanilla): 2 SentencePiece models: `aaaaaaaaaaaa` (1 run), `bbbbbbbbbbbb` (1 run)",
        "- tokenizer (extrapolate): 1 SentencePiece model: `aaaaaaaaaaaa` (2 runs); 1 run trained before the record",
    ]  # multi30k_select's settings, in its order: vanilla, extrapolate
    assert tokenizer_lines(exp, [{"setting": "vanilla", "summary": {}}]) == []
