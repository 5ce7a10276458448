"""The lengthgen report's long table: mean ± std over seeds, each seed's status, time per run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posenc.tasks.lengthgen.report import long_table


def _run(seed: int, seen: float, wall: float | None, stopped: str, device: str = "cpu") -> dict:
    summary = {"steps": 400, "stopped": stopped, "best_step": 300, "warmup": 100, "flat": True}
    if wall is not None:
        summary["wall_s"] = wall
    metrics = {"seen_seq_acc": seen, "unseen_seq_acc": 0.0, "unseen_token_acc": 0.5}
    record = {"fingerprint": {"train": {}}, "extension": {"device": device}, "evaluation": None}
    return {"task": "reverse", "method": "ape", "seed": seed, "record": record, "summary": summary, "metrics": metrics}


def test_long_table_rows_on_hand_made_results() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}, "rpe": {}})
    rows = long_table(exp, [_run(2, 0.5, 120.0, "max_steps"), _run(1, 1.0, 60.0, "patience")])
    assert len(rows) == 3  # header, rule, one row (rpe has no runs)
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    assert cells[0:2] == ["reverse", "ape"]
    assert cells[2].startswith("75.0 ± 35.4")  # seen: mean and sample std of 100 and 50 (%)
    assert cells[5] == "1: conv @ 400, 2: capped @ 400"
    assert cells[6] == "1.5"  # (60 + 120) / 2 s in minutes


def test_a_run_without_a_validation_curve_is_no_curve_not_converged() -> None:
    """A patience stop whose flatness was never tested (no ``flat``, no valid.csv) reads
    "no curve"; with its validation curve it is judged by the flatness test."""
    from posenc.tasks.lengthgen.report import run_status

    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}})
    bare = _run(1, 1.0, 60.0, "patience")
    del bare["summary"]["flat"]
    assert run_status(bare) == "no curve"
    assert [c.strip() for c in long_table(exp, [bare])[2].strip("|").split("|")][5] == "1: no curve @ 400"
    falling = [[100 * i, 2.0 - 0.01 * i + (0.001 if i % 2 else -0.001)] for i in range(1, 9)]
    assert run_status(dict(bare, valid_history=falling)) == "not flat"
    assert run_status(dict(bare, valid_history=[[100 * i, 1.0 + (0.01 if i % 2 else 0)] for i in range(1, 9)])) == "converged"


def test_time_column_without_wall_clock() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}})
    assert long_table(exp, [_run(1, 1.0, None, "patience")])[2].rstrip().endswith("| – |")


def test_runs_trained_on_a_gpu_are_marked_and_timed_apart() -> None:
    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}})
    gpu, cpu = _run(2, 1.0, 30.0, "patience", device="cuda"), _run(1, 1.0, 240.0, "patience")
    cells = [c.strip() for c in long_table(exp, [gpu, cpu])[2].strip("|").split("|")]
    assert cells[5] == "1: conv @ 400, 2: conv @ 400 GPU"
    assert cells[6] == "4.0 CPU / 0.5 GPU"


def test_report_cli_never_writes_over_a_users_files(tmp_path, capsys) -> None:
    """OUT_DIR holding a user's file: one-line refusal, exit 2, the file intact; a new directory is
    written and marked, and posenc's own report directory is rewritten."""
    from pathlib import Path

    from posenc.runs.ownership import dir_kind
    from posenc.tasks.lengthgen.report import main

    root = Path(__file__).resolve().parents[3] / "docs" / "results" / "lengthgen_cpu"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "README.md").write_text("my notes")
    assert main(["lengthgen_cpu", str(root), str(theirs)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: OUT_DIR") and "README.md" in err and err.count("\n") == 1
    assert [p.name for p in theirs.iterdir()] == ["README.md"] and (theirs / "README.md").read_text() == "my notes"
    ours = tmp_path / "ours"
    assert main(["lengthgen_cpu", str(root), str(ours)]) == 0 and dir_kind(ours) == "report"
    assert main(["lengthgen_cpu", str(root), str(ours)]) == 0
    assert "| parity | ape |" in (ours / "README.md").read_text()
    assert main(["lengthgen_cpu"]) == 2


def test_committed_runs_that_reached_the_cap_read_capped() -> None:
    """Two committed lengthgen_cpu runs were recorded "patience" at their cap step (the
    older trainer let patience win there); read with the cap from their config they are capped, and
    their stored status (re-derived by the one rule) says the same."""
    import json
    from pathlib import Path

    from posenc.tasks.lengthgen.report import run_status, with_curves

    root = Path(__file__).resolve().parents[3] / "docs" / "results" / "lengthgen_cpu"
    runs = {p.parent.relative_to(root).as_posix(): json.loads(p.read_text(encoding="utf-8"))
            for p in root.glob("*/*/seed*/results.json")}
    runs = {k: r for k, r in zip(runs, with_curves(list(runs.values()), root))}
    at_cap = sorted(k for k, r in runs.items() if r["summary"]["stopped"] == "patience"
                    and r["summary"]["steps"] >= r["record"]["extension"]["max_steps"])
    assert at_cap == ["parity/ape/seed1", "reverse/ape+randomized/seed2"]
    assert all(runs[k]["summary"]["status"] == run_status(runs[k]) == "still improving" for k in at_cap)
    # the other 53 patience stops recorded neither a flatness nor a validation curve: "no curve"
    status = {k: run_status(r) for k, r in runs.items()}
    assert sum(s == "no curve" for s in status.values()) == sum(
        r["summary"]["status"] == "no curve" for r in runs.values()) == 53
    assert "converged" not in status.values()


def test_leaderboard_ranks_fitted_cells_only() -> None:
    """Only cells whose every seed is >= 95 % on seen lengths are ranked (by unseen sequence
    accuracy); the others are counted with how many seeds fell short."""
    from posenc.tasks.lengthgen.report import leaderboard

    def run(method: str, seed: int, seen: float, unseen: float, stopped: str = "patience") -> dict:
        r = _run(seed, seen, 60.0, stopped)
        r["method"], r["metrics"]["unseen_seq_acc"], r["metrics"]["unseen_token_acc"] = method, unseen, 0.9
        return r

    exp = SimpleNamespace(tasks=["reverse"], methods={"ape": {}, "rpe": {}, "nope": {}})
    results = [run("ape", 1, 1.0, 0.1), run("ape", 2, 0.95, 0.3, "max_steps"),
               run("rpe", 1, 1.0, 0.6), run("rpe", 2, 0.9, 0.8), run("nope", 1, 0.99, 0.5), run("nope", 2, 1.0, 0.5)]
    lines = leaderboard(exp, results)
    assert lines[2:4] == ["| reverse | 1 | nope | 50.0 ± 0.0 | 90.0 ± 0.0 | 2/2 |",
                          "| reverse | 2 | ape | 20.0 ± 14.1 | 90.0 ± 0.0 | 1/2 |"]
    assert lines[-1] == "Left out (1 cells): reverse / rpe (1 of 2 seeds below 95 % seen)."
    exp.seeds = [1, 2, 3]  # a grid reported before its third seed: no cell is ranked on two
    assert leaderboard(exp, results)[2:] == ["", "Left out (3 cells): reverse / ape (2 of 3 seeds trained); reverse / rpe "
                                             "(1 of 2 seeds below 95 % seen); reverse / nope (2 of 3 seeds trained)."]


def test_plot_draws_sequence_and_token_accuracy_and_dashes_unfitted_cells(tmp_path, monkeypatch) -> None:
    """Each task's plot: two panels (sequence, per-token accuracy), each line the mean over seeds at
    every length; a cell with a seed below 95 % seen is dashed and labelled 'not fitted'."""
    import matplotlib.pyplot as plt

    from posenc.tasks.lengthgen import report

    def run(method: str, seed: int, seen: float, seq: list[float], tok: list[float]) -> dict:
        r = _run(seed, seen, 60.0, "patience")
        r["method"], r["metrics"]["train_max_length"] = method, 10
        r["metrics"]["by_length"] = [{"length": n, "seq_acc": s, "token_acc": t} for n, s, t in zip((5, 15), seq, tok)]
        return r

    results = [run("ape", 1, 1.0, [1.0, 0.2], [1.0, 0.6]), run("ape", 2, 1.0, [1.0, 0.4], [1.0, 0.8]),
               run("rpe", 1, 0.5, [0.5, 0.0], [0.9, 0.3])]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read its lines
    report.plot_task(SimpleNamespace(tasks=["reverse"], methods={"ape": {}, "rpe": {}}), results, "reverse", tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 0
    seq, tok = figures[0].axes
    lines = {ax: {ln.get_label(): ln for ln in ax.get_lines()} for ax in (seq, tok)}
    assert list(lines[seq]["ape"].get_ydata()) == pytest.approx([1.0, 0.3])
    assert list(lines[tok]["ape"].get_ydata()) == pytest.approx([1.0, 0.7])
    assert lines[seq]["ape"].get_linestyle() == "-" and lines[tok]["rpe (not fitted)"].get_linestyle() == "--"
    assert list(lines[tok]["rpe (not fitted)"].get_ydata()) == pytest.approx([0.9, 0.3])
