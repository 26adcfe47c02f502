"""`inaemu demo --algo ina,ring,hd,hdrm,multitree,ps,ring2d,dtree|all`: in-network aggregation
and the host collectives on the same embedded network, one after the other, no root needed.

    inaemu demo --topo leaf-spine:2x2x2 --algo all
    inaemu demo --topo bigraph:2x4 --algo ina,hd,hdrm --size 100000

1. one softswitch process per switch of the topology (`--topo`, or a star of `--workers`
   hosts), joined by loopback wires, programmed over P4Runtime: the /32 route to every host
   on every switch (`inaemu routes`), the INA job when `ina` runs, loss injection if asked;
2. one worker process per host, kept for the whole comparison (`compare_worker.serve`);
3. for each algorithm in turn: every worker attaches (INA: its client; a host collective:
   a `WirePeerChannel`, IPv4/UDP frames host to host routed by the switches, running the
   algorithm's schedule in its own rank order under `--node-ports`, the schedule `inaemu
   schedule` checks: `collective_schedules`, `schedule_task`), all start
   together, all-reduce the same input with the same codec, detach; the parent reads every
   switch's counters before and after;
4. every result is checked against the reference switch's (bit for bit: the host
   collectives run the codec's integer phases, whose sums do not depend on the order) and the
   float64 sum, and one table is printed: completion time, bytes each host sent, bytes on
   every link (from the switches' port counters: the frames as they crossed, with headers,
   acknowledgements and retransmissions), the busiest link, the error.

An algorithm that does not run on the topology (hdrm needs a BiGraph, ring2d a torus or mesh)
is listed as skipped, with the reason. Embedded links have no bandwidth limit: the times
measure how much work the processes do on this machine's cores, not a network's speed (the
output says so); Mininet with `--bw` (bench/bench_collectives.py) measures under bandwidth.

With `--sizes` every algorithm runs at each size, with `--repeat N` N times (the table shows
the median and the range); each run's bottleneck accounting (`runs.accounting`: CPU of
every switch and worker process and of the machine over the run, the switches' port drops
from their logs) names what bounded it: with unshaped links always the emulator, the reason
naming the busiest process. The run dir (`--run-dir`, by default a new one under the temp
dir) gets `summary.json` (every run with its accounting, and the median and spread of each
algorithm and size), `completion.png` with several sizes (`runs.compare.completion_figure`)
and the switches' logs.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import queue
import re
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from inaemu.cli.compare_worker import ATTACH_TIMEOUT, AlgoResult, Task, serve
from inaemu.cli.demo import (
    DemoError,
    check_job,
    demo_network,
    demo_topology,
    run_and_report,
    worker_seat,
)
from inaemu.cli.demo_worker import JOB_ID, DemoOptions, Seat, check, reference
from inaemu.collectives.algorithms import algorithm
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.common import args as arg
from inaemu.common.wire import MAX_RUN
from inaemu.controller.jobs import JobSpec
from inaemu.embedded.network import EmbeddedNetwork
from inaemu.hostlib.collective.wire_peers import MAX_MTU, MIN_MTU
from inaemu.runs.accounting import (
    DROPS_REPORTED_WITHIN,
    RULE,
    CpuMeter,
    drops_delta,
    read_port_drops,
)
from inaemu.runs.compare import (
    Row,
    Verdict,
    groups,
    link_delta,
    make_row,
    median_row,
    plot_points,
    points,
    render_table,
    size_label,
)
from inaemu.topology.builders import describe_roles
from inaemu.topology.model import Topology
from inaemu.topology.routes import ALL_PORTS, DIRECT_ROLES

RUNS_DIR = "inaemu-demo"  # the default run dirs' folder, in the temp dir
# the table's columns (`runs.compare.COLUMNS`): what the embedded network measures (its
# links have no rate: no floor, no load; its switches count packets)
TABLE = (
    "algorithm",
    "size",
    "steps",
    "time s",
    "min-max s",
    "MB/host out",
    "MB all links",
    "busiest MB",
    "busiest link",
    "packets",
    "retx",
    "busiest process",
    "machine",
    "bound",
    "max |error|",
    "result",
)


@dataclass
class CompareReport:
    options: DemoOptions
    topology: Topology
    spec: str
    workers: tuple[str, ...]
    rows: list[Row]
    cores: int
    run_dir: Path | None = None  # where summary.json (and completion.png) went
    plot: str = ""  # completion.png's path, or why there is none

    @property
    def ok(self) -> bool:
        """Every run that ran verified (a skipped algorithm is no failure)."""
        return all(r.verified or r.skipped for r in self.rows)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.options.sizes or (self.options.size,)

    def _node_model(self) -> str:
        """The node model the schedules were built for, where the topology has direct nodes."""
        if not any(s.role in DIRECT_ROLES for s in self.topology.switches.values()):
            return ""
        return f", node ports {self.options.node_ports} (schedules built for it)"

    def render(self) -> str:
        o = self.options
        kind = "int32" if o.codec == "int32" else "float32"
        sizes = " / ".join(f"{n:,}" for n in self.sizes)
        runs = f", {o.repeat} runs of each" if o.repeat > 1 else ""
        lines = [
            f"inaemu demo --algo: {self.spec}: {len(self.topology.switches)} switches "
            f"({describe_roles(self.topology)}), {len(self.workers)} workers x {sizes} "
            f"{kind}, codec {o.codec}, injected loss {o.loss:.1%}, host frames up to "
            f"{o.mtu} B IPv4{self._node_model()}{runs}",
            f"  embedded links have no bandwidth limit: times are the work of "
            f"{len(self.topology.switches)} switch and {len(self.workers)} worker processes "
            f"on {self.cores} cores, not a network's speed (Mininet --bw measures that)",
        ]
        spread = any(len(g) > 1 for g in groups(self.rows))
        lines += ["  " + line for line in render_table(self.rows, TABLE)]
        lines.append(
            "  MB/host out: the most any host sent into its switch; links: bytes of the frames "
            "on every directed link (host links included), from the switches' port counters; "
            "busiest process: the switch or worker process that used the most of a core over "
            "the run; machine: all its cores busy, anybody's work; bound: what bounded the "
            "time (unshaped links: the emulator)"
            + ("; with --repeat: the median run, min-max of the times" if spread else "")
        )
        for g in groups(self.rows):
            r = median_row(g)
            if not r.skipped:
                lines.append(f"  {r.algo} x {size_label(r.size)}: {r.bound_reason}")
        if self.run_dir is not None:
            lines.append(f"  run dir: {self.run_dir} (summary.json, logs/)")
        if self.plot:
            lines.append(f"  completion time against size: {self.plot}")
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """summary.json: the options, every run with its accounting, each algorithm and
        size's median and spread."""
        o = self.options
        return {
            "topology": self.spec,
            "workers": list(self.workers),
            "sizes": list(self.sizes),
            "repeat": o.repeat,
            "codec": o.codec,
            "loss": o.loss,
            "node_ports": o.node_ports,
            "algos": list(o.algos),
            "cores": self.cores,
            "links": "embedded loopback wires, no bandwidth limit",
            "accounting_rule": RULE,
            "verified": self.ok,
            "rows": [r.to_json() for r in self.rows],
            "points": [p.to_json() for p in points(self.rows)],
        }


