"""Writes tests/reference/data/{shape,cape1d,cape2d}.json: outputs of the public SHAPE and CAPE code on
fixed inputs and fixed draws, for tests/reference/test_shape_cape.py.

The reference code is not part of posenc and is not copied here: it is read from a clone (or a bare
git directory) of each public repository and executed as it is:

* butsugiri/shape, ``onmt/modules/embeddings.py``: ``PositionalEncoding`` (Kiyono et al. 2021);
* gcambara/cape, ``cape/cape.py``: ``CAPE1d`` and ``CAPE2d`` (Likhomanenko et al. 2021).

Random draws: the reference draws with ``Tensor.uniform_(−a, a)`` (CAPE) and ``torch.randint`` (SHAPE).
While the reference runs, ``uniform_`` fills its tensor with ``a·u`` for unit draws ``u ~ U(−1, 1)`` made
here from a seeded generator and stored in the fixture, and the integers ``torch.randint`` returns are
recorded with its bounds; the tests hand posenc the same draws.

Command (the fixture header records it, with each repository's commit):

    python tests/reference/make_fixtures.py --shape PATH/TO/shape --cape PATH/TO/cape

It needs torch and einops (which gcambara/cape imports).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

DATA = Path(__file__).resolve().parent / "data"


def git(repo: Path, *args: str) -> str:
    """``git`` on a clone or a bare git directory."""
    flag = ["--git-dir", str(repo)] if (repo / "HEAD").is_file() and not (repo / ".git").exists() else ["-C", str(repo)]
    return subprocess.run(["git", *flag, *args], check=True, capture_output=True, text=True).stdout


def source(repo: Path, path: str) -> tuple[str, str]:
    """(text of ``path`` at HEAD, HEAD's commit)."""
    return git(repo, "show", f"HEAD:{path}"), git(repo, "rev-parse", "HEAD").strip()


def load(name: str, text: str, origin: str) -> types.ModuleType:
    """Execute ``text`` as module ``name`` (its ``__file__`` says where it came from)."""
    module = types.ModuleType(name)
    module.__file__ = origin
    exec(compile(text, origin, "exec"), module.__dict__)  # noqa: S102 - the public reference code, run as it is
    return module


def as_list(t: torch.Tensor) -> Any:
    """Nested lists of floats, 9 significant digits (a float32 value read back exactly)."""
    return json.loads(json.dumps(t.detach().double().tolist(), default=float), parse_float=lambda v: float(f"{float(v):.9g}"))


@contextmanager
def unit_draws(draws: list[torch.Tensor]) -> Iterator[None]:
    """While active, ``Tensor.uniform_(a, b)`` (a = −b) fills its tensor with ``b·u``, u the next of ``draws``."""
    original = torch.Tensor.uniform_
    queue = list(draws)

    def uniform_(self: torch.Tensor, low: Any = 0.0, high: Any = 1.0, **_: Any) -> torch.Tensor:
        high = float(high)
        assert math.isclose(float(low), -high), (low, high)
        u = queue.pop(0)
        assert u.shape == self.shape, (u.shape, self.shape)
        with torch.no_grad():
            return self.copy_(u * high)

    torch.Tensor.uniform_ = uniform_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.uniform_ = original  # type: ignore[method-assign]
    assert not queue, f"{len(queue)} draws left unused"


def unit(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen) * 2 - 1


def shape_fixture(repo: Path) -> dict[str, Any]:
    path = "onmt/modules/embeddings.py"
    text, commit = source(repo, path)
    # embeddings.py imports two OpenNMT helpers that PositionalEncoding does not use beyond logging
    stubs = {"onmt": types.ModuleType("onmt"), "onmt.modules": types.ModuleType("onmt.modules"),
             "onmt.modules.util_class": types.ModuleType("onmt.modules.util_class"),
             "onmt.utils": types.ModuleType("onmt.utils"), "onmt.utils.logging": types.ModuleType("onmt.utils.logging")}
    stubs["onmt.modules.util_class"].Elementwise = nn.ModuleList  # type: ignore[attr-defined]
    stubs["onmt.utils.logging"].logger = logging.getLogger("shape-reference")  # type: ignore[attr-defined]
    sys.modules.update(stubs)
    ref = load("shape_reference", text, f"butsugiri/shape@{commit}:{path}")
    dim, k, max_len, length, batch = 16, 5, 64, 7, 3
    pe = ref.PositionalEncoding(0.0, dim, max_len=max_len, pe_noise_size=k)
    emb = torch.zeros(length, batch, dim)  # the output is the position term alone (emb·√dim = 0)
    cases = []
    pe.train()
    recorded: list[tuple[int, int, torch.Tensor]] = []
    original = torch.randint

    def randint(low: int, high: int, size: Any = None, **kw: Any) -> torch.Tensor:
        out = original(low, high, size, **kw)
        recorded.append((low, high, out.clone()))
        return out

    for seed in (1, 2):
        torch.manual_seed(seed)
        torch.randint = randint  # type: ignore[assignment]
        try:
            out = pe(emb)
        finally:
            torch.randint = original  # type: ignore[assignment]
        low, high, offsets = recorded.pop()
        cases.append({"mode": "train", "offsets": offsets.tolist(), "draw_low": low, "draw_high": high,
                      "output": as_list(out.transpose(0, 1))})
    pe.eval()
    cases.append({"mode": "eval", "output": as_list(pe(emb).transpose(0, 1))})
    for step in (0, 3, 9):
        cases.append({"mode": "step", "step": step, "output": as_list(pe(emb[:1], step=step).transpose(0, 1))})
    return {"_header": header("butsugiri/shape", commit, path, "PositionalEncoding"),
            "dim": dim, "pe_noise_size": k, "max_len": max_len, "length": length, "batch": batch, "cases": cases}


def cape_module(repo: Path) -> tuple[types.ModuleType, str, str]:
    path = "cape/cape.py"
    text, commit = source(repo, path)
    return load("cape_reference", text, f"gcambara/cape@{commit}:{path}"), commit, path


def cape1d_fixture(repo: Path) -> dict[str, Any]:
    ref, commit, path = cape_module(repo)
    dim, batch, length = 16, 3, 9
    gmax, lmax, smax = 5.0, 0.5, 1.4
    gen = torch.Generator().manual_seed(59)
    cases = []
    x = torch.zeros(batch, length, dim)

    def run(train: bool, lengths: list[int] | None = None, delta: float | None = None,
            local_divisor: float = 1.0, draws: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
        cape = ref.CAPE1d(dim, gmax, lmax, smax, normalize=True, batch_first=True)
        cape.train(train)
        x_lengths = None if lengths is None else torch.tensor(lengths)
        case: dict[str, Any] = {"mode": "train" if train else "eval", "lengths": lengths, "positions_delta": delta}
        if train:
            assert draws is not None
            order = [draws["shift"], draws["local"] / local_divisor, draws["scale"]]
            with unit_draws(order):
                out = cape.compute_pos_emb(x, x_lengths, delta)
            case.update({k: as_list(v) for k, v in draws.items()}, local_divisor=local_divisor)
        else:
            out = cape.compute_pos_emb(x, x_lengths, delta)
        case["output"] = as_list(out)
        return case

    def draws() -> dict[str, torch.Tensor]:
        return {"shift": unit(gen, batch, 1), "local": unit(gen, batch, length), "scale": unit(gen, batch, 1)}

    cases.append(run(False))
    cases.append(run(True, draws=draws()))
    cases.append(run(False, lengths=[length, 5, 2]))
    cases.append(run(True, lengths=[length, 5, 2], draws=draws()))
    alpha_draws = draws()
    cases.append(run(True, delta=0.7, draws=alpha_draws))
    cases.append(run(True, delta=0.7, draws=alpha_draws, local_divisor=0.7))
    return {"_header": header("gcambara/cape", commit, path, "CAPE1d.compute_pos_emb"),
            "dim": dim, "batch": batch, "length": length, "max_global_shift": gmax, "max_local_shift": lmax,
            "max_global_scaling": smax, "normalize": True, "cases": cases}


def cape2d_fixture(repo: Path) -> dict[str, Any]:
    ref, commit, path = cape_module(repo)
    dim, batch = 16, 2
    gmax, lmax, smax = 0.5, 0.5, 1.4
    gen = torch.Generator().manual_seed(2021)
    cases = []
    for nx, ny, train in ((4, 4, False), (3, 5, False), (6, 2, False), (4, 4, True), (5, 5, True)):
        cape = ref.CAPE2d(dim, gmax, lmax, smax, batch_first=True)
        cape.train(train)
        seen: dict[str, torch.Tensor] = {}
        augment = cape.augment_positions

        def record(x: torch.Tensor, y: torch.Tensor, augment: Any = augment) -> tuple[torch.Tensor, torch.Tensor]:
            seen["x"], seen["y"] = x.clone(), y.clone()
            x, y = augment(x, y)
            seen["x_aug"], seen["y_aug"] = x.clone(), y.clone()
            return x, y

        cape.augment_positions = record
        patches = torch.zeros(batch, nx, ny, dim)
        case: dict[str, Any] = {"mode": "train" if train else "eval", "nx": nx, "ny": ny}
        if train:
            draws = {"shift_x": unit(gen, batch, 1, 1), "shift_y": unit(gen, batch, 1, 1),
                     "local_x": unit(gen, batch, nx, ny), "local_y": unit(gen, batch, nx, ny),
                     "scale": unit(gen, batch, 1, 1)}
            with unit_draws(list(draws.values())):
                out = cape.compute_pos_emb(patches)
            case.update({k: as_list(v) for k, v in draws.items()})
        else:
            out = cape.compute_pos_emb(patches)
        case.update({k: as_list(v) for k, v in seen.items()})
        case["output"] = as_list(out)
        cases.append(case)
    return {"_header": header("gcambara/cape", commit, path, "CAPE2d.compute_pos_emb"),
            "dim": dim, "batch": batch, "max_global_shift": gmax, "max_local_shift": lmax, "max_global_scaling": smax,
            "w_x": as_list(ref.CAPE2d(dim).w_x), "w_y": as_list(ref.CAPE2d(dim).w_y), "cases": cases}


def header(repo: str, commit: str, path: str, what: str) -> dict[str, str]:
    return {"reference": f"https://github.com/{repo} {path} ({what})", "commit": commit,
            "script": "tests/reference/make_fixtures.py",
            "command": "python tests/reference/make_fixtures.py --shape PATH/TO/shape --cape PATH/TO/cape",
            "torch": torch.__version__}


def write(name: str, data: dict[str, Any]) -> None:
    DATA.mkdir(exist_ok=True)
    (DATA / name).write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {DATA / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=Path, required=True, help="clone or git directory of butsugiri/shape")
    parser.add_argument("--cape", type=Path, required=True, help="clone or git directory of gcambara/cape")
    args = parser.parse_args()
    torch.set_num_threads(1)
    write("shape.json", shape_fixture(args.shape))
    write("cape1d.json", cape1d_fixture(args.cape))
    write("cape2d.json", cape2d_fixture(args.cape))


if __name__ == "__main__":
    main()
