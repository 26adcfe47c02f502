"""CPU time of processes from /proc, for benchmarks that say what bound a run: a sampler that
follows this process's descendants whose command line names something (a softswitch, say)
and tells how much CPU they used between two wall-clock times.

    with CpuSampler("inaemu.softswitch") as cpu:
        ...                                  # start the switch, run the workload
    seconds = cpu.used(start, end)          # summed over the matching processes
    first, last = cpu.span()                # when matching processes were seen

Per-thread run times come from /proc/PID/task/TID/schedstat (nanoseconds), summed over a
process's threads; between samples (every `period` seconds) the time is interpolated.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from types import TracebackType


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds process `pid` has run, over all its threads; None if it is gone."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class CpuSampler:
    """Samples, every `period` seconds, the CPU seconds of this process's descendants whose
    command line contains `needle`."""

    def __init__(self, needle: str, period: float = 0.01) -> None:
        self.needle = needle
        self.period = period
        self.samples: dict[int, list[tuple[float, float]]] = {}  # pid -> [(wall, cpu)]
        self._names: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            now = time.time()
            for pid in descendants(me):
                if not self._names.get(pid):  # again until it matches: it may exec later
                    self._names[pid] = self.needle in command_line(pid)
                if self._names[pid]:
                    cpu = cpu_seconds(pid)
                    if cpu is not None:
                        self.samples.setdefault(pid, []).append((now, cpu))
            self._stop.wait(self.period)

    def span(self) -> tuple[float, float]:
        """The wall-clock times of the first and the last sample of a matching process."""
        times = [w for series in self.samples.values() for w, _ in series]
        if not times:
            raise ValueError(f"no process matching {self.needle!r} was seen")
        return min(times), max(times)

    def used(self, start: float, end: float) -> float:
        """CPU seconds the matching processes used between wall-clock times start and end."""
        return sum(_at(s, end) - _at(s, start) for s in self.samples.values() if s)


def _at(series: list[tuple[float, float]], t: float) -> float:
    """A process's CPU seconds at wall-clock time t, interpolated between samples."""
    times = [w for w, _ in series]
    i = bisect_left(times, t)
    if i == 0:
        return series[0][1]
    if i == len(series):
        return series[-1][1]
    (w0, c0), (w1, c1) = series[i - 1], series[i]
    return c0 + (c1 - c0) * (t - w0) / (w1 - w0) if w1 > w0 else c1
