"""DDP training through the softswitch against gloo: time per iteration, in interleaved pairs.

    python bench/bench_ddp.py [--repeat 3] [--steps 100] [--window 64 256] [--workers 4]

Runs `inaemu train examples/train_ddp.py` (the launcher: embedded softswitches with the fast
data plane, the job installed, one process per worker) once per backend and repeat, gloo and
ina-fixedpoint alternately so that both see the same machine, and reads each run's
`train.json`: the median iteration (forward, backward with the allreduce, optimizer step; the
slowest rank) and the allreduce's part of it, over the iterations after the first (the first
loads the client's and the codec's compiled kernels). It prints per backend the median over
the runs with their spread, the ratio ina-fixedpoint / gloo of the medians (and per pair),
and what bound INA's iterations: the allreduce's share of the iteration, and the switch
process's CPU per iteration while the workers ran (from /proc, `proc_cpu`), i.e. whether the
switch's data plane or the round trips between processes sharing the cores took the time.
gloo runs over the machine's loopback TCP, with no switch in between.

Numbers depend on the machine: the run prints its configuration and load average first.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from proc_cpu import CpuSampler

from inaemu.common import args as arg

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "train_ddp.py"
INAEMU = Path(sys.executable).with_name("inaemu")
BACKENDS = ("gloo", "ina-fixedpoint")


@dataclass
class TrainRun:
    iteration_ms: float  # median over the iterations after the first (the slowest rank's)
    allreduce_ms: float
    iterations: int
    train_seconds: float  # the iterations after the first, summed
    switch_cpu: float  # the softswitch's CPU seconds while the workers ran


def slowest_rank(records: Path, key: str) -> list[float]:
    """Per iteration after the first, the largest `key` over the ranks (seconds)."""
    per_it: dict[int, float] = {}
    for path in records.glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            it = int(rec["iteration"])
            if it > 0:
                per_it[it] = max(per_it.get(it, 0.0), float(rec[key]))
    return [per_it[i] for i in sorted(per_it)]


def one_run(backend: str, window: int, steps: int, workers: int) -> TrainRun:
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as out:
        argv = [
            str(INAEMU), "train", "--backend", backend, "--workers", str(workers),
            "--window", str(window), "--out", out, str(SCRIPT), "--steps", str(steps),
        ]  # fmt: skip
        with CpuSampler("inaemu.softswitch") as switch, CpuSampler(SCRIPT.name) as scripts:
            proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench_ddp: {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
        records = Path(out) / "records" / backend
        steps_s = slowest_rank(records, "step_seconds")
        reduce_s = slowest_rank(records, "allreduce_seconds")
        first, last = scripts.span()
        return TrainRun(
            1e3 * statistics.median(steps_s),
            1e3 * statistics.median(reduce_s),
            len(steps_s),
            sum(steps_s),
            switch.used(first, last),
        )


def report(window: int, runs: dict[str, list[TrainRun]]) -> None:
    med = {b: statistics.median(r.iteration_ms for r in rs) for b, rs in runs.items()}
    for backend, rs in runs.items():
        its = [r.iteration_ms for r in rs]
        reduce_ms = statistics.median(r.allreduce_ms for r in rs)
        line = (
            f"{window:>6} {backend:<15} {med[backend]:>7.1f} ms ({min(its):.1f}-{max(its):.1f}), "
            f"allreduce {reduce_ms:.1f} ms"
        )
        if backend != "gloo":
            per_it = statistics.median(1e3 * r.switch_cpu / r.iterations for r in rs)
            line += (
                f"; the switch's CPU {per_it:.1f} ms per iteration; bound by "
                f"{bound(med[backend], reduce_ms, per_it)}"
            )
        else:
            line += "; loopback TCP between the workers, no switch"
        print(line)
    pairs = [
        i.iteration_ms / g.iteration_ms
        for g, i in zip(runs["gloo"], runs["ina-fixedpoint"], strict=True)
    ]
    ratio = med["ina-fixedpoint"] / med["gloo"]
    print(
        f"{window:>6} {'ratio':<15} ina-fixedpoint / gloo {ratio:.2f}x "
        f"(medians; pairs {min(pairs):.2f}-{max(pairs):.2f}x)"
    )


def bound(iteration_ms: float, allreduce_ms: float, switch_ms: float) -> str:
    share, busy = allreduce_ms / iteration_ms, switch_ms / allreduce_ms
    if share < 0.5:
        return f"the model's compute (the allreduce {share:.0%} of the iteration)"
    if busy >= 0.8:
        return f"the switch's data plane (its CPU per iteration {busy:.0%} of the allreduce's time)"
    return (
        f"round trips between the processes sharing the cores (the allreduce {share:.0%} of "
        f"the iteration, the switch busy {busy:.0%} of it)"
    )


def main() -> None:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=arg.REPEAT, default=3, help="pairs per window (default 3)")
    ap.add_argument("--steps", type=arg.positive("steps", 100_000), default=100)
    ap.add_argument("--window", type=arg.WINDOW, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=arg.positive("workers", 16), default=4)
    args = ap.parse_args()
    print(
        f"# DDP benchmark: {SCRIPT.name}, {args.workers} workers, {args.steps} iterations, "
        f"{args.repeat} pairs per window; python {platform.python_version()}, "
        f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'window':>6} {'backend':<15} iteration: median of the runs (min-max)")
    for window in args.window:
        runs: dict[str, list[TrainRun]] = {b: [] for b in BACKENDS}
        for _ in range(args.repeat):
            for backend in BACKENDS:
                runs[backend].append(one_run(backend, window, args.steps, args.workers))
        report(window, runs)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