class _Workers:
    """The worker processes, one per host, each serving tasks until told to stop."""

    def __init__(self, opts: DemoOptions, seats: Sequence[Seat], alive: Any) -> None:
        ctx = mp.get_context("spawn")  # no fork after gRPC threads started
        self.n = len(seats)
        self.go: Barrier = ctx.Barrier(self.n + 1)
        self.results: Queue[AlgoResult | str] = ctx.Queue()
        self.tasks: list[Queue[Task | None]] = [ctx.Queue() for _ in seats]
        self.alive = alive
        self.procs: list[SpawnProcess] = [
            ctx.Process(
                target=serve,
                args=(w, opts, seat, self.tasks[w], self.results, self.go),
                daemon=True,
            )
            for w, seat in enumerate(seats)
        ]
        for p in self.procs:
            p.start()

    def run(self, tasks: Sequence[Task], timeout: float) -> list[AlgoResult]:
        """Every worker's result of its task (DemoError with the first failure)."""
        for q, task in zip(self.tasks, tasks, strict=True):
            q.put(task)
        failed: list[str] = []
        waiter = threading.Thread(target=self._meet, args=(failed,), daemon=True)
        waiter.start()
        got: list[AlgoResult] = []
        last = time.monotonic()
        while len(got) < self.n:
            try:
                item = self.results.get(timeout=0.2)
            except queue.Empty:
                if any(p.exitcode is not None for p in self.procs) or not self.alive():
                    raise DemoError("a worker or a switch died; see the messages above") from None
                if time.monotonic() - last > timeout + ATTACH_TIMEOUT:
                    raise DemoError(f"{tasks[0].algo}: no result for {timeout:.0f} s") from None
                continue
            if isinstance(item, str):
                raise DemoError(self._first_cause(item))
            got.append(item)
            last = time.monotonic()
        waiter.join(5)
        if failed:
            raise DemoError(failed[0])
        return sorted(got, key=lambda r: r.worker)

    def _first_cause(self, message: str) -> str:
        """The failure to report: one worker's own, not another's broken barrier after it."""
        deadline = time.monotonic() + 2.0
        while "BrokenBarrierError" in message and time.monotonic() < deadline:
            try:
                item = self.results.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(item, str) and "BrokenBarrierError" not in item:
                return item
        return message

    def _meet(self, failed: list[str]) -> None:
        try:
            self.go.wait(ATTACH_TIMEOUT)
        except threading.BrokenBarrierError:
            failed.append(f"the workers did not all attach within {ATTACH_TIMEOUT:.0f} s")

    def stop(self, *, wait: bool = True) -> None:
        """Tell every worker to end and wait for it (`wait`: at most 5 s); without `wait`
        (the comparison was interrupted or failed: a worker may be mid-algorithm), end them
        at once."""
        for q in self.tasks:
            q.put(None)
        if wait:
            for p in self.procs:
                p.join(5)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(5)


