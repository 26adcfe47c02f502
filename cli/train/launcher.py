"""`inaemu train [OPTIONS] SCRIPT [ARGS...]`: run a DDP training script on the emulated network,
once per backend, and compare the backends' training curves.

    inaemu train --backend all --workers 4 examples/train_ddp.py
    inaemu train --backend ina-sketch,gloo --topo leaf-spine:2x2x2 examples/train_ddp.py
    inaemu train --mininet --backend all --bw 100 examples/train_ddp.py     # as root
    inaemu train --backend ina-fixedpoint my_train.py --epochs 3    # the script's own args
    inaemu train --example my_train.py    # writes examples/train_ddp.py there (installed too)

As with torchrun, the launcher's options come before SCRIPT and everything after SCRIPT is the
script's. A script that refuses its arguments on every rank (exit status 2, argparse's) stops
the launcher at the first backend, with the script's own message: no other backend would take
them either.

What it does, so that the script does none of it:

1. brings the network up: on the embedded network (default, no root) one softswitch process
   per switch of `--topo` (default a star of `--workers` hosts), joined by loopback wires;
   with `--mininet` (root) a Mininet network of softswitch or bmv2 nodes, links shaped to
   `--bw`; `inaemu.embedded` and the Mininet runner's own code start and program them;
2. programs it over P4Runtime: ina.p4, the IPv4 route to every host (the host collectives'
   and gloo's traffic crosses the switches), and job 1 over the workers;
3. for each backend in turn (`gloo`, `ina-fixedpoint`, `ina-sketch`, `ring-inceptionn`, or
   any `ina-CODEC` / `ALGO-CODEC`; `all` = those four): takes a fresh run id from the job's
   state (as `inaemu job new-run` does), writes the host collective's schedule if it needs
   one, and starts SCRIPT once per worker with everything in its environment
   (`inaemu.hostlib.launch`: rank, world size, the gloo rendezvous, the switch's wire or
   address, job, run id, codec, peers, where to write its records), then waits for all;
4. gathers every backend's per-iteration records (`LaunchedWorker.record`) into
   `train.json`, plots loss and held-out accuracy against iterations and against time
   (`train.png`), and prints a table of the per-iteration time per backend.

On the embedded network gloo runs over the machine's loopback TCP (no switch in between), the
INA backends and the host collectives through the softswitches; on Mininet all of them cross
the switches. The times are the emulator's: the switches are Python processes (or bmv2)
sharing the machine's cores with the workers, so a packet's trip through a switch, not a
network's bandwidth, bounds every iteration's allreduce (the report says so).

Exit status: 0 every backend trained; 1 a backend failed (its log is named); 2 bad
arguments (the launcher's, or the script's on every rank), or the network could not be built
or programmed; 130 interrupted. The network and
every process it started are gone when it exits.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from inaemu.cli.train.network import TrainError, TrainOptions, schedule_path
from inaemu.collectives.schedule import Schedule
from inaemu.common import args as arg
from inaemu.controller.jobs import JobSpec
from inaemu.embedded.network import EmbeddedNetwork
from inaemu.hostlib.codecs import CODECS
from inaemu.hostlib.collective.executor import SCHEDULE_CODECS
from inaemu.hostlib.launch import EVERY_BACKEND, Backend, parse_backend
from inaemu.runs.network import JOB_ID, Launching, Network, NetworkError
from inaemu.topology.builders import describe_roles, load_or_build
from inaemu.topology.model import Topology, TopologyError

# the codecs that take float gradients: every one but int32
FLOAT_INA_CODECS = tuple(c for c in sorted(CODECS) if c != "int32")
FLOAT_SCHEDULE_CODECS = tuple(c for c in SCHEDULE_CODECS if c != "int32")
POLL = 0.2  # seconds between looks at the workers and switches
USAGE_STATUS = 2  # a script's exit status when it refuses its command line (argparse's)
USAGE_GRACE = 10.0  # seconds the other ranks get to exit as well once one refused its arguments
EXAMPLE = "train_ddp.py"  # the example script, shipped in the package as inaemu.examples


# ---------------------------------------------------------------------- backends


def parse_backends(text: str) -> tuple[Backend, ...]:
    """`all` or a comma list; ValueError naming what is wrong."""
    names = list(EVERY_BACKEND) if text.strip() == "all" else [n.strip() for n in text.split(",")]
    if "" in names or len(set(names)) != len(names):
        raise ValueError(f"--backend {text}: name each backend once, e.g. gloo,ina-fixedpoint")
    backends = tuple(parse_backend(n) for n in names)
    from inaemu.collectives.algorithms import ALGORITHMS

    for b in backends:
        if b.kind == "ina" and b.codec not in FLOAT_INA_CODECS:
            raise ValueError(
                f"--backend {b.name}: INA trains with {', '.join(FLOAT_INA_CODECS)} (gradients "
                "are floats)"
            )
        if b.is_collective and b.kind not in ALGORITHMS:
            raise ValueError(
                f"--backend {b.name}: unknown host collective {b.kind!r}; use "
                f"{', '.join(ALGORITHMS)} (e.g. ring-inceptionn)"
            )
        if b.is_collective and b.codec not in FLOAT_SCHEDULE_CODECS:
            raise ValueError(
                f"--backend {b.name}: a host collective trains with "
                f"{', '.join(FLOAT_SCHEDULE_CODECS)}"
            )
    return backends


def write_schedule(backend: Backend, topo: Topology, workers: Sequence[str], out: Path) -> Schedule:
    """The host collective's schedule over the workers, checked, saved as
    out/schedule-ALGO.json; TrainError if it does not run on this topology."""
    from inaemu.collectives.algorithms import algorithm
    from inaemu.collectives.check import simulate
    from inaemu.collectives.schedule import ScheduleError

    try:
        schedule = algorithm(backend.kind).schedule(topo, workers).validate()
        simulate(schedule)
    except ScheduleError as exc:
        raise TrainError(f"--backend {backend.name}: {exc}") from None
    if sorted(schedule.hosts) != sorted(workers):
        raise TrainError(
            f"--backend {backend.name}: its schedule's hosts {list(schedule.hosts)} are not "
            f"the workers {list(workers)}"
        )
    schedule.save(schedule_path(out, backend))
    return schedule


# ---------------------------------------------------------------------- one backend


@dataclass
class BackendRun:
    """One backend's training: its records merged over the ranks, per iteration."""

    backend: str
    run: int
    wall: float = 0.0  # seconds from starting the workers to the last one's exit
    error: str = ""
    iterations: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # mean over the ranks
    accuracy: list[float | None] = field(default_factory=list)  # rank 0's held-out accuracy
    step_seconds: list[float] = field(default_factory=list)  # the slowest rank's
    allreduce_seconds: list[float] = field(default_factory=list)  # the slowest rank's
    # the first iteration's step seconds: its one-time warm-up (compiled kernels loaded, the
    # first connections) besides the iteration itself
    first_seconds: float | None = None
    time: list[float] = field(default_factory=list)  # step seconds after the first, summed
    refused: str = ""  # every rank refused its arguments: the script's own message

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.iterations)


