"""Every command of README's "Next steps" has a measured time in docs/results/next_steps/times.csv,
and the README states that time beside it: a time no 2-core machine can beat (at least the CPU time
spread over both cores); the lengthgen_small row is its committed run's record."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from tests.helpers.committed import gnu_time

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "next_steps" / "times.csv"


def next_steps() -> list[tuple[str, str]]:
    """(comment of its step, command) for each command of the README's next-steps block; a step's
    comment is the run of ``#`` lines above its first command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Next steps\n\n```bash\n(.*?)```", text, re.S).group(1)
    out, comment, fresh = [], [], True
    for line in block.splitlines():
        if line.startswith("#"):
            comment = (comment if not fresh else []) + [line.lstrip("# ")]
            fresh = False
        elif line.strip() and not line.startswith(". "):
            out.append((" ".join(" ".join(comment).split()), line.strip()))
            fresh = True
    return out


def rows() -> dict[str, dict[str, str]]:
    with RECORD.open(encoding="utf-8", newline="") as f:
        return {row["command"]: row for row in csv.DictReader(f)}


def stated(seconds: int) -> str:
    """How the README states an estimate: seconds under a minute, whole minutes above."""
    return f"~{seconds} s" if seconds < 60 else f"~{seconds // 60} min"


def test_every_next_step_has_a_measured_time_and_states_it() -> None:
    steps, record = next_steps(), rows()
    assert len(steps) >= 5 and {command for _, command in steps} == set(record)
    for comment, command in steps:
        row = record[command]
        estimate, cpu = int(row["estimate_s"]), float(row["user_s"]) + float(row["sys_s"])
        assert estimate % (60 if estimate >= 60 else 5) == 0, command  # ~N s in 5 s steps, or ~N min
        assert f"{stated(estimate)} on 2 cores" in comment, (command, comment)
        assert estimate >= cpu / 2, command  # two cores cannot do the work in less
        assert row["exit"] == "0" and row["basis"].strip(), command


def test_the_lengthgen_small_row_is_its_committed_record() -> None:
    row = next(r for c, r in rows().items() if "lengthgen_small" in c)
    cpu, wall = gnu_time(ROOT / "docs" / "results" / "lengthgen_small" / "time.txt")
    assert round(float(row["user_s"]) + float(row["sys_s"]), 2) == round(cpu, 2)
    assert round(float(row["wall_s"]), 2) == round(wall, 2)


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split()).replace("–", "-")


def test_the_paper_grids_are_named_with_their_config_headers_estimates() -> None:
    readme = _flat(ROOT / "README.md")
    configs = ROOT / "src" / "posenc" / "configs" / "experiments"
    for name, estimate in (("shape_small", "4-6 days"), ("shape_gpu", "1-1.5 h of training on one H100")):
        assert estimate in _flat(configs / f"{name}.yaml") and estimate in readme, name


def test_the_record_explains_its_numbers_from_the_rows() -> None:
    doc, record = _flat(RECORD.parent / "README.md"), rows()
    cpu = {c: float(r["user_s"]) + float(r["sys_s"]) for c, r in record.items()}
    lengthgen, fsdd = (next(v for c, v in cpu.items() if name in c) for name in ("lengthgen_small", "fsdd_small"))
    assert f"57 % of its {lengthgen:.0f} s" in doc and f"its {fsdd:.0f} s of CPU time here" in doc
    assert "measured at 3 min 52 s on the idle EPYC VM" in doc
    assert "**3 min 52 s** of wall time for the 15 runs" in _flat(ROOT / "docs" / "results_speech.md")


def test_readme_states_the_measured_suite_time() -> None:
    """The README's `make test` time is docs/perf/test_suite.json's: the whole suite on both float
    paths of the development machine, green, with only the compiled-step tests skipped on the default one."""
    import json

    record = json.loads((ROOT / "docs" / "perf" / "test_suite.json").read_text(encoding="utf-8"))
    runs = {r["float_path"]: r for r in record["runs"]}
    assert set(runs) == {"native", "default"} and all(r["failed"] == 0 and r["exit_status"] == 0 for r in runs.values())
    assert runs["default"]["skipped"] - runs["native"]["skipped"] == len(runs["default"]["skipped_only_here"]) == 2
    minutes = [r["pytest_seconds"] / 60 for r in runs.values()]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"~{round(min(minutes))}–{round(max(minutes))} min on one core of a 2-core EPYC" in readme
