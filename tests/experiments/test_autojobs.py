"""``posenc experiment --jobs auto``: the concurrency decision on hand-made throughputs, the caps,
the measuring controller on step logs it reads from disk, the GPU probes (faked), and the dummy
task's grid end to end on the CPU and on a faked CUDA machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from posenc.config import from_dict, merge_overrides
from posenc.experiments import gpustat, scheduler
from posenc.experiments.autojobs import AutoJobs, Limits, StepRates, cpu_auto_jobs, job_cap, next_jobs
from posenc.experiments.gpustat import GpuMonitor, GpuSample, parse_nvidia_smi
from posenc.experiments.tasks import find_task
from tests.helpers.grids import grid_of_config
from tests.helpers.tiny import assert_one_line_error, cli


@pytest.mark.parametrize(("measured", "limits", "expected"), [
    ({}, Limits(cap=8), (1, False)),                            # start: one run per GPU
    ({}, Limits(cap=8, step=2), (2, False)),                    # two GPUs: two runs
    ({}, Limits(cap=1), (1, True)),                             # nothing to try
    ({1: 30.0}, Limits(cap=8), (2, False)),                     # first level: always try one more
    ({1: 30.0, 2: 55.0}, Limits(cap=8), (3, False)),            # +83 %: keep adding
    ({1: 30.0, 2: 55.0, 3: 58.0}, Limits(cap=8), (3, True)),    # +5.5 % < 10 %: stop, 3 is the best
    ({1: 30.0, 2: 55.0, 3: 50.0}, Limits(cap=8), (2, True)),    # fell: back to 2
    ({1: 30.0, 2: 30.0}, Limits(cap=8), (1, True)),             # flat: the fewer runs
    ({1: 30.0, 2: 60.0}, Limits(cap=2), (2, True)),             # cap reached
    ({2: 60.0}, Limits(cap=3, step=2), (3, False)),             # a step clipped to the cap
    ({1: 30.0, 2: 36.0}, Limits(cap=8, min_gain=0.25), (2, True)),  # +20 % < 25 %
    ({1: 30.0, 2: 36.0}, Limits(cap=8, min_gain=0.15), (3, False)),  # +20 % > 15 %
])
def test_next_jobs(measured: dict[int, float], limits: Limits, expected: tuple[int, bool]) -> None:
    assert next_jobs(measured, limits) == expected


def test_caps() -> None:
    assert job_cap(16, 1, 36) == 16 and job_cap(16, 1, 5) == 5 and job_cap(16, 4, 36) == 4
    assert job_cap(2, 4, 36) == 1  # fewer cores than one run's threads: still one run
    assert job_cap(16, 1, 36, gpus=1, memory=(10_000.0, 80_000.0)) == 7  # floor(0.9 * 8)
    assert job_cap(16, 1, 36, gpus=2, memory=(10_000.0, 80_000.0)) == 14
    assert job_cap(16, 1, 36, gpus=1, memory=(100_000.0, 80_000.0)) == 1
    assert cpu_auto_jobs(2, 1, 4) == 2 and cpu_auto_jobs(8, 2, 3) == 3 and cpu_auto_jobs(8, 0, 30) == 8


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _simulate(tmp_path: Path, per_level: dict[int, float], ticks: int, cap: int = 8,
              memory: Any = lambda: None) -> tuple[AutoJobs, list[int]]:
    """Drive AutoJobs like the process pool does: runs start up to the allowed number (never
    stopped); each running run logs ``per_level[n] / n`` steps per second to its train.csv."""
    clock, keys, steps, allowed = Clock(), [f"cell{i}" for i in range(cap)], {}, []
    auto = AutoJobs(Limits(cap), StepRates(lambda k: tmp_path / k), cores=cap, threads=1, gpus=1,
                    memory=memory, window_s=10.0, clock=clock)
    running: list[str] = []
    jobs = auto([])
    for _ in range(ticks):
        while len(running) < jobs:
            running.append(keys[len(running)])
        clock.t += 1.0
        for key in running:
            steps[key] = steps.get(key, 0.0) + per_level[len(running)] / len(running)
            (tmp_path / key).mkdir(exist_ok=True)
            (tmp_path / key / "train.csv").write_text(f"step,loss\n{int(steps[key])},1.0\n")
        jobs = auto(list(running))
        allowed.append(jobs)
    return auto, allowed


def test_auto_jobs_adds_runs_while_throughput_rises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    auto, allowed = _simulate(tmp_path, {1: 30.0, 2: 54.0, 3: 57.0, 4: 57.0}, ticks=80)
    assert auto.final and auto.jobs == 3  # 57 < 54 * 1.1: stop; 3 measured best
    assert sorted(auto.measured) == [1, 2, 3]
    for level, value in {1: 30.0, 2: 54.0, 3: 57.0}.items():
        assert auto.measured[level] == pytest.approx(value, rel=0.05)  # integer steps, 10 s windows
    assert allowed[0] == 1 and max(allowed) == 3
    out = capsys.readouterr().out
    assert "--jobs auto: 1 runs at once: 30" in out and "keeping 3 (cap 8)" in out
    assert "chose 3" in auto.summary()


def test_auto_jobs_goes_back_when_throughput_falls(tmp_path: Path) -> None:
    auto, allowed = _simulate(tmp_path, {1: 30.0, 2: 54.0, 3: 45.0}, ticks=80)
    assert auto.final and auto.jobs == 2 and allowed[-1] == 2


def test_auto_jobs_cap_from_gpu_memory(tmp_path: Path) -> None:
    """Each run was seen to take 30 GiB of an 80 GiB GPU: at most floor(0.9 * 80 / 30) = 2 runs."""
    clock, holder = Clock(), {}

    def memory() -> tuple[float, float]:
        return 30_000.0 * holder["auto"].jobs, 80_000.0

    auto = AutoJobs(Limits(8), StepRates(lambda k: tmp_path / k), 8, 1, 1, memory, window_s=10.0, clock=clock)
    holder["auto"] = auto
    (tmp_path / "a").mkdir()
    for t in range(1, 30):
        clock.t = float(t)
        (tmp_path / "a" / "train.csv").write_text(f"step\n{30 * t}\n")
        auto(["a"])
    assert auto.measured == {1: pytest.approx(30.0)} and auto.limits.cap == 2 and auto.jobs == 2 and not auto.final


def test_unmeasured_short_runs_keep_the_first_level(tmp_path: Path) -> None:
    """Runs that never log for a whole window (replaced before it ends) measure nothing."""
    clock = Clock()
    auto = AutoJobs(Limits(4), StepRates(lambda k: tmp_path / k), 4, 1, 1, window_s=10.0, clock=clock)
    for t in range(40):
        key = f"run{t // 5}"  # a new run every 5 s
        (tmp_path / key).mkdir(exist_ok=True)
        (tmp_path / key / "train.csv").write_text(f"step\n{t % 5 + 1}\n")
        clock.t = float(t)
        assert auto([key]) == 1
    assert auto.measured == {} and "no level measured" in auto.summary()


NVIDIA_SMI = """0, GPU-aaaa, 87, 30123, 81559
1, GPU-bbbb, [N/A], 10, 81559
"""


def test_parse_nvidia_smi() -> None:
    assert parse_nvidia_smi(NVIDIA_SMI, []) == [GpuSample("0", 87.0, 30123.0, 81559.0),
                                                GpuSample("1", 0.0, 10.0, 81559.0)]
    assert parse_nvidia_smi(NVIDIA_SMI, ["1"]) == [GpuSample("1", 0.0, 10.0, 81559.0)]
    assert parse_nvidia_smi(NVIDIA_SMI, ["GPU-aaaa"]) == [GpuSample("GPU-aaaa", 87.0, 30123.0, 81559.0)]


def test_probes_faked(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys
    import types

    monkeypatch.setattr(gpustat.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert gpustat.find_probe(["0"]) is None
    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    monkeypatch.setattr("torch.cuda.utilization", lambda i: 40 + i)
    name, probe = gpustat.find_probe(["0", "3"]) or ("", None)
    assert name == "torch.cuda.utilization" and probe() == [GpuSample("0", 40.0), GpuSample("3", 41.0)]
    monkeypatch.setattr(gpustat.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    calls = []

    def run(argv: list[str], **kw: Any) -> Any:
        calls.append(argv)
        return types.SimpleNamespace(stdout=NVIDIA_SMI)

    monkeypatch.setattr(subprocess, "run", run)
    name, probe = gpustat.find_probe(["1"]) or ("", None)
    assert name == "nvidia-smi" and probe() == [GpuSample("1", 0.0, 10.0, 81559.0)]
    assert calls[0][1:] == [f"--query-gpu={gpustat.QUERY}", "--format=csv,noheader,nounits"]


def test_gpu_monitor_samples_and_summary(tmp_path: Path) -> None:
    clock, values = Clock(), iter([20.0, 60.0, 70.0])
    probe = lambda: [GpuSample("0", next(values), 1000.0, 80_000.0)]  # noqa: E731
    monitor = GpuMonitor(tmp_path / "logs" / "gpu.csv", ("nvidia-smi", probe), interval_s=5.0, clock=clock)
    for t in (0.0, 1.0, 5.0, 9.0, 10.0):
        clock.t = t
        monitor.sample(runs=2)
    rows = (tmp_path / "logs" / "gpu.csv").read_text().splitlines()
    assert rows == ["time_s,gpu,utilization_pct,memory_used_mib,memory_total_mib,runs",
                    "0.0,0,20,1000,80000,2", "5.0,0,60,1000,80000,2", "10.0,0,70,1000,80000,2"]
    assert monitor.summary().startswith("GPU utilisation: mean 50 % (min 20, max 70) over 3 samples from nvidia-smi; "
                                        "memory used at most 1000 of 80000 MiB per GPU")
    assert "not measured (neither nvidia-smi" in GpuMonitor(tmp_path / "x.csv", None).summary()
    assert not (tmp_path / "x.csv").exists()

    def broken() -> list[GpuSample]:
        raise OSError("nvidia-smi: driver not loaded")

    failing = GpuMonitor(tmp_path / "y.csv", ("nvidia-smi", broken))
    assert failing.sample(1) == [] and failing.sample(1, force=True) == []
    assert failing.summary() == "GPU utilisation: not measured: nvidia-smi failed (nvidia-smi: driver not loaded)"


def _dummy(tmp_path: Path, **base_train: Any) -> Path:
    exp = {"name": "dummy", "task": "tests.dummy_task", "out_dir": str(tmp_path / "exp"),
           "base": {"model": {"dim": 3}, "train": {"max_steps": 4, **base_train}},
           "settings": {"plain": {}}, "methods": {"nobias": {}, "bias": {"model.bias": True}}, "seeds": [1, 2]}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "dummy.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def _exp(path: Path) -> Any:
    data = yaml.safe_load(path.read_text())
    schema = find_task("tests.dummy_task").experiment_config
    return from_dict(schema, merge_overrides(data, [], schema))


def test_grid_slots_cpu(tmp_path: Path) -> None:
    grid = grid_of_config(_exp(_dummy(tmp_path)))
    cells = grid.cells()
    assert len(cells) == 4
    assert scheduler.grid_slots(grid, cells, "auto", [], 8)[:2] == (4, 2)  # min(8 // 1, 4 runs); 8 // 4 threads
    assert scheduler.grid_slots(grid, cells, "auto", [], 3)[:2] == (3, 1)
    assert scheduler.grid_slots(grid, cells, 2, [], 8)[:2] == (2, 4)
    threaded = grid_of_config(_exp(_dummy(tmp_path / "t", num_threads=3)))
    assert scheduler.grid_slots(threaded, cells, "auto", [], 8)[:2] == (2, 3)  # 8 cores // 3 threads
    assert scheduler.grid_slots(threaded, cells, 4, [], 8)[:2] == (4, 3)  # the config's threads win
    assert scheduler.grid_slots(grid, cells, "auto", ["0"], 8)[:2] == (4, 2)  # every run on the CPU: the CPU rule


def test_cli_jobs_auto_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "usable_cores", lambda: 2)
    monkeypatch.setattr(scheduler, "visible_gpus", lambda: [])
    code, out, _ = cli(capsys, "experiment", str(_dummy(tmp_path)), "--jobs", "auto")
    assert code == 0 and out.count("done ") == 4
    assert "--jobs auto: 2 runs at once (no GPU: min(2 cores // 1 threads per run, 4 runs))" in out
    assert len(list((tmp_path / "exp" / "logs").glob("*.log"))) == 4
    assert not (tmp_path / "exp" / "logs" / "gpu.csv").exists()


def test_cli_jobs_auto_on_faked_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """GPUs faked (visible ids, an nvidia-smi probe): the grid samples them to logs/gpu.csv and
    says so in one line; 4-step runs are too short for a measuring window, so one run at a time."""
    monkeypatch.setattr(scheduler, "usable_cores", lambda: 2)
    monkeypatch.setattr(scheduler, "visible_gpus", lambda: ["0"])
    probe = lambda: [GpuSample("0", 50.0, 2000.0, 80_000.0)]  # noqa: E731
    monkeypatch.setattr(scheduler, "find_probe", lambda gpus: ("nvidia-smi", probe))
    code, out, _ = cli(capsys, "experiment", str(_dummy(tmp_path)), "base.train.device=auto", "--jobs", "auto")
    assert code == 0 and out.count("done ") == 4
    assert "GPU utilisation: mean 50 % (min 50, max 50)" in out and "memory used at most 2000 of 80000 MiB" in out
    assert "--jobs auto: no level measured" in out and "ran 1 at once" in out
    rows = (tmp_path / "exp" / "logs" / "gpu.csv").read_text().splitlines()
    assert rows[0].startswith("time_s,gpu,utilization_pct")
    assert rows[1].split(",")[1:] == ["0", "50", "2000", "80000", "0"]


@pytest.mark.parametrize(("jobs", "needle"), [("0", "--jobs must be >= 1, got 0"),
                                              ("many", "--jobs must be a number >= 1 or 'auto', got 'many'")])
def test_bad_jobs(capsys: pytest.CaptureFixture[str], tmp_path: Path, jobs: str, needle: str) -> None:
    code, _, err = cli(capsys, "experiment", str(_dummy(tmp_path)), "--jobs", jobs)
    assert_one_line_error(code, err, needle)
    assert not (tmp_path / "exp").exists()


def test_auto_refused_with_submitit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "experiment", str(_dummy(tmp_path)), "--jobs", "auto", "--backend", "submitit")
    assert_one_line_error(code, err, "--jobs auto needs --backend local")


def test_auto_jobs_reads_logs_only_until_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A counting spy on the train.csv reader: while a level is measured each poll reads each running
    run's train.csv once; the poll that settles the last level is the last to read; none after it."""
    from posenc.experiments import autojobs

    reads: list[str] = []
    real = autojobs.last_row

    def spy(path: Path) -> dict[str, str] | None:
        reads.append(path.parent.name)
        return real(path)

    monkeypatch.setattr(autojobs, "last_row", spy)
    clock = Clock()
    auto = AutoJobs(Limits(2), StepRates(lambda k: tmp_path / k), 2, 1, 1, window_s=10.0, clock=clock)
    per_poll, polled, finals = [], [], []
    for t in range(1, 60):
        running = ["a", "b"][:auto.jobs]
        clock.t = float(t)
        for key in running:
            (tmp_path / key).mkdir(exist_ok=True)
            (tmp_path / key / "train.csv").write_text(f"step,loss\n{20 * t},1.0\n")
        before = len(reads)
        auto(running)
        per_poll.append(sorted(reads[before:]))
        polled.append(running)
        finals.append(auto.final)
    settled = finals.index(True)
    assert auto.measured == {1: pytest.approx(20.0), 2: pytest.approx(40.0)} and auto.jobs == 2
    assert per_poll[:settled + 1] == polled[:settled + 1]  # measuring: each running log once per poll
    assert per_poll[settled] == ["a", "b"]  # the final measurement itself reads both logs
    assert per_poll[settled + 1:] == [[]] * (len(per_poll) - settled - 1)  # decided: no more reads


def test_auto_jobs_nothing_to_decide_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cap of one run leaves nothing to measure: the controller never opens a train.csv."""
    from posenc.experiments import autojobs

    reads: list[Path] = []
    monkeypatch.setattr(autojobs, "last_row", lambda path: reads.append(path))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "train.csv").write_text("step,loss\n5,1.0\n")
    auto = AutoJobs(Limits(1), StepRates(lambda k: tmp_path / k), 1, 1, 1, window_s=10.0, clock=Clock())
    assert auto.final and [auto(["a"]) for _ in range(3)] == [1, 1, 1] and reads == []
