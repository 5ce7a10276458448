"""``python -m posenc.bench.decode_ab``: beam-K decoding with and without CUDA graphs, per method.

Shape legend: B sentences, S source length (= output length), K beam.

Both variants run the device-batched search with the static KV cache on the same random batch and
model (EOS suppressed until the length limit, as in ``posenc.bench``), timed in interleaved
rounds; the ratio is ``graph / eager`` throughput (paired median). Prints a table, ``--out``
writes the records as JSON.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import torch

from posenc.bench.core import DEFAULT_METHODS, BenchConfig, build_model, interleaved, paired_ratio, synthetic_batch
from posenc.bench.report import write_json
from posenc.bench.runner import NoEos, decode_runner
from posenc.errors import ConfigError, PosencError
from posenc.runs.ownership import check_user_output


def ab_records(cfg: BenchConfig) -> list[dict[str, Any]]:
    """Per method: sentences/s of eager steps and of graph replays, and their paired ratio."""
    batch = synthetic_batch(cfg.decode_batch, cfg.decode_len, cfg.vocab, cfg.device, cfg.seed + 1)
    records = []
    for method in cfg.methods:
        model = NoEos(build_model(method, cfg).eval())
        runs = {name: decode_runner(f"beam{cfg.beam}", model, batch["src"], batch["src_mask"], cfg.beam, cfg.device,
                                    name == "graph")
                for name in ("eager", "graph")}
        times = interleaved(runs, cfg.decode_reps, 1)
        rec: dict[str, Any] = {"kind": f"beam{cfg.beam}", "method": method, "length": cfg.decode_len,
                               "batch": cfg.decode_batch}
        for name in runs:
            rec[f"{name}_sentences_per_s"] = cfg.decode_batch / statistics.median(times[name])
        rec["graph_over_eager"] = paired_ratio(times, "graph", ref="eager")
        records.append(rec)
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m posenc.bench.decode_ab", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--preset", default="transformer-base")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--decode-len", type=int, default=32)
    p.add_argument("--decode-reps", type=int, default=5)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--out")
    a = p.parse_args(argv)
    try:
        if a.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"--device {a.device}: CUDA is not available on this machine")
        if a.out:
            check_user_output(a.out, "--out")  # before measuring: the results are never lost at the end
        cfg = BenchConfig(methods=a.methods.split(","), preset=a.preset, vocab=a.vocab, device=a.device,
                          decode_batch=a.decode_batch, decode_len=a.decode_len, decode_reps=a.decode_reps, beam=a.beam)
        records = ab_records(cfg)
        if a.out:
            write_json(records, a.out)
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("| method | eager sent/s | graph sent/s | graph ×eager |\n|---|---|---|---|")
    for r in records:
        print(f"| {r['method']} | {r['eager_sentences_per_s']:.1f} | {r['graph_sentences_per_s']:.1f} | "
              f"{r['graph_over_eager']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
