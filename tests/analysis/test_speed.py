"""SHAPE Tables 2/6 and Fig. 8-9 from hand-made training logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.analysis.speed import speed
from posenc.errors import DataError


def write_run(root: Path, name: str, wall: list[float], tps: list[float], bleu: list[str], loss: list[float]) -> Path:
    run = root / name
    run.mkdir()
    train = ["step,epoch,loss,nll,ppl,lr,tokens,wall_s,tokens_per_s"]
    train += [f"{100 * (i + 1)},1,5.0,5.0,148.4,0.001,{1000 * (i + 1)},{w},{t}" for i, (w, t) in enumerate(zip(wall, tps))]
    (run / "train.csv").write_text("\n".join(train) + "\n")
    valid = ["step,loss,ppl,metric"] + [f"{100 * (i + 1)},{v},0,{b}" for i, (v, b) in enumerate(zip(loss, bleu))]
    (run / "valid.csv").write_text("\n".join(valid) + "\n")
    return run


def test_speed_table(tmp_path):
    ape = write_run(tmp_path, "ape", [10, 20], [1000, 1000], ["20", "25"], [3.0, 2.0])
    rpe = write_run(tmp_path, "rpe", [11, 22], [900, 920], ["21", "24"], [3.1, 2.1])
    shape = write_run(tmp_path, "shape", [10, 19], [1010, 1010], ["", "26"], [2.9, 1.9])
    out = tmp_path / "out"
    rows = speed({"ape": ape, "rpe": rpe, "shape": (shape / "train.csv", shape / "valid.csv")}, out, params={"ape": 61, "rpe": 62})
    assert [r["speed"] for r in rows] == [1.0, pytest.approx(0.91), pytest.approx(1.01)]
    assert [r["train_time_s"] for r in rows] == [20.0, 22.0, 19.0]
    assert [(r["best_bleu"], r["best_step"]) for r in rows] == [(25.0, 200), (24.0, 200), (26.0, 200)]
    assert (out / "speed.csv").read_text() == (
        "model,steps,train_time_s,s_per_step,tokens_per_s,speed,best_bleu,best_step,final_valid_loss,params\n"
        "ape,200,20.0,0.1,1000.0,1.0,25.0,200,2.0,61\n"
        "rpe,200,22.0,0.11,910.0,0.91,24.0,200,2.1,62\n"
        "shape,200,19.0,0.095,1010.0,1.01,26.0,200,1.9,\n"
    )
    assert (out / "speed.md").read_text().splitlines()[3].startswith("| rpe | 200 | 22.0 | 0.11 | 910.0 | 0.91 |")
    assert (out / "curves_steps.png").is_file() and (out / "curves_wall.png").is_file()


def test_speed_errors(tmp_path):
    with pytest.raises(DataError, match="training log not found"):
        speed({"ape": tmp_path / "missing"}, tmp_path / "out")
    run = tmp_path / "bad"
    run.mkdir()
    (run / "train.csv").write_text("step,wall_s\n1,2\n")
    (run / "valid.csv").write_text("step,loss\n1,2\n")
    with pytest.raises(DataError, match="missing column 'tokens_per_s'"):
        speed({"bad": run}, tmp_path / "out")
