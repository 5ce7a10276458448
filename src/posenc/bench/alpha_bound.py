#!/usr/bin/env python3
"""What a length-penalty search capped at its top α costs each run, from the runs' own sweep.

A grid that chooses the GNMT α on validation BLEU from a fixed list (multi30k_select: {0.6, ...,
1.4}) stops at the list's top for runs whose BLEU still rises there (``at_bound``). This reads, for
each run, the validation hypotheses its sweep already wrote (``translations/valid.lp<α>.beam<K>.hyp``)
at the two top values of the list and reports the validation BLEU gained by the last step and how
much longer that step makes the outputs on the **long** validation sources (more than
``--long-above`` subwords, the EXTRAPOLATE bound), counted with the run's tokenizer: the direction
and size of the bias a cap puts on the length endpoints. Nothing is decoded. Usage::

    python -m posenc.bench.alpha_bound docs/results/multi30k_select --setting extrapolate \\
        --data <prepared extrapolate dir> --out docs/results/multi30k_select/alpha_bound.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from posenc.data.spm import Tokenizer
from posenc.data.text import read_lines

FIELDS = ("run", "chosen", "at_bound", "bleu_below", "bleu_top", "bleu_gain", "long_sentences",
          "long_len_below", "long_len_top", "long_len_gain")


def run_row(run: Path, tok: Tokenizer, long: list[int], alphas: tuple[str, str]) -> dict[str, Any]:
    """One run's row: the sweep's validation BLEU at the two top α (``alphas``, as the sweep names
    them) and the mean output length (subwords) at each over the ``long`` validation sentences."""
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    tuning, beam = results["length_penalty"], results["scores"]["test"]["beam"]
    lengths = {}
    for alpha in alphas:
        hyps = read_lines(run / "translations" / f"valid.lp{alpha}.beam{beam}.hyp")
        lengths[alpha] = statistics.fmean(len(tok.encode(hyps[i])) for i in long)
    below, top = alphas
    return {"run": "/".join(run.parts[-2:]), "chosen": tuning["chosen"], "at_bound": tuning["at_bound"],
            "bleu_below": tuning["sweep"][below], "bleu_top": tuning["sweep"][top],
            "bleu_gain": tuning["sweep"][top] - tuning["sweep"][below], "long_sentences": len(long),
            "long_len_below": lengths[below], "long_len_top": lengths[top],
            "long_len_gain": lengths[top] - lengths[below]}


def _tuned_for_test(run: Path) -> bool:
    """A run whose α was searched and whose test split was decoded with it (a selection sweep's
    cells are decoded on validation only: the cap's bias on the test endpoints is not theirs)."""
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    return "length_penalty" in results and "test" in results.get("scores", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="a grid's out_dir (its <setting>/<method>/seed<N> runs)")
    parser.add_argument("--setting", required=True)
    parser.add_argument("--data", type=Path, required=True, help="the setting's prepared data (valid.src, spm.model)")
    parser.add_argument("--alphas", nargs=2, default=["1.2", "1.4"], help="the two top α of the search, as named")
    parser.add_argument("--long-above", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tok = Tokenizer(args.data / "spm.model")
    sources = read_lines(args.data / "valid.src")
    long = [i for i, s in enumerate(sources) if len(tok.encode(s)) > args.long_above]
    runs = sorted(p.parent for p in (args.grid / args.setting).glob("*/seed*/results.json"))
    rows = [run_row(run, tok, long, tuple(args.alphas)) for run in runs if _tuned_for_test(run)]
    with args.out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()} for r in rows)
    print(f"{len(rows)} runs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
