"""``python -m posenc.bench``: training tokens/s, peak memory and decode speed per position method.

Every figure is also given as a ratio to APE measured in the same run (interleaved rounds, paired
median); see ``docs/performance.md`` for the method and the results on the project's machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from posenc.bench.core import DEFAULT_METHODS, SHAW_BACKENDS, BenchConfig
from posenc.bench.profile import profile_run
from posenc.bench.report import markdown_table, plot, plot_formats, write_json
from posenc.bench.runner import run
from posenc.bench.train_loop import loop_table
from posenc.errors import ConfigError, PosencError
from posenc.files import os_call
from posenc.runs.ownership import check_outside_posenc_dirs, check_target, check_user_output, write_marker

QUICK: dict[str, Any] = dict(lengths=[32, 128, 512], reps=2, batch_tokens=512, decode_batch=4, decode_len=16,
                             decode_reps=2)


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m posenc.bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="3 lengths (32,128,512), 2 rounds, 512-token batches (a few minutes on 2 CPU cores)")
    p.add_argument("--out", help="write the records as a JSON list to this file")
    p.add_argument("--plot", help="write a PNG of cost vs length to this file")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (cuda: bf16 autocast and MFU)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated position method names, any registered method or combination "
                        f"(default {','.join(DEFAULT_METHODS)}; ape is always added)")
    p.add_argument("--lengths", type=_ints, help="comma-separated source (= target) lengths")
    p.add_argument("--reps", type=int, help="timed rounds per length")
    p.add_argument("--warmup", type=int, help="untimed rounds per length")
    p.add_argument("--batch-tokens", type=int, help="tokens per side per batch")
    p.add_argument("--preset", help="model preset (default transformer-small)")
    p.add_argument("--vocab", type=int, help="vocabulary size (default 8000)")
    p.add_argument("--decode-batch", type=int, help="sentences per decoding batch")
    p.add_argument("--decode-len", type=int, help="source (= output) length for decoding")
    p.add_argument("--decode-reps", type=int, help="timed decoding rounds")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--no-decode", action="store_true", help="skip the decoding benchmark")
    p.add_argument("--shaw-backend", default="auto", choices=SHAW_BACKENDS, help="Shaw attention: auto (FlexAttention "
                   "regions on CUDA, explicit softmax on CPU), explicit, flex, or dense (reference)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                   help="training autocast (default auto: bf16 on CUDA with bf16 support; on a CPU bf16 only with "
                   "native bf16 and d_model >= 256, else fp32); bf16 also times fp32 steps in the same rounds "
                   "(column ×fp32)")
    p.add_argument("--compile", nargs="?", const="on", default="off", choices=["auto", "on", "off", "reduce-overhead"],
                   help="torch.compile the training step (default off; auto: on for CUDA only; bare --compile = on; "
                        "reduce-overhead: the --loop-steps loop's step captured whole, train.compile: reduce-overhead)")
    p.add_argument("--loop-steps", type=int, help="also time this many steps of the real Trainer (transformer-small "
                   "by default, eager fp32 vs the chosen precision/compile); 0 = off (default)")
    p.add_argument("--loop-tokens", type=int, help="train.max_tokens of that loop (default 8192)")
    p.add_argument("--loop-preset", help="model preset of that loop (default transformer-small)")
    p.add_argument("--loop-experiment", metavar="NAME",
                   help="that loop's model, vocabulary and max_tokens from an experiment's base run config "
                        "(e.g. multi30k_select); explicit --loop-preset/--vocab/--loop-tokens win")
    p.add_argument("--loop-only", action="store_true",
                   help="time only the --loop-steps training loop (no per-method steps, memory or decoding)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1: on a shared "
                   "2-core machine, 2 threads ran 3-6x slower under contention; 0 = torch default)")
    p.add_argument("--profile", metavar="DIR",
                   help="also write torch.profiler tables and traces per method and length to DIR")
    return p.parse_args(argv)


def build_config(args: argparse.Namespace) -> BenchConfig:
    """Defaults ← --quick ← explicit flags."""
    values: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.loop_experiment:
        values.update(loop_model_of(args.loop_experiment))
    flags = dict(lengths=args.lengths, reps=args.reps, warmup=args.warmup, batch_tokens=args.batch_tokens,
                 preset=args.preset, vocab=args.vocab, decode_batch=args.decode_batch, decode_len=args.decode_len,
                 decode_reps=args.decode_reps,
                 loop_steps=args.loop_steps, loop_tokens=args.loop_tokens, loop_preset=args.loop_preset)
    values.update({k: v for k, v in flags.items() if v is not None})
    if args.loop_only and not values.get("loop_steps"):
        raise ConfigError("--loop-only times the training loop: give --loop-steps N (N >= 1)")
    values["methods"] = [m.strip() for m in args.methods.split(",") if m.strip()]
    values["device"] = args.device
    values["memory"] = not args.no_memory
    values["threads"] = args.threads
    values["shaw_backend"] = args.shaw_backend
    values["precision"], values["compile"] = args.precision, args.compile
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {args.device}: CUDA is not available on this machine")
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        raise ConfigError(f"--device must be cpu or cuda[:N], got {args.device!r}")
    return BenchConfig(**values)


def loop_model_of(experiment: str) -> dict[str, Any]:
    """The training loop's model of an experiment: the model of its grid's first Transformer cell as
    that cell trains it (the schema's defaults, the preset, the base's explicit keys, the setting's
    and the method's overrides, as :func:`posenc.experiments.runner.load_grid` resolves them),
    positions left to the loop (APE), with that cell's vocabulary size and ``train.max_tokens``."""
    from posenc.config import to_dict
    from posenc.experiments.runner import load_grid
    from posenc.models.config import ModelConfig

    grid = load_grid(experiment)
    cfg = next((c for c in map(grid.run_config, grid.cells())
                if getattr(c, "arch", "transformer") == "transformer" and isinstance(getattr(c, "model", None),
                                                                                     ModelConfig)), None)
    if cfg is None:
        raise ConfigError(f"--loop-experiment {experiment}: none of its cells trains a translation Transformer "
                          "(the loop times one)")
    model = {k: v for k, v in to_dict(cfg.model).items() if k not in ("preset", "position", "vocab_size")}
    return {"loop_preset": cfg.model.preset, "loop_model": model, "vocab": int(cfg.data.vocab_size),
            "loop_tokens": int(cfg.train.max_tokens)}


def check_outputs(args: argparse.Namespace) -> None:
    """``--out`` and ``--plot``: files in an existing directory (``--plot`` in a format matplotlib
    writes); ``--profile``: a new, empty or posenc report directory; none inside another posenc
    directory. One-line error otherwise."""
    if args.out:
        check_user_output(args.out, "--out")
    if args.plot:
        check_user_output(args.plot, "--plot")
        formats = plot_formats()
        if Path(args.plot).suffix.lstrip(".").lower() not in formats:
            raise ConfigError(f"--plot {args.plot}: give a file name ending in one of "
                              f"{', '.join('.' + f for f in sorted(formats))} (e.g. bench.png)")
    if args.profile:  # a directory of several files: new, empty or posenc's
        check_outside_posenc_dirs(args.profile, "--profile")
        check_target(args.profile, "report", "--profile")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = build_config(args)
        check_outputs(args)  # every output path before measuring: the results are never lost at the end
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
        dev = (torch.cuda.get_device_name() if cfg.device.startswith("cuda")
               else platform.processor() or platform.machine())
        log(f"posenc.bench: torch {torch.__version__}, {dev}, {torch.get_num_threads()} threads, "
            f"training {cfg.loop_label()}, "
            f"config {json.dumps(cfg.__dict__)}")
        records = run(cfg, decode=not (args.no_decode or args.loop_only), log=log, train=not args.loop_only)
        if args.profile:
            profile_run(cfg, args.profile, log=log)
            write_marker(args.profile, "report")
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.out:
            write_json(records, args.out)
        if args.plot:
            os_call(lambda: plot(records, args.plot), args.plot)
    except PosencError as err:  # e.g. the disk filled up while measuring
        print(f"error: {err}", file=sys.stderr)
        return 2
    if any(r["kind"] == "train" for r in records):
        print(markdown_table(records, "train"))
    for kind in dict.fromkeys(r["kind"] for r in records if r["kind"] not in ("train", "train_loop")):
        print(f"\n{kind}:\n" + markdown_table(records, kind))
    if any(r["kind"] == "train_loop" for r in records):
        print("\ntrain_loop:\n" + loop_table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
