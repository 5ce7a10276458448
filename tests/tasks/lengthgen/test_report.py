"""The lengthgen report's long table: mean ± std over seeds, each seed's status, time per run."""

from __future__ import annotations

from types import SimpleNamespace

from posenc.tasks.lengthgen.report import long_table


def _run(seed: int, seen: float, wall: float | None, stopped: str) -> dict:
    summary = {"steps": 400, "stopped": stopped, "best_step": 300, "warmup": 100}
    if wall is not None:
        summary["wall_s"] = wall
    metrics = {"seen_seq_acc": seen, "unseen_seq_acc": 0.0, "unseen_token_acc": 0.5}
    return {"task": "reverse", "method": "ape", "seed": seed, "summary": summary, "metrics": metrics}


def test_long_table_rows_on_hand_made_results() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}, "rpe": {}})
    rows = long_table(exp, [_run(2, 0.5, 120.0, "max_steps"), _run(1, 1.0, 60.0, "patience")])
    assert len(rows) == 3  # header, rule, one row (rpe has no runs)
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    assert cells[0:2] == ["reverse", "ape"]
    assert cells[2].startswith("75.0 ± 35.4")  # seen: mean and sample std of 100 and 50 (%)
    assert cells[5] == "1: conv @ 400, 2: capped @ 400"
    assert cells[6] == "1.5"  # (60 + 120) / 2 s in minutes


def test_time_column_without_wall_clock() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}})
    assert long_table(exp, [_run(1, 1.0, None, "patience")])[2].rstrip().endswith("| – |")


def test_runs_trained_on_a_gpu_are_marked_and_timed_apart() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}})
    gpu = {**_run(2, 1.0, 30.0, "patience"), "config": {"train": {"device": "cuda"}}}
    cpu = {**_run(1, 1.0, 240.0, "patience"), "config": {"train": {"device": "cpu"}}}
    cells = [c.strip() for c in long_table(exp, [gpu, cpu])[2].strip("|").split("|")]
    assert cells[5] == "1: conv @ 400, 2: conv @ 400 GPU"
    assert cells[6] == "4.0 CPU / 0.5 GPU"