def merge_records(run: BackendRun, files: Sequence[Path]) -> None:
    """Fill `run` from every rank's JSON lines: iterations that every rank recorded. The
    training time leaves the first of them out (`first_seconds`: its warm-up would hide the
    iterations' own times), so it is 0 at the first iteration."""
    per_rank: list[dict[int, dict[str, Any]]] = []
    for path in files:
        rows: dict[int, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    rows[int(rec["iteration"])] = rec
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash: the iterations before it count
        per_rank.append(rows)
    common = sorted(set.intersection(*(set(r) for r in per_rank))) if per_rank else []
    elapsed = 0.0
    for it in common:
        recs = [r[it] for r in per_rank]
        step = max(float(r["step_seconds"]) for r in recs)
        if run.first_seconds is None:
            run.first_seconds = step
        else:
            elapsed += step
        accuracies = [float(r["accuracy"]) for r in recs if r.get("accuracy") is not None]
        run.iterations.append(it)
        run.loss.append(statistics.fmean(float(r["loss"]) for r in recs))
        run.accuracy.append(accuracies[0] if accuracies else None)
        run.step_seconds.append(step)
        run.allreduce_seconds.append(max(float(r["allreduce_seconds"]) for r in recs))
        run.time.append(elapsed)


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def run_backend(net: Network, backend: Backend, opts: TrainOptions, say: Any) -> BackendRun:
    """Start the script once per worker with this backend, wait for all, gather records."""
    schedule = None
    if backend.is_collective:
        schedule = write_schedule(backend, net.topology, net.workers, opts.out)
    run = net.next_run()
    result = BackendRun(backend.name, run)
    records = opts.out / "records" / backend.name
    logs = opts.out / "logs" / backend.name
    records.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    for old in records.glob("rank*.jsonl"):
        old.unlink()
    file = schedule_path(opts.out, backend) if schedule is not None else None
    launches = net.launches(Launching(backend, run, records, opts.timeout, schedule, file))
    argv = [sys.executable, str(opts.script), *opts.script_args]
    say(f"  {backend.name}: {len(launches)} workers, run {run} ...", flush=True)
    started = time.monotonic()
    procs: list[subprocess.Popen[bytes]] = []
    exits: list[int] = []  # ranks in the order they exited: the first failure is the cause
    waiters: list[threading.Thread] = []

    def failure(rank: int) -> str:
        log = logs / f"rank{rank}.log"
        return f"rank {rank} exited with {procs[rank].returncode}: {log_tail(log)} (log: {log})"

    try:
        for rank, launch in enumerate(launches):
            procs.append(net.popen(rank, launch, argv, logs / f"rank{rank}.log"))
            waiters.append(
                threading.Thread(target=_note_exit, args=(procs[-1], rank, exits), daemon=True)
            )
            waiters[-1].start()
        deadline = started + opts.limit
        while True:
            failed = [r for r in list(exits) if procs[r].returncode != 0]
            if failed:
                first = failed[0]
                result.error = failure(first)
                if procs[first].returncode == USAGE_STATUS and _every_rank_exits(
                    procs, exits, USAGE_STATUS
                ):
                    result.refused = log_tail(logs / f"rank{first}.log", 1)
                break
            if len(exits) == len(procs):
                break
            if (why := net.trouble()) is not None:
                result.error = why
                break
            if time.monotonic() > deadline:
                result.error = f"not done within --limit {opts.limit:g} s (logs: {logs})"
                break
            time.sleep(POLL)
    finally:
        stop_processes(procs)
        for t in waiters:
            t.join(5)
    result.wall = time.monotonic() - started
    merge_records(result, [Path(launch.records) for launch in launches])
    if not result.error and not result.iterations:
        result.error = f"the script recorded no iteration (LaunchedWorker.record; logs: {logs})"
    return result


def _every_rank_exits(
    procs: Sequence[subprocess.Popen[bytes]], exits: list[int], status: int
) -> bool:
    """Whether every rank exits with `status` within USAGE_GRACE seconds (they all got the
    same arguments, so a script that refuses them does so on every rank, at once)."""
    deadline = time.monotonic() + USAGE_GRACE
    while len(exits) < len(procs) and time.monotonic() < deadline:
        time.sleep(POLL / 4)
    return len(exits) == len(procs) and all(p.returncode == status for p in procs)


def _note_exit(proc: subprocess.Popen[bytes], rank: int, exits: list[int]) -> None:
    proc.wait()
    exits.append(rank)


def stop_processes(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


# ---------------------------------------------------------------------- the report


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile)."""
    if not values:
        return math.nan, math.nan, math.nan
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), q[0], q[-1]


def loss_gap(run: BackendRun, baseline: BackendRun | None) -> tuple[float, int] | None:
    """The largest |loss - baseline's loss| over the iterations both have, and its iteration."""
    if baseline is None or not baseline.ok or not run.ok or run is baseline:
        return None
    base = dict(zip(baseline.iterations, baseline.loss, strict=True))
    gaps = [
        (abs(x - base[i]), i) for i, x in zip(run.iterations, run.loss, strict=True) if i in base
    ]
    return max(gaps, key=lambda g: g[0]) if gaps else None


def summary_rows(runs: Sequence[BackendRun]) -> list[dict[str, Any]]:
    baseline = next((r for r in runs if r.backend == "gloo"), None)
    rows = []
    for r in runs:
        step = spread(r.step_seconds)
        reduce = spread(r.allreduce_seconds)
        accuracies = [a for a in r.accuracy if a is not None]
        gap = loss_gap(r, baseline)
        rows.append(
            {
                "backend": r.backend,
                "ok": r.ok,
                "error": r.error,
                "iterations": len(r.iterations),
                "final_loss": r.loss[-1] if r.loss else None,
                "final_accuracy": accuracies[-1] if accuracies else None,
                "max_loss_gap_vs_gloo": None if gap is None else gap[0],
                "max_loss_gap_iteration": None if gap is None else gap[1],
                "iteration_ms": {
                    "median": step[0] * 1e3,
                    "p10": step[1] * 1e3,
                    "p90": step[2] * 1e3,
                },
                "allreduce_ms": {
                    "median": reduce[0] * 1e3,
                    "p10": reduce[1] * 1e3,
                    "p90": reduce[2] * 1e3,
                },
                "train_seconds": r.time[-1] if r.time else None,
                "first_iteration_seconds": r.first_seconds,
                "wall_seconds": r.wall,
            }
        )
    return rows


def _ms(d: dict[str, float]) -> str:
    if math.isnan(d["median"]):
        return "-"
    return f"{d['median']:.1f} ({d['p10']:.1f}-{d['p90']:.1f})"


TABLE_HEAD = (
    "backend",
    "iterations",
    "final loss",
    "final accuracy",
    "max |loss - gloo|",
    "iteration ms\nmedian (p10-p90)",
    "allreduce ms\nmedian (p10-p90)",
    "first iteration s\n(warm-up)",
)


def table_cells(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The report's table (TABLE_HEAD's columns), for the terminal and the plot."""

    def number(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    return [
        [
            r["backend"],
            str(r["iterations"]),
            number(r["final_loss"], ".4f"),
            number(r["final_accuracy"], ".3f"),
            "-"
            if r["max_loss_gap_vs_gloo"] is None
            else f"{r['max_loss_gap_vs_gloo']:.2e} (it. {r['max_loss_gap_iteration']})",
            _ms(r["iteration_ms"]),
            _ms(r["allreduce_ms"]),
            number(r["first_iteration_seconds"], ".2f"),
        ]
        for r in rows
    ]


def render_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    table = [[h.replace("\n", ": ") for h in TABLE_HEAD], *table_cells(rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(TABLE_HEAD))]
    return [
        "  "
        + "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]


TIME_AXIS = "training time after the first iteration (s; the first's own: legend)"


def time_label(run: BackendRun) -> str:
    """A backend's legend entry on the time panels: its first iteration, left out of them."""
    if run.first_seconds is None:
        return run.backend
    return f"{run.backend} (first iteration: {run.first_seconds:.2f} s)"


def plot(
    runs: Sequence[BackendRun], rows: Sequence[dict[str, Any]], path: Path, title: str
) -> Path:
    """Loss and held-out accuracy against iterations and against time (one line per backend)
    and the report's table, in one PNG. RuntimeError without matplotlib. The first backend
    (gloo, the baseline) is a wide pale band, so that a backend on top of it stays visible.
    The time panels start after the first iteration: its one-time warm-up (seconds, where an
    iteration takes milliseconds) is in their legend and the table, not on their axis."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("the plot needs matplotlib: pip install 'inaemu[draw]'") from None
    if not any(r.ok for r in runs):
        raise RuntimeError("no backend trained")
    fig = plt.figure(figsize=(11, 10))
    grid = fig.add_gridspec(3, 2, height_ratios=[1, 1, 0.5])
    axes = [[fig.add_subplot(grid[i, j]) for j in range(2)] for i in range(2)]
    try:
        for n, r in enumerate(runs):
            if not r.ok:
                continue
            style = (
                {"linewidth": 4, "alpha": 0.35}
                if n == 0
                else {"linewidth": 1.4, "linestyle": ("-", "--", ":", "-.")[(n - 1) % 4]}
            )
            acc = [
                (it, t, a)
                for it, t, a in zip(r.iterations, r.time, r.accuracy, strict=True)
                if a is not None
            ]
            axes[0][0].plot(r.iterations, r.loss, label=r.backend, **style)
            axes[0][1].plot(r.time, r.loss, label=time_label(r), **style)
            if acc:
                its, ts, accs = zip(*acc, strict=True)
                axes[1][0].plot(its, accs, label=r.backend, **style)
                axes[1][1].plot(ts, accs, label=time_label(r), **style)
        panels: tuple[tuple[str, Literal["upper right", "lower right"]], ...] = (
            ("training loss (mean over ranks)", "upper right"),
            ("held-out accuracy", "lower right"),
        )
        for i, (what, corner) in enumerate(panels):  # the corner the curves leave free
            axes[i][0].set_xlabel("iteration")
            axes[i][1].set_xlabel(TIME_AXIS)
            for ax in axes[i]:
                ax.set_ylabel(what)
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize="small", loc=corner)
        table_ax = fig.add_subplot(grid[2, :])
        table_ax.axis("off")
        table = table_ax.table(
            cellText=table_cells(rows), colLabels=list(TABLE_HEAD), loc="center", cellLoc="center"
        )
        table.auto_set_font_size(False)
        table.set_fontsize(9)
        table.scale(1, 1.5)
        for (row, _), cell in table.get_celld().items():
            if row == 0:
                cell.set_height(cell.get_height() * 1.6)  # two-line headers
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="inaemu train",
        usage="inaemu train [OPTIONS] SCRIPT [SCRIPT ARGS...]",
        description="Run a DDP training script on the emulated network, once per backend, "
        "and plot the backends' loss and accuracy against iterations and time "
        "(cli/train/launcher.py; examples/train_ddp.py is one such script, and --example "
        "writes it out). As with torchrun, the launcher's options come before SCRIPT; "
        "everything after SCRIPT is the script's.",
    )
    ap.add_argument(
        "script",
        type=Path,
        nargs="?",
        help="the training script (examples/train_ddp.py, or one --example wrote)",
    )
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    ap.add_argument(
        "--example",
        type=Path,
        metavar="FILE",
        help=f"write the example training script ({EXAMPLE}, shipped with inaemu) to FILE "
        "and run nothing",
    )
    ap.add_argument(
        "--backend",
        default="all",
        help="a comma list of gloo, ina-CODEC (ina-fixedpoint, ina-sketch, "
        "ina-sketch-compact), ALGO-CODEC (ring-inceptionn, ring-plain, hd-fixedpoint, ...), "
        f"or all = {','.join(EVERY_BACKEND)} (default)",
    )
    ap.add_argument(
        "--workers", type=int, default=None, help="workers (default 4; with --topo every host)"
    )
    ap.add_argument(
        "--topo",
        help="a compact spec (star:4, leaf-spine:2x2x2, bigraph:2x4, ...) or a topology file "
        "(default: a star of --workers hosts)",
    )
    ap.add_argument(
        "--mininet", action="store_true", help="on a Mininet network instead (root; see --bw)"
    )
    ap.add_argument(
        "--switch",
        choices=("softswitch", "bmv2"),
        default="softswitch",
        help="with --mininet: the switch nodes (default softswitch)",
    )
    ap.add_argument("--bw", type=float, default=None, help="with --mininet: Mbit/s per link")
    ap.add_argument(
        "--prefix",
        default=None,
        help="with --mininet: the start of the network's switch interface names (default: "
        "one no interface here starts with; see inaemu mininet --prefix)",
    )
    ap.add_argument("--window", type=int, default=64, help="the job's slots per switch (64)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds an allreduce may go without progress before the worker gives up (30)",
    )
    ap.add_argument(
        "--limit",
        type=float,
        default=1800.0,
        help="seconds one backend's workers may take in all (1800)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where train.json, train.png, records/ and logs/ go (default "
        "build/train/<time>-<topology>-<network>)",
    )
    return ap


def options(args: argparse.Namespace) -> TrainOptions:
    """The checked options; ValueError saying what to fix."""
    from inaemu.mininet.scenario import MAX_BW, ScenarioError, check_prefix  # no Mininet

    script_args = list(args.args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    if args.script is None:
        raise ValueError(
            "give the training script: inaemu train [OPTIONS] SCRIPT [SCRIPT ARGS] (e.g. "
            "examples/train_ddp.py, or write it out with --example FILE)"
        )
    if not args.script.is_file():
        raise ValueError(f"{args.script}: no such script")
    if args.workers is not None and args.workers < 2:
        raise ValueError("--workers must be at least 2 (DDP between one worker is no test)")
    if not 1 <= args.window <= 0x7FFF:
        raise ValueError("--window must be 1..32767")
    if not args.timeout > 0 or not args.limit > 0:
        raise ValueError("--timeout and --limit must be positive seconds")
    if not args.mininet and (args.bw is not None or args.switch != "softswitch"):
        raise ValueError("--bw and --switch are for --mininet (embedded links have no bandwidth)")
    if args.prefix is not None and not args.mininet:
        raise ValueError("--prefix is for --mininet (the embedded network makes no interfaces)")
    if args.prefix is not None:
        try:
            check_prefix(args.prefix)
        except ScenarioError as exc:
            raise ValueError(str(exc)) from None
    if args.bw is not None and not 0 < args.bw <= MAX_BW:
        raise ValueError(f"--bw {args.bw:g}: Mininet shapes 0 < bw <= {MAX_BW:.0f} Mbit/s")
    label = args.topo or f"star:{args.workers or 4}"
    net = f"mininet-{args.switch}" if args.mininet else "embedded"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.-]+", "-", Path(label).stem if Path(label).is_file() else label)
    return TrainOptions(
        script=args.script.absolute(),
        script_args=tuple(script_args),
        backends=parse_backends(args.backend),
        workers=args.workers if args.workers is not None else (0 if args.topo else 4),
        topo=args.topo,
        mininet=args.mininet,
        switch=args.switch,
        bw=args.bw,
        out=(args.out or Path("build") / "train" / f"{stamp}-{safe}-{net}").absolute(),
        window=args.window,
        timeout=args.timeout,
        limit=args.limit,
        prefix=args.prefix,
    )


def topology_and_workers(opts: TrainOptions) -> tuple[Topology, tuple[str, ...], str]:
    label = opts.topo or f"star:{opts.workers}"
    try:
        topo = load_or_build(label)
    except TopologyError as exc:
        raise TrainError(str(exc)) from None
    hosts = [h for h, x in topo.hosts.items() if x.role == "worker"] or list(topo.hosts)
    n = opts.workers or len(hosts)
    if not 2 <= n <= len(hosts):
        raise TrainError(f"--workers must be 2..{len(hosts)} (the hosts of {label})")
    return topo, tuple(hosts[:n]), label


def train(opts: TrainOptions, say: Any = print) -> tuple[list[BackendRun], dict[str, Any]]:
    """Every backend on one network (module doc); (runs, the summary written to train.json)."""
    topo, workers, label = topology_and_workers(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    for b in opts.backends:  # refused before any process starts
        if b.is_collective:
            write_schedule(b, topo, workers, opts.out)
    net_cm: Any
    if opts.mininet:
        from inaemu.cli.train.mininet_network import MininetNetwork

        net_cm = MininetNetwork(topo, workers, opts)
    else:
        job = JobSpec(JOB_ID, workers, pool_size=opts.window)
        net_cm = EmbeddedNetwork(topo, workers, job=job, routes=True)
    script = f"{opts.script.name} {' '.join(opts.script_args)}".strip()
    say(
        f"inaemu train: {script}, {len(workers)} workers on {label} ({len(topo.switches)} "
        f"switches: {describe_roles(topo)}); backends "
        f"{', '.join(b.name for b in opts.backends)}",
        flush=True,
    )
    runs: list[BackendRun] = []
    started = time.monotonic()
    with net_cm as net:
        say(f"  network up and programmed in {time.monotonic() - started:.1f} s: {net.label}")
        for backend in opts.backends:
            runs.append(run_backend(net, backend, opts, say))
            if runs[-1].refused:  # no other backend would take these arguments either
                raise TrainError(refused_arguments(opts, runs[-1]))
            if runs[-1].error:
                say(f"  {backend.name}: FAILED: {runs[-1].error}", flush=True)
        network_label = net.label
    rows = summary_rows(runs)
    summary = {
        "script": str(opts.script),
        "script_args": list(opts.script_args),
        "topology": label,
        "network": network_label,
        "workers": list(workers),
        "backends": {r.backend: asdict(r) for r in runs},
        "summary": rows,
        "times": (
            "iteration: forward, backward with the allreduce, optimizer step, the slowest rank; "
            "allreduce: the hook's time in that iteration; training time: the iterations' sum "
            "after the first (0 at the first); first_seconds: the first iteration's, with its "
            "one-time warm-up"
        ),
    }
    (opts.out / "train.json").write_text(json.dumps(summary, indent=2) + "\n")
    return runs, summary


def refused_arguments(opts: TrainOptions, run: BackendRun) -> str:
    """One line: the script refused its arguments on every rank, in its own words, and which
    of them are the launcher's (they go before the script)."""
    ours = {
        a.split("=", 1)[0]
        for a in opts.script_args
        if a.split("=", 1)[0] in build_parser()._option_string_actions
    }
    hint = (
        f"; {', '.join(sorted(ours))} {'is' if len(ours) == 1 else 'are'} the launcher's: "
        "put launcher options before the script (inaemu train [OPTIONS] SCRIPT [SCRIPT ARGS])"
        if ours
        else ""
    )
    return (
        f"{opts.script.name} refused its arguments {' '.join(opts.script_args) or '(none)'!r} "
        f"on every rank ({run.backend}: exit status {USAGE_STATUS}): {run.refused or '?'}"
        f"{hint}; no other backend was run"
    )


def check_new_file(path: Path) -> None:
    """ValueError unless `path` is free for --example to write."""
    if path.exists() or path.is_symlink():
        raise ValueError(f"--example {path}: exists; give a new file name")


def write_example(path: Path) -> str:
    """Write the example training script (inaemu.examples, in the package) to `path`, making
    its folder; ValueError if `path` exists or cannot be written. The line that says what was
    done."""
    source = importlib.resources.files("inaemu.examples").joinpath(EXAMPLE)
    check_new_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.read_text())
    except OSError as exc:
        raise ValueError(f"--example {path}: {exc.strerror or exc}") from None
    return (
        f"wrote {path} (the example {EXAMPLE}: DDP on a generated task); train with it: "
        f"inaemu train [OPTIONS] {path} [--steps N ...]"
    )


