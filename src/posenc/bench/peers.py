#!/usr/bin/env python3
"""Side-by-side training and beam-search speed of posenc against other toolkits.

Peers, each installed by this script in its own venv under ``--cache`` (default
``~/.cache/posenc-peers``); none of their code is committed here, only the workers in
``posenc/bench/peer_workers/`` that drive them:

* ``marian``: Hugging Face ``transformers`` MarianMT (random init; sinusoidal positions, post-LN);
* ``onmt`` / ``onmt-rpe``: OpenNMT-py 3.5.1 Transformer, sinusoidal / Shaw RPE
  (``max_relative_positions 16``), installed ``--no-deps`` next to its runtime dependencies;
* ``fairseq``: ``fairseq-fixed==0.12.3.1`` transformer (built ``--no-deps --no-build-isolation``).

Every worker builds the same model size (layers, width, heads, FFN, shared 8000-token vocabulary)
on the same random batch, and runs as a long-lived subprocess; the driver interleaves one training
step (forward, cross-entropy, backward, Adam) per worker per round, then one beam-4 decode of the
same sources (exactly ``decode_len`` output tokens each: EOS is kept out until the limit), and
reports medians and paired ratios to posenc (``posenc`` = APE, ``posenc-rpe`` = Shaw, k = 16).

Usage: ``python -m posenc.bench.peers [--peers marian,onmt,onmt-rpe,fairseq] [--rounds 5] [--out F.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1]  # the directory that holds the posenc package
TORCH = "torch==2.13.0"
INSTALL: dict[str, list[list[str]]] = {
    "hf": [[TORCH, "transformers", "sentencepiece"]],
    "onmt": [[TORCH, "configargparse", "ctranslate2>=4,<5", "pyonmttok", "pyyaml", "sacrebleu", "six", "rapidfuzz",
              "pyahocorasick", "spacy", "fasttext-wheel"], ["--no-deps", "OpenNMT-py==3.5.1"]],
    "fairseq": [[TORCH, "hydra-core==1.3.2", "omegaconf==2.3.0", "cython", "bitarray", "regex", "sacrebleu",
                 "scikit-learn", "numpy", "setuptools", "wheel", "tqdm"],
                ["--no-deps", "--no-build-isolation", "fairseq-fixed==0.12.3.1"]],
}
#: peer name → (venv key or "posenc", worker script, position)
PEERS: dict[str, tuple[str, str, str]] = {
    "posenc": ("posenc", "posenc_worker.py", "ape"),
    "posenc-rpe": ("posenc", "posenc_worker.py", "rpe"),
    "marian": ("hf", "marian_worker.py", "ape"),
    "onmt": ("onmt", "onmt_worker.py", "ape"),
    "onmt-rpe": ("onmt", "onmt_worker.py", "rpe"),
    "fairseq": ("fairseq", "fairseq_worker.py", "ape"),
}


def venv_python(key: str, cache: Path) -> Path:
    """The venv's interpreter, creating the venv and installing its packages on first use."""
    if key == "posenc":
        return Path(sys.executable)
    env = cache / key
    marker = env / ".posenc-peers-installed"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        for args in INSTALL[key]:
            subprocess.run([str(env / "bin" / "pip"), "install", "-q", *args], check=True)
        marker.write_text("ok\n")
    return env / "bin" / "python"


class Worker:
    """A peer worker subprocess speaking the line protocol of ``peer_workers/common.py``."""

    def __init__(self, name: str, python: Path, script: str, cfg: dict[str, Any]) -> None:
        env_path = str(HERE / "peer_workers") + (f":{SRC}" if name.startswith("posenc") else "")
        self.name = name
        self.proc = subprocess.Popen([str(python), str(HERE / "peer_workers" / script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin",
                                          "OMP_NUM_THREADS": str(cfg["threads"])})
        self.info = self._ask(json.dumps(cfg))

    def _ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        while reply and not reply.startswith("{"):  # a library's stray print
            reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"peer {self.name}: worker exited (run its worker by hand to see the error)")
        return json.loads(reply)

    def run(self, cmd: str) -> dict[str, Any]:
        return self._ask(cmd)

    def close(self) -> None:
        try:
            self._ask("quit")
        except (RuntimeError, BrokenPipeError, ValueError):
            pass
        self.proc.wait(timeout=60)


def rounds(workers: dict[str, Worker], cmd: str, n: int, warmup: int) -> dict[str, list[dict[str, Any]]]:
    """``warmup`` + ``n`` rounds of ``cmd`` over every worker, order rotated each round."""
    names = list(workers)
    for _ in range(warmup):
        for name in names:
            workers[name].run(cmd)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(n):
        for name in names[r % len(names):] + names[: r % len(names)]:
            out[name].append(workers[name].run(cmd))
    return out


def summarise(res: dict[str, list[dict[str, Any]]], kind: str, ref: str) -> list[dict[str, Any]]:
    rows = []
    for name, runs in res.items():
        sec = [r["seconds"] for r in runs]
        ratio = statistics.median(t / s for t, s in zip((r["seconds"] for r in res[ref]), sec))  # speed / ref speed
        rows.append({"kind": kind, "peer": name, "tokens_per_s": runs[0]["tokens"] / statistics.median(sec),
                     "seconds": statistics.median(sec), "speed_vs_" + ref: ratio, "rounds": len(sec)})
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", default="marian,onmt,onmt-rpe,fairseq",
                   help=f"comma-separated subset of {','.join(PEERS)}")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "posenc-peers"), help="where the peers' venvs live")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--length", type=int, default=32, help="source = target length of the training batch")
    p.add_argument("--batch", type=int, default=32, help="sentences per training batch")
    p.add_argument("--decode-batch", type=int, default=16)
    p.add_argument("--decode-len", type=int, default=24)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="write the rows as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = {"vocab": 8000, "layers": 3, "d_model": 256, "heads": 4, "d_ff": 1024, "dropout": 0.1, "rpe_k": 16, "beam": 4,
           "batch": args.batch, "length": args.length, "decode_batch": args.decode_batch, "decode_len": args.decode_len,
           "threads": args.threads}
    names = ["posenc", "posenc-rpe"] + [p for p in args.peers.split(",") if p and not p.startswith("posenc")]
    workers: dict[str, Worker] = {}
    for name in names:
        if name not in PEERS:
            print(f"error: unknown peer {name!r} (known: {', '.join(PEERS)})", file=sys.stderr)
            return 2
        key, script, position = PEERS[name]
        try:
            workers[name] = Worker(name, venv_python(key, Path(args.cache)), script, {**cfg, "position": position})
            print(f"{name}: ready, {workers[name].info.get('params')} parameters", file=sys.stderr, flush=True)
        except (RuntimeError, subprocess.CalledProcessError) as err:
            print(f"{name}: skipped ({err})", file=sys.stderr, flush=True)
    rows = summarise(rounds(workers, "train", args.rounds, args.warmup), "train", "posenc")
    rows += summarise(rounds(workers, "beam", args.rounds, args.warmup), f"beam{cfg['beam']}", "posenc")
    for w in workers.values():
        w.close()
    for r in rows:
        r["params"] = workers[r["peer"]].info.get("params")
    print("| kind | peer | params | tokens/s | speed / posenc (APE) |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['peer']} | {r['params']} | {r['tokens_per_s']:.0f} | {r['speed_vs_posenc']:.3f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"config": cfg, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
