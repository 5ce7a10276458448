"""Decoding speed and agreement: posenc's own beam search vs the same run exported to CTranslate2
(float32 and int8) on the same sentences.

``python -m posenc.bench.ct2_decode --run R [--split test] [--rounds 3] [--threads 1] [--out FILE]``:
exports the run twice into temporary directories (``serving/ctranslate2.export_run``), then in
each round translates the whole split with every engine in a rotated order (wall clock of the
whole pass, tokenization included, model loading excluded). Reports the median seconds per pass,
sentences/s, the paired-median speed ratio to posenc, the share of output lines identical to
posenc's and sacreBLEU against the reference. The length penalty is the run's α in each engine's
own formula (posenc: GNMT ((5+|y|)/6)^α, CTranslate2: |y|^α), so outputs can differ where α ≠ 0.
Results: docs/performance.md."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from posenc.data.text import read_lines
from posenc.decoding.translate import translate_lines as native_lines
from posenc.evaluation.metrics import corpus_scores
from posenc.serving import ctranslate2 as ct2
from posenc.tasks.translation.load import decode_options, load_run, split_files


def engines(run_dir: str, threads: int, tmp: Path, alpha: float | None) -> dict[str, Callable[[list[str]], list[str]]]:
    """name → translate(lines) for posenc and CTranslate2 float32 / int8 of the run."""
    run = load_run(run_dir)
    opts = decode_options(run.cfg.decode, run)
    if alpha is not None:
        opts["length_penalty"] = alpha
    out: dict[str, Callable[[list[str]], list[str]]] = {}

    def posenc(lines: list[str]) -> list[str]:
        with torch.inference_mode():
            return list(native_lines(run.model, run.tokenizer, lines, **opts))

    out["posenc"] = posenc
    for quant in ("float32", "int8"):
        ct2.export_run(run, tmp / quant, quant)
        model = ct2.load_export(tmp / quant, threads=threads)
        kw = {k: opts[k] for k in ("beam", "length_penalty", "max_len_a", "max_len_b", "batch_tokens")}
        out[f"ct2-{quant}"] = lambda lines, m=model, kw=kw: list(ct2.translate_lines(m, lines, **kw))
    return out


def measure(runs: dict[str, Callable[[list[str]], list[str]]], lines: list[str], rounds: int) -> tuple[dict, dict]:
    """Seconds per pass (rotated order each round, one untimed warm-up pass) and the outputs."""
    names, outputs = list(runs), {n: runs[n](lines) for n in runs}
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            runs[name](lines)
            times[name].append(time.perf_counter() - start)
    return times, outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--alpha", type=float, help="length penalty α for both engines (default: the run's)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run = load_run(args.run)
    src, ref = split_files(run, args.split)
    lines, refs = read_lines(src), read_lines(ref)
    with tempfile.TemporaryDirectory(prefix="posenc-ct2-bench-") as tmp:
        times, outputs = measure(engines(args.run, args.threads, Path(tmp), args.alpha), lines, args.rounds)
    rows = []
    for name, secs in times.items():
        rows.append({
            "engine": name, "seconds": statistics.median(secs), "sentences_per_s": len(lines) / statistics.median(secs),
            "speed_vs_posenc": statistics.median(a / b for a, b in zip(times["posenc"], secs)),
            "identical_to_posenc": sum(a == b for a, b in zip(outputs[name], outputs["posenc"])) / len(lines),
            "bleu": corpus_scores(outputs[name], refs)["bleu"], "rounds": secs,
        })
    meta = {"run": args.run, "split": args.split, "sentences": len(lines), "threads": args.threads,
            "cpu": platform.processor(), "torch": torch.__version__,
            "ctranslate2": __import__("ctranslate2").__version__, "alpha": args.alpha}
    print("| engine | s per pass | sentences/s | × posenc | identical to posenc | BLEU |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['seconds']:.2f} | {r['sentences_per_s']:.1f} | {r['speed_vs_posenc']:.2f} | "
              f"{r['identical_to_posenc']:.1%} | {r['bleu']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
