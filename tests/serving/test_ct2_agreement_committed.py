"""The committed CTranslate2 agreement measurements (docs/perf/ct2_agreement_quickstart_*) are of the
committed quickstart models (posenc's own beam-4 BLEU there is the run's committed test BLEU), and the
README and docs/performance.md quote them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODS = {"ape": "APE", "shape": "SHAPE K = 40", "shape-k4": "SHAPE K = 4", "rpe": "RPE"}


def _bench(method: str, beam: int) -> dict:
    data = json.loads((ROOT / "docs" / "perf" / f"ct2_agreement_quickstart_{method}_beam{beam}.json").read_text())
    return {r["engine"]: r for r in data["rows"]} | {"meta": data["meta"]}


def _identical(row: dict, n: int) -> int:
    return round(row["identical_to_posenc"] * n)


@pytest.mark.parametrize("method", METHODS)
def test_the_measurements_are_of_the_committed_models(method: str) -> None:
    committed = json.loads((ROOT / "docs" / "results" / "quickstart" / "extrapolate" / method / "seed1" /
                            "results.json").read_text(encoding="utf-8"))
    beam4 = _bench(method, 4)
    assert beam4["meta"]["beam"] == 4 and beam4["meta"]["alpha"] == committed["record"]["evaluation"]["decode"][
        "length_penalty"]
    assert beam4["posenc"]["bleu"] == pytest.approx(committed["scores"]["test"]["bleu"], abs=1e-9)
    assert _bench(method, 1)["meta"]["beam"] == 1


def test_readme_and_performance_quote_the_agreement() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    perf = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    greedy, beam, int8, loss = [], [], [], []
    for method, label in METHODS.items():
        g, b = _bench(method, 1), _bench(method, 4)
        n = b["meta"]["sentences"]
        greedy.append(_identical(g["ct2-float32"], n) == n)
        beam.append(_identical(b["ct2-float32"], n))
        int8.append(b["ct2-int8"]["identical_to_posenc"])
        d = b["ct2-float32"]["differing"]
        assert d["theirs_higher"] == 0 and d["lines"] == n - beam[-1]  # no line posenc's search missed
        loss.append(-d.get("largest_loss", 0.0))
        assert (f"| {label} | {_identical(g['ct2-float32'], n)}/{n} | {beam[-1]}/{n} | {d['theirs_lower']} / "
                f"{d['theirs_higher']} | {_identical(b['ct2-int8'], n)}/{n} |") in perf
    assert all(greedy) and "float32 greedy outputs are identical to posenc's on every sentence" in readme
    assert f"on {min(beam)}–{max(beam)} of 400, and each differing output scores at most {max(loss):.2f} nats lower" in readme
    assert f"int8 agrees on {100 * min(int8):.0f}–{100 * max(int8):.0f} %" in readme


def test_readme_quotes_the_committed_speed() -> None:
    """The README's CTranslate2 speed-ups are the committed measurements: the 5-round median on an
    earlier quickstart APE model and the one round on the committed one (same 400 sentences, beam 4)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    rounds = json.loads((ROOT / "docs" / "perf" / "ct2_decode_quickstart_ape_alpha06.json").read_text())
    earlier = {r["engine"]: r for r in rounds["rows"]}["ct2-float32"]
    assert len(earlier["rounds"]) == 5 and rounds["meta"]["threads"] == 1
    committed = _bench("ape", 4)["ct2-float32"]
    assert (f"{earlier['speed_vs_posenc']:.1f}× posenc's own beam 4 on an earlier quickstart APE model, median of "
            f"5 rounds on 1 thread, `docs/perf/ct2_decode_quickstart_ape_alpha06.json`; "
            f"{committed['speed_vs_posenc']:.1f}× in one round on the committed one") in readme
