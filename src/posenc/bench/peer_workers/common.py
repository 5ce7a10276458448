"""Shared by every peer worker (runs inside each peer's own venv: no posenc import here).

Protocol: the driver writes one JSON config line, then commands ``train`` / ``beam`` / ``quit``,
one per line; the worker answers each with one JSON line ``{"seconds": s, "tokens": n}`` (``ready``
after setup). Data: random tokens in [4, V) from a fixed seed, identical in every worker.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

import torch

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def synthetic(cfg: dict[str, Any], batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """src ``(B, L)`` and tgt ``(B, L + 1)`` (BOS + L tokens), identical across workers."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, cfg["vocab"], (batch, length), generator=gen)
    tgt = torch.randint(4, cfg["vocab"], (batch, length + 1), generator=gen)
    tgt[:, 0] = BOS
    return src, tgt


def serve(setup: Callable[[dict[str, Any]], dict[str, Callable[[], int]]]) -> None:
    """Read the config, build the runners, then answer timed commands until ``quit``."""
    torch.manual_seed(0)
    cfg = json.loads(sys.stdin.readline())
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    runners = setup(cfg)
    print(json.dumps({"ready": True, "params": cfg.get("_params")}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        start = time.perf_counter()
        tokens = runners[cmd]()
        print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens}), flush=True)
