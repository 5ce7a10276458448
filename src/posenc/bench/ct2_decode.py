"""Decoding speed and agreement: posenc's own beam search vs the same run exported to CTranslate2
(float32 and int8) on the same sentences.

``python -m posenc.bench.ct2_decode --run R [--split test] [--rounds 3] [--threads 1] [--beam K]
[--alpha A] [--out FILE]``: exports the run twice into temporary directories
(``serving/ctranslate2.export_run``), then in each round translates the whole split with every
engine in a rotated order (wall clock of the whole pass, tokenization included, model loading
excluded). Reports the median seconds per pass, sentences/s, the paired-median speed ratio to
posenc, the share of output lines identical to posenc's, sacreBLEU against the reference, and for
the lines that differ how the two outputs score under posenc's own model and search objective
(log-probability with EOS over GNMT's ((5+|y|)/6)^α): a CTranslate2 output that scores higher is
a line posenc's search missed, one that scores lower is CTranslate2's rules at work. The length
penalty is the run's α in each engine's own formula (posenc: GNMT, CTranslate2: |y|^α), so beam
outputs can differ where α ≠ 0; greedy search (``--beam 1``) has no length penalty.
Results: docs/performance.md."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from posenc.analysis.common import gold_logprobs
from posenc.data.text import read_lines
from posenc.decoding.loaded import LoadedRun, tuned_alpha
from posenc.decoding.search import gnmt_length_penalty
from posenc.decoding.translate import translate_lines as native_lines
from posenc.evaluation.metrics import corpus_scores
from posenc.serving.ctranslate2 import export_run
from posenc.serving.exported import load_export
from posenc.tasks.translation.load import decode_options, load_run, split_files


def options(run: LoadedRun, alpha: float | None, beam: int | None) -> dict[str, Any]:
    """The run's decoding options (with the α its experiment tuned, as ``posenc translate`` uses it)
    with ``alpha`` and ``beam`` where given."""
    opts = decode_options(run.cfg.decode, run)
    tuned = tuned_alpha(run.root)
    if alpha is not None or tuned is not None:
        opts["length_penalty"] = alpha if alpha is not None else tuned
    if beam is not None:
        opts["beam"] = beam
    return opts


Translate = Callable[[list[str]], list[str]]


def engines(run: LoadedRun, opts: dict[str, Any], threads: int, tmp: Path) -> dict[str, Translate]:
    """name → translate(lines) for posenc and CTranslate2 float32 / int8 of the run."""
    out: dict[str, Callable[[list[str]], list[str]]] = {}

    def posenc(lines: list[str]) -> list[str]:
        with torch.inference_mode():
            return list(native_lines(run.model, run.tokenizer, lines, **opts))

    out["posenc"] = posenc
    for quant in ("float32", "int8"):
        export_run(run, tmp / quant, quant)
        model = load_export(tmp / quant, threads=threads)
        kw = {k: opts[k] for k in ("beam", "length_penalty", "max_len_a", "max_len_b", "batch_tokens")}
        out[f"ct2-{quant}"] = lambda lines, m=model, kw=kw: list(m.translate_lines(lines, **kw))
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


def objective(run: LoadedRun, sources: list[str], outputs: list[str], alpha: float) -> list[float]:
    """posenc's beam objective of each output given its source: the teacher-forced log-probability
    of the output's subwords and EOS over GNMT's length penalty of that length (α = 0: the
    log-probability alone, greedy search's own criterion). The output is scored as the tokenizer
    segments its text, which for these outputs is the segmentation the search emitted unless a
    detokenized line re-encodes differently."""
    tok = run.tokenizer
    bos = [tok.bos_id] if run.prepend_src_bos else []
    pairs = [(bos + tok.encode(s), tok.encode(o)) for s, o in zip(sources, outputs)]
    logprobs = gold_logprobs(run.model, pairs, tok.bos_id, tok.eos_id, tok.pad_id)
    return [float(lp.sum()) / float(gnmt_length_penalty(len(lp), alpha)) for lp in logprobs]


def differing(run: LoadedRun, sources: list[str], ours: list[str], theirs: list[str], alpha: float) -> dict[str, Any]:
    """The lines where ``theirs`` differs from ``ours`` and how they score under posenc's objective:
    ``lines``, ``theirs_higher`` (posenc's search missed a better output), ``theirs_lower`` and
    ``tied`` (within 1e-6), and the largest gap either way."""
    index = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if not index:
        return {"lines": 0, "theirs_higher": 0, "theirs_lower": 0, "tied": 0}
    src = [sources[i] for i in index]
    mine = objective(run, src, [ours[i] for i in index], alpha)
    other = objective(run, src, [theirs[i] for i in index], alpha)
    gaps = [b - a for a, b in zip(mine, other)]
    return {"lines": len(index), "theirs_higher": sum(g > 1e-6 for g in gaps),
            "theirs_lower": sum(g < -1e-6 for g in gaps), "tied": sum(abs(g) <= 1e-6 for g in gaps),
            "largest_gain": max(gaps), "largest_loss": min(gaps)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--alpha", type=float, help="length penalty α for both engines (default: the run's)")
    p.add_argument("--beam", type=int, help="beam size for both engines, 1: greedy search (default: the run's)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run = load_run(args.run)
    src, ref = split_files(run, args.split)
    lines, refs = read_lines(src), read_lines(ref)
    opts = options(run, args.alpha, args.beam)
    with tempfile.TemporaryDirectory(prefix="posenc-ct2-bench-") as tmp:
        times, outputs = measure(engines(run, opts, args.threads, Path(tmp)), lines, args.rounds)
    rows = []
    for name, secs in times.items():
        rows.append({
            "engine": name, "seconds": statistics.median(secs), "sentences_per_s": len(lines) / statistics.median(secs),
            "speed_vs_posenc": statistics.median(a / b for a, b in zip(times["posenc"], secs)),
            "identical_to_posenc": sum(a == b for a, b in zip(outputs[name], outputs["posenc"])) / len(lines),
            "bleu": corpus_scores(outputs[name], refs)["bleu"], "rounds": secs,
            "differing": differing(run, lines, outputs["posenc"], outputs[name],
                                   opts["length_penalty"] if opts["beam"] > 1 else 0.0),
        })
    meta = {"run": args.run, "split": args.split, "sentences": len(lines), "threads": args.threads,
            "cpu": platform.processor(), "torch": torch.__version__,
            "ctranslate2": __import__("ctranslate2").__version__, "alpha": opts["length_penalty"],
            "beam": opts["beam"]}
    print("| engine | s per pass | sentences/s | × posenc | identical to posenc | BLEU | differing: higher / lower |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["differing"]
        print(f"| {r['engine']} | {r['seconds']:.2f} | {r['sentences_per_s']:.1f} | {r['speed_vs_posenc']:.2f} | "
              f"{r['identical_to_posenc']:.1%} | {r['bleu']:.2f} | {d['theirs_higher']} / {d['theirs_lower']} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
