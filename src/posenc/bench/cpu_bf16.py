"""bf16 autocast vs fp32 training steps on the CPU, by model width.

``python -m posenc.bench.cpu_bf16 [--lengths 32,128] [--reps 5] [--threads 1] [--out FILE]``: for the
quickstart model (d 64), the multi30k_cpu model (d 128) and transformer-small (d 256), the bench's
APE training step (forward, cross-entropy, backward, Adam; ``posenc.bench.runner.train_records``
with ``precision=bf16``, which times an fp32 step of the same model on the same batch in the same
interleaved rounds) → the paired-median ratio time(fp32) / time(bf16) per width and length. The
rule ``precision: auto`` applies on a CPU (training/precision.CPU_BF16_MIN_WIDTH) comes from such a
table; whether this CPU computes bf16 natively is printed with it. Results: docs/performance.md."""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from posenc.bench.core import BenchConfig
from posenc.bench.runner import train_records
from posenc.training.precision import cpu_has_native_bf16

#: label → (preset, ModelConfig overrides): the shipped CPU models and transformer-small.
MODELS = {
    "quickstart (d 64)": ("transformer-tiny", {"d_model": 64, "heads": 4, "d_ff": 256}),
    "multi30k_cpu (d 128)": ("transformer-small", {"encoder_layers": 2, "decoder_layers": 2, "d_model": 128, "heads": 4,
                                                   "d_ff": 512}),
    "transformer-small (d 256)": ("transformer-small", {}),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="32,128")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for label, (preset, model) in MODELS.items():
        for length in (int(x) for x in args.lengths.split(",")):
            cfg = BenchConfig(methods=["ape"], lengths=[length], reps=args.reps, batch_tokens=args.batch_tokens,
                              preset=preset, model=model, precision="bf16", memory=False, threads=args.threads)
            rec = train_records(cfg, length)[0]
            rows.append({"model": label, "d_model": cfg.width(), "length": length, "batch": rec["batch"],
                         "bf16_tokens_per_s": rec["tokens_per_s"], "bf16_over_fp32": rec["ratio_to_fp32"],
                         "reps": args.reps})
            print(f"{label:26s} L={length:4d} bf16/fp32 {rec['ratio_to_fp32']:.2f}", flush=True)
    meta = {"cpu": platform.processor() or platform.machine(), "native_bf16": cpu_has_native_bf16(),
            "threads": args.threads, "torch": torch.__version__, "batch_tokens": args.batch_tokens}
    print(f"\nnative bf16 (avx512_bf16/amx_bf16): {meta['native_bf16']}, {args.threads} thread(s)")
    print("| model | d_model | length | batch | bf16 tok/s | speed bf16 / fp32 |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['d_model']} | {r['length']} | {r['batch']} | {r['bf16_tokens_per_s']:.0f} | "
              f"{r['bf16_over_fp32']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
