"""``posenc evaluate --hyp FILE --ref FILE``: detokenized sacreBLEU and chrF with signatures."""

from __future__ import annotations

import argparse
import json

from posenc.evaluation.metrics import evaluate_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hyp", required=True, help="system output, one sentence per line (detokenized)")
    parser.add_argument("--ref", required=True, help="reference translations, line-aligned")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def run(args: argparse.Namespace) -> int:
    scores = evaluate_files(args.hyp, args.ref)
    if args.json:
        print(json.dumps({k: scores[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature", "lines")}))
    else:
        print(scores["bleu_text"])
        print(scores["chrf_text"])
    return 0
