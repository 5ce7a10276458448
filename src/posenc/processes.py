"""A pool of worker processes, pinned to GPUs round robin: N processes at a time, several
small runs packed onto each visible GPU, the CPU cores split between them. Used by the
experiment grids (``posenc experiment NAME --jobs N``) of every task."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any, Callable


def visible_gpus() -> list[str]:
    """GPU ids a worker may be pinned to ([] on a CPU-only machine)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable torch/CUDA: CPU workers
        return []


def worker_env(slot: int, jobs: int, gpus: list[str], cores: int | None = None,
               threads: int | None = None) -> dict[str, str]:
    """Environment of the worker in ``slot``: its GPU (round robin) and its CPU threads
    (``threads`` when given, e.g. the run's ``train.num_threads``, else its share ``cores // jobs``)."""
    env = dict(os.environ)
    threads = threads if threads and threads > 0 else max(1, (cores or os.cpu_count() or 1) // jobs)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), POSENC_NUM_THREADS=str(threads))
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    src = str(Path(__file__).resolve().parents[1])  # src/: the posenc package this process runs
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


PR_SET_PDEATHSIG = 1  # linux/prctl.h
#: Seconds a worker gets to exit after SIGTERM before it is killed.
STOP_GRACE_S = 5.0


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` on Linux (resolved in the parent: a forked child must not dlopen)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive SIGKILL when this process dies, however it
    dies (SIGKILL included): ``prctl(PR_SET_PDEATHSIG)`` on Linux; a child whose parent is
    already gone by then exits at once."""
    prctl, parent = _load_prctl(), os.getpid()

    def hook() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return hook


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the worker's process group (the worker and anything it started)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_workers(procs: list[subprocess.Popen[bytes]], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every worker's group, wait up to ``grace_s`` seconds, then SIGKILL what is left."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


class Interrupted(KeyboardInterrupt):
    """The :class:`KeyboardInterrupt` a signal raises inside :func:`interrupt_on_signals`."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_exit_code(err: KeyboardInterrupt) -> int:
    """The shell's exit status for a process stopped by a signal: 128 + its number (SIGINT 130,
    SIGTERM 143); a plain Ctrl-C (Python's own KeyboardInterrupt) is SIGINT's."""
    return 128 + int(getattr(err, "signum", signal.SIGINT))


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """While inside, SIGTERM (and SIGINT) raise :class:`KeyboardInterrupt` in the main thread,
    so ``finally`` blocks run and the workers are stopped; the old handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _start(argv: list[str], log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], IO[str]]:
    """One worker in its own process group, killed with this process, logging to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("a", encoding="utf-8")  # appended: an earlier attempt's log stays readable
    try:
        fh.write(f"==== posenc worker started {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv[-3:])}\n")
        fh.flush()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with_parent())
    except BaseException:
        fh.close()
        raise
    return proc, fh


#: ``slots(running_keys)`` → how many workers may run now (``--jobs auto`` changes it while the grid runs).
SlotLimit = Callable[[list[Any]], int]


#: ``admit(key)`` → whether the job may start now (False: it is dropped, never started).
Admit = Callable[[Any], bool]


def run_processes(jobs: list[tuple[Any, list[str], Path]], slots: int | SlotLimit,
                  finished: Callable[[Any, int], str], poll_s: float = 0.2, progress: Any = None,
                  threads: int | None = None, admit: Admit | None = None, stop_at: float | None = None,
                  dropped: Callable[[Any], None] | None = None) -> list[Any]:
    """Run ``(key, argv, log)`` jobs, at most ``slots`` at once (a number, or a callable asked after
    every poll with the running keys), each pinned by :func:`worker_env` (slot ``k`` to GPU
    ``k % n_gpus``; ``threads`` CPU threads each when given); prints ``finished(key, returncode)``
    as each ends and returns the keys of the failed ones. ``progress`` (optional): called with the
    running keys after every poll, and its ``clear()`` before a finished line is printed (e.g.
    :class:`posenc.experiments.progress.Progress`).

    ``admit`` (optional) is asked before each job starts; a job it refuses is dropped. At
    ``stop_at`` (wall clock, :func:`time.time`) no job starts any more: ``dropped(key)`` is called
    for each job still waiting for a slot, and the running ones are stopped (:func:`stop_workers`);
    they count as failed.

    Workers die with this process (:func:`die_with_parent`, even on SIGKILL); on SIGTERM, SIGINT
    or any error here they are stopped (:func:`stop_workers`) before the exception propagates."""
    limit: SlotLimit = slots if callable(slots) else (lambda _keys, n=int(slots): n)
    gpus, queue, failed = visible_gpus(), list(jobs), []
    running: dict[subprocess.Popen[bytes], tuple[Any, int, IO[str]]] = {}
    with interrupt_on_signals():
        try:
            while queue or running:
                if stop_at is not None and time.time() >= stop_at:
                    _drop(queue, dropped)
                    stop_workers(list(running))
                allowed = max(1, limit([key for key, _, _ in running.values()]))
                while queue and len(running) < allowed:
                    used = {slot for _, slot, _ in running.values()}
                    slot = min(set(range(allowed)) - used)
                    key, argv, log = queue.pop(0)
                    if admit is not None and not admit(key):
                        continue
                    proc, fh = _start(argv, log, worker_env(slot, allowed, gpus, threads=threads))
                    running[proc] = (key, slot, fh)
                time.sleep(poll_s)
                for proc in [p for p in running if p.poll() is not None]:
                    key, slot, fh = running.pop(proc)
                    fh.close()
                    if progress is not None:
                        progress.clear()
                    print(finished(key, proc.returncode), flush=True)
                    if proc.returncode != 0:
                        failed.append(key)
                if progress is not None:
                    progress([key for key, _, _ in running.values()])
        finally:
            stop_workers(list(running))
            for _, _, fh in running.values():
                fh.close()
    return failed


def _drop(queue: list[tuple[Any, list[str], Path]], dropped: Callable[[Any], None] | None) -> None:
    """Empty ``queue`` (jobs that never start), telling ``dropped`` each one's key."""
    waiting = [key for key, _, _ in queue]
    queue.clear()
    if dropped is not None:
        for key in waiting:
            dropped(key)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (EPERM: it exists, owned by someone else)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    return True
