"""`inaemu demo` end to end, the fast data plane beside the reference one, in interleaved pairs.

    python bench/bench_demo.py [--repeat 5] [--window 256 64] [--workers 4] [--size 2000000]

For each window: `--repeat` pairs of runs of the demo (`run_demo`, what `inaemu demo` runs: a
softswitch process programmed over P4Runtime, one process per worker with the real client
and codec, every result checked), fast and reference alternately so that both see the same
machine. Per data plane it prints the median time of the allreduce (the slowest worker's,
as the demo reports it) with the spread over the runs, the ratio reference / fast of the
medians (and of each pair), and what the processes did meanwhile: each worker's CPU seconds
(its own process time), the switch process's (from /proc, `proc_cpu`) and the retransmissions.
What bound a data plane's runs is read from those: the switch when its one data-plane thread
was busy most of the allreduce, the hosts' CPU when the processes together kept the cores
busy, else waiting (round trips, timers, and other programs on a shared machine).

Numbers depend on the machine: the run prints its configuration and load average first.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass

import numpy as np
from proc_cpu import CpuSampler

from inaemu.cli.demo import DemoOptions, run_demo
from inaemu.common import args as arg
from inaemu.common.wire import MAX_FANIN

PLANES = ("fast", "reference")
BUSY = 0.8  # a share of the allreduce's wall time that counts as "busy"


@dataclass
class DemoRun:
    seconds: float  # the slowest worker's allreduce
    workers_cpu: list[float]
    switch_cpu: float
    retransmissions: int


def one_run(opts: DemoOptions) -> DemoRun:
    with CpuSampler("inaemu.softswitch") as cpu:
        report = run_demo(opts)
    if not report.ok:
        raise SystemExit(f"bench_demo: a result was wrong:\n{report.render()}")
    start = min(r.started for r in report.results)
    end = max(r.started + r.seconds for r in report.results)
    return DemoRun(
        max(r.seconds for r in report.results),
        [r.cpu_seconds for r in report.results],
        cpu.used(start, end),
        sum(r.retransmissions for r in report.results),
    )


def bound(runs: list[DemoRun], cores: int) -> str:
    """What the median run of a data plane was bound by (the module doc)."""
    run = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    switch = run.switch_cpu / run.seconds
    workers = sum(run.workers_cpu) / run.seconds
    shares = f"the switch {switch:.0%} of a core, the workers {workers:.1f} cores"
    if switch >= BUSY:
        return f"the switch's data plane, its one thread ({shares})"
    if switch + workers >= BUSY * cores:
        return f"the hosts' CPU: {cores} cores busy ({shares})"
    return (
        f"round trips between processes sharing {cores} cores, {switch + workers:.1f} of them "
        f"busy ({shares})"
    )


def report(window: int, runs: dict[str, list[DemoRun]], cores: int) -> None:
    med = {p: statistics.median(r.seconds for r in rs) for p, rs in runs.items()}
    for plane, rs in runs.items():
        secs = [r.seconds for r in rs]
        workers = statistics.median(statistics.mean(r.workers_cpu) for r in rs)
        switch = statistics.median(r.switch_cpu for r in rs)
        retx = statistics.median(r.retransmissions for r in rs)
        print(
            f"{window:>6} {plane:<10} {med[plane]:>7.3f} s ({min(secs):.3f}-{max(secs):.3f})  "
            f"CPU per worker {workers:.3f} s, switch {switch:.3f} s; retx {retx:g}; "
            f"bound by {bound(rs, cores)}"
        )
    pairs = [r.seconds / f.seconds for f, r in zip(runs["fast"], runs["reference"], strict=True)]
    print(
        f"{window:>6} {'ratio':<10} reference / fast {med['reference'] / med['fast']:.2f}x "
        f"(medians; pairs {min(pairs):.2f}-{max(pairs):.2f}x)"
    )


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=arg.REPEAT, default=5, help="pairs per window (default 5)")
    ap.add_argument(
        "--window",
        type=arg.WINDOW,
        nargs="+",
        default=[DemoOptions.window],
        help=f"job windows (slot pools) to measure (default {DemoOptions.window})",
    )
    ap.add_argument("--workers", type=arg.positive("workers", MAX_FANIN), default=4)
    ap.add_argument("--size", type=arg.ELEMENTS, default=DemoOptions.size)
    ap.add_argument("--codec", default=DemoOptions.codec)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print(
        f"# inaemu demo benchmark: {args.workers} workers x {args.size:,} float32, codec "
        f"{args.codec}, {args.repeat} pairs per window; python {platform.python_version()}, "
        f"numpy {np.__version__}, {cores} cpus, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'window':>6} {'dataplane':<10} {'allreduce: median (min-max)':<28}")
    for window in args.window:
        runs: dict[str, list[DemoRun]] = {p: [] for p in PLANES}
        for _ in range(args.repeat):
            for plane in PLANES:
                opts = DemoOptions(
                    workers=args.workers,
                    size=args.size,
                    codec=args.codec,
                    window=window,
                    progress=False,
                    dataplane=plane,
                )
                runs[plane].append(one_run(opts))
                time.sleep(0.5)
        report(window, runs, cores)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