def collective_schedules(
    algos: Sequence[str], topo: Topology, workers: Sequence[str], node_ports: str = ALL_PORTS
) -> dict[str, Schedule | str]:
    """Each host collective's schedule over `workers` in the algorithm's own rank order
    (`Algorithm.schedule_among`, the schedule `inaemu schedule` checks) under the node model
    `node_ports`, or why it cannot run here."""
    out: dict[str, Schedule | str] = {}
    for name in algos:
        if name == "ina":
            continue
        try:
            sched = algorithm(name).schedule_among(topo, workers, node_ports=node_ports)
        except ScheduleError as exc:
            out[name] = str(exc)
            continue
        if sorted(sched.hosts) != sorted(workers):
            out[name] = f"its schedule's hosts {list(sched.hosts)} are not the workers"
        else:
            out[name] = sched
    return out


def schedule_task(algo: str, run: int, sched: Schedule, topo: Topology) -> Task:
    """What every worker is handed for a host collective: the schedule and the (mac, ip) of
    each rank's host in the schedule's rank order (a worker finds its rank there:
    `compare_worker.task_rank`)."""
    peers = tuple((topo.hosts[h].mac, topo.hosts[h].ip) for h in sched.hosts)
    return Task(algo, run, sched.to_json(), peers)


def default_run_dir(spec: str) -> Path:
    """A new run dir under the temp dir: never inside the current directory (a checkout)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.,-]+", "-", f"{stamp}-{os.getpid()}-{spec}-compare").strip("-")
    return Path(tempfile.gettempdir()) / RUNS_DIR / safe


def run_compare(opts: DemoOptions, out: Any = sys.stdout) -> CompareReport:
    spec_text = opts.topo or f"star:{opts.workers or 4}"
    if not MIN_MTU <= opts.mtu <= MAX_MTU:
        raise DemoError(f"--mtu must be {MIN_MTU}..{MAX_MTU} (IPv4 packet bytes)")
    if opts.grpc_port:
        raise DemoError("--grpc-port is for one switch; with --algo each switch takes a free port")
    topo = demo_topology(spec_text)
    hosts = list(topo.hosts)
    n = opts.workers if opts.topo and opts.workers else len(hosts)
    if not 2 <= n <= len(hosts):
        raise DemoError(f"--workers must be 2..{len(hosts)} (the hosts of {spec_text})")
    workers = tuple(hosts[:n])
    sizes = opts.sizes or (opts.size,)
    total = len(sizes) * opts.repeat * len(opts.algos)  # runs, each with its own run id
    if total >= MAX_RUN // 2:
        raise DemoError(f"{total:,} runs (sizes x --repeat x algorithms): at most {MAX_RUN // 2:,}")
    schedules = collective_schedules(opts.algos, topo, workers, opts.node_ports)
    job = None
    if "ina" in opts.algos:
        job = JobSpec(JOB_ID, workers, pool_size=opts.window, n_trees=opts.trees)
        check_job(topo, job)
    arg.checks_done()
    run_dir = Path(opts.run_dir) if opts.run_dir else default_run_dir(spec_text)
    try:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for stale in ("summary.json", "completion.png"):  # a last run's in the same dir
            (run_dir / stale).unlink(missing_ok=True)
    except OSError as exc:
        raise DemoError(f"--run-dir {run_dir}: {exc.strerror or exc}") from None
    first_run = secrets.randbelow(MAX_RUN - total) + 1 if opts.run is None else opts.run
    pool: _Workers | None = None
    rows: list[Row] = []
    finished = False
    net = demo_network(opts, topo, workers, job, routes=True, log_dir=run_dir / "logs")
    try:
        net.start()
        opts = replace(opts, workers=n, wire_dir=net.wire_dir, run=first_run, sizes=sizes)
        n_trees = len(net.record.trees) if net.record is not None else 1
        seats = [worker_seat(topo, host, n_trees) for host in workers]
        pool = _Workers(opts, seats, net.alive)
        with CpuMeter() as meter:
            for name, proc in net.processes.items():
                meter.track(proc.pid, name, "softswitch")
            for host, worker in zip(workers, pool.procs, strict=True):
                assert worker.pid is not None
                meter.track(worker.pid, host, "worker")
            i = 0
            for size in sizes:
                ref = reference(replace(opts, size=size))
                for repeat in range(1, opts.repeat + 1):
                    for algo in opts.algos:
                        sched = schedules.get(algo)
                        if isinstance(sched, str):
                            if size == sizes[0] and repeat == 1:
                                rows.append(Row.skip(algo, size, opts.codec, sched))
                            continue
                        run = (first_run + i) % (MAX_RUN + 1)
                        i += 1
                        if opts.progress:
                            again = f" (run {repeat})" if repeat > 1 else ""
                            print(f"  running {algo} x {size:,}{again} ...", file=out, flush=True)
                        row = _run_one(
                            opts, topo, workers, pool, net, meter, run_dir / "logs",
                            algo, sched, run, size, ref,
                        )  # fmt: skip
                        row.repeat = repeat
                        rows.append(row)
        finished = True
        report = CompareReport(
            opts, topo, spec_text, workers, rows, os.cpu_count() or 1, run_dir=run_dir
        )
        _write_outputs(report, run_dir)
        return report
    finally:
        if pool is not None:
            pool.stop(wait=finished)
        net.close()


def _run_one(
    opts: DemoOptions,
    topo: Topology,
    workers: tuple[str, ...],
    pool: _Workers,
    net: EmbeddedNetwork,
    meter: CpuMeter,
    logs: Path,
    algo: str,
    sched: Schedule | None,
    run: int,
    size: int,
    ref: Any,
) -> Row:
    """One algorithm at one size on the running comparison: the workers' results checked
    against `ref`, the traffic from the switches' counters, the CPU over the run and the
    port drops from the switches' logs, and what bounded it."""
    if sched is None:
        tasks = [Task(algo, run, size=size) for _ in workers]
    else:
        tasks = [replace(schedule_task(algo, run, sched, topo), size=size) for _ in workers]
    drops0 = {name: read_port_drops(logs / f"{name}.log") for name in topo.switches}
    links0, packets0 = net.link_counters(net.read_stats())
    meter.sample()  # samples just around the run: its window is measured closely
    results = pool.run(tasks, opts.timeout)
    meter.sample()
    links1, packets1 = net.link_counters(net.read_stats())
    t0, t1 = min(r.start for r in results), max(r.end for r in results)
    verdict = Verdict()
    exact = within = True
    for host, r in zip(workers, results, strict=True):
        assert r.values is not None
        same, error, bound, met = check(ref, r.values)
        r.values = None
        verdict.max_abs_error = max(error, verdict.max_abs_error, key=_low_nan)
        if not same:
            exact = False
            verdict.problems.append(f"{host}: not bit-exact vs the reference switch")
        if not met:
            within = False
            verdict.problems.append(f"{host}: beyond the error bound ({error:.3g} > {bound:.3g})")
    if len({r.digest for r in results}) != 1:
        exact = False
        verdict.problems.append("the workers' results differ")
    usage = meter.usage(t0, t1)
    time.sleep(max(0.0, DROPS_REPORTED_WITHIN - (time.time() - t1)))
    drops1 = {name: read_port_drops(logs / f"{name}.log") for name in topo.switches}
    uses = link_delta(links0, links1)
    row = make_row(
        algo,
        size,
        opts.codec,
        "exact",  # bit for bit the reference switch's; and within the codec's bound
        seconds=t1 - t0,
        uses=uses,
        bandwidths=[None] * len(uses),  # embedded links have no rate
        hosts=workers,
        verdict=verdict,
        usage=usage,
        drops=drops_delta(drops0, drops1),
        steps=None if sched is None else len(sched.steps),
        packets=packets1 - packets0,
        retransmissions=sum(r.retransmissions for r in results),
    )
    row.exact, row.within_bound = exact, within
    return row


def _low_nan(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def _write_outputs(report: CompareReport, run_dir: Path) -> None:
    """summary.json, and with several sizes completion.png, into the run dir."""
    summary = report.summary()
    if len(report.sizes) > 1:
        title = (
            f"inaemu demo --algo: {report.spec}, {len(report.workers)} workers, codec "
            f"{report.options.codec}, embedded (unshaped) links"
        )
        try:
            report.plot = str(
                plot_points(points(report.rows), run_dir / "completion.png", title=title)
            )
        except RuntimeError as exc:
            report.plot = f"no plot: {exc}"
    summary["plot"] = report.plot
    text = json.dumps(summary, indent=2, default=_json_default)
    (run_dir / "summary.json").write_text(text + "\n")


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "__dataclass_fields__"):
        return asdict(x)
    return str(x)


def main_compare(opts: DemoOptions) -> int:
    return run_and_report(
        lambda: run_compare(opts),
        "a result is not identical, bit-exact and within the bound on every worker (see the "
        "table above)",
    )