def report(
    runs: Sequence[BackendRun], summary: dict[str, Any], opts: TrainOptions, say: Any
) -> None:
    for line in render_table(summary["summary"]):
        say(line)
    switches = (
        "bmv2 (its packet rate)"
        if opts.mininet and opts.switch == "bmv2"
        else "the softswitches (compiled data plane)"
    )
    say(
        f"  times are the emulator's, not a network's: {switches} and "
        f"{len(summary['workers'])} workers share {os.cpu_count() or 1} cores"
        + (f" (links {opts.bw:g} Mbit/s)" if opts.bw else "")
        + " (bench/bench_ddp.py measures what bounds them); max |loss - gloo|: over the "
        "iterations, the loss averaged over the ranks"
    )
    workers = len(summary["workers"])
    title = f"{opts.script.name}: {workers} workers, {summary['topology']}, {summary['network']}"
    try:
        path = plot(runs, summary["summary"], opts.out / "train.png", title)
        say(f"  plot: {path}")
    except RuntimeError as exc:
        say(f"  no plot: {exc}")
    say(f"  records: {opts.out / 'train.json'}")


def _cannot_write(exc: OSError, out: Path) -> int:
    where = exc.filename or out
    print(f"inaemu train: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
    return 1


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.example is not None:
            if args.script is not None:
                raise ValueError("--example writes the example and runs nothing: give it alone")
            check_new_file(args.example)
            if arg.parse_only("inaemu train"):
                return 0
            print(write_example(args.example))
            return 0
        opts = options(args)
        if arg.parse_only("inaemu train"):
            return 0
        if opts.mininet and os.geteuid() != 0:
            raise ValueError("--mininet needs root: run it as root, or with sudo in front")
    except ValueError as exc:
        print(f"inaemu train: {exc}", file=sys.stderr)
        return 2
    # SIGTERM and SIGHUP unwind like Ctrl-C: the network and the workers go on the way out
    stops = (signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, _interrupt) for s in stops if signal.getsignal(s) != signal.SIG_IGN}
    try:
        runs, summary = train(opts)
    except (TrainError, NetworkError) as exc:
        print(f"inaemu train: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninaemu train: interrupted; workers and switches stopped", file=sys.stderr)
        return 130
    except OSError as exc:  # --out full or gone, say (workers and network stopped on the way)
        return _cannot_write(exc, opts.out)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    try:
        report(runs, summary, opts, print)
    except OSError as exc:  # train.png: a full disk reaches us from PIL
        return _cannot_write(exc, opts.out)
    failed = [r for r in runs if not r.ok]
    if failed:
        print(
            f"inaemu train: {', '.join(r.backend for r in failed)} failed (the error of each "
            f"above; logs in {opts.out / 'logs'})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
