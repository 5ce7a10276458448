"""The α-cap bias table (``posenc.bench.alpha_bound``) on hand-made runs: each test-decoded run's
last-step validation gain and long-output lengthening, counted with the grid's tokenizer; a
selection sweep's cells (decoded on validation only) are not rows."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from posenc.bench.alpha_bound import main
from posenc.data.spm import Tokenizer

TOKENIZERS = Path(__file__).resolve().parents[2] / "docs" / "results" / "multi30k_select" / "tokenizers"


def _run(root: Path, name: str, splits: tuple[str, ...], hyps: dict[str, list[str]]) -> None:
    run = root / "extrapolate" / name / "seed1"
    (run / "translations").mkdir(parents=True)
    scores = {split: {"beam": 4, "bleu": 1.0} for split in splits}
    tuning = {"chosen": 1.4, "at_bound": True, "sweep": {"1.2": 30.0, "1.4": 30.25}}
    (run / "results.json").write_text(json.dumps({"scores": scores, "length_penalty": tuning}), encoding="utf-8")
    for alpha, lines in hyps.items():
        (run / "translations" / f"valid.lp{alpha}.beam4.hyp").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_rows_are_the_test_decoded_runs_with_their_long_output_lengths(tmp_path: Path) -> None:
    if not TOKENIZERS.is_dir():
        pytest.skip("the committed multi30k_select tokenizer is not in this checkout")
    (model,) = TOKENIZERS.iterdir()
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(model, data / "spm.model")
    tok = Tokenizer(data / "spm.model")
    long_source = " ".join(["a man in a blue shirt is standing"] * 4)
    (data / "valid.src").write_text(f"a dog\n{long_source}\n", encoding="utf-8")
    short, longer = "ein Hund", "ein Mann in einem blauen Hemd steht auf der Straße"
    hyps = {"1.2": [short, short], "1.4": [short, longer]}
    _run(tmp_path, "ape", ("valid", "test"), hyps)
    _run(tmp_path, "shape-kstar-max_shift10", ("valid",), hyps)  # a sweep cell: no test split
    out = tmp_path / "alpha_bound.csv"
    assert main([str(tmp_path), "--setting", "extrapolate", "--data", str(data), "--out", str(out)]) == 0
    (row,) = csv.DictReader(out.open(encoding="utf-8"))
    gain = len(tok.encode(longer)) - len(tok.encode(short))
    assert row["run"] == "ape/seed1" and row["long_sentences"] == "1" and row["bleu_gain"] == "0.2500"
    assert float(row["long_len_gain"]) == pytest.approx(gain) and gain > 0
