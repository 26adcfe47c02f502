"""`inaemu demo --algo ina,ring,hd,hdrm,multitree,ps|all`: in-network aggregation and the host
collectives on the same embedded network, one after the other, no root needed.

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

An algorithm that does not run on the topology (hdrm needs a BiGraph) is listed as skipped,
with the reason. Embedded links have no bandwidth limit: the times measure how much work the
processes do on this machine's cores, not a network's speed (the output says so); Mininet
with `--bw` (bench/bench_collectives.py) measures under bandwidth.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from inaemu.collectives.algorithms import ALGORITHMS, algorithm
from inaemu.collectives.routes import ALL_PORTS, DIRECT_ROLES
from inaemu.collectives.schedule import Schedule, ScheduleError
from inaemu.controller.compare_worker import ATTACH_TIMEOUT, AlgoResult, Task, serve
from inaemu.controller.demo import (
    DemoError,
    check_job_fits,
    demo_topology,
    open_wire_dir,
    program_topology,
    run_and_report,
    start_switches,
    stop_switches,
)
from inaemu.controller.demo_worker import JOB_ID, DemoOptions, Seat, check, reference
from inaemu.controller.jobs import JobError, JobSpec
from inaemu.controller.p4rt import Controller, ControllerError
from inaemu.controller.stats import StatsReport
from inaemu.controller.topology import Topology, describe_roles
from inaemu.hostlib.collective.wire_peers import MAX_MTU, MIN_MTU
from inaemu.hostlib.wire import MAX_RUN

EVERY_ALGO = ("ina", *ALGORITHMS)  # what `--algo all` runs, in this order
COUNTERS = ("port_rx", "port_tx")

Counts = dict[tuple[str, str, int], tuple[int, int]]  # (switch, counter, port) -> packets, bytes


def parse_algos(text: str) -> tuple[str, ...]:
    """'ina,ring' -> ('ina', 'ring'); 'all' -> every algorithm; ValueError on an unknown one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return EVERY_ALGO
    unknown = [n for n in names if n not in EVERY_ALGO]
    if unknown or not names:
        raise ValueError(
            f"--algo {text!r}: use a comma-separated list of {', '.join(EVERY_ALGO)}, or all"
        )
    return tuple(dict.fromkeys(names))


@dataclass
class AlgoRow:
    """One algorithm's run on the embedded network."""

    algo: str
    skipped: str = ""  # why it did not run
    steps: int | None = None  # the schedule's steps (None: INA)
    seconds: float = 0.0  # first start to last end over the workers
    results: list[AlgoResult] = field(default_factory=list)
    exact: bool = False  # identical on every worker and bit-exact vs the reference switch
    within_bound: bool = False
    max_error: float = 0.0
    host_out: list[int] = field(default_factory=list)  # bytes each host sent into the network
    links: dict[str, int] = field(default_factory=dict)  # "a:p->b" -> bytes, every direction
    packets: int = 0  # frames into the switches, all ports

    @property
    def ok(self) -> bool:
        return bool(self.skipped) or (self.exact and self.within_bound)

    @property
    def busiest(self) -> tuple[str, int]:
        if not self.links:
            return "-", 0
        name = max(self.links, key=lambda k: self.links[k])
        return name, self.links[name]


@dataclass
class CompareReport:
    options: DemoOptions
    topology: Topology
    spec: str
    workers: tuple[str, ...]
    rows: list[AlgoRow]
    cores: int

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def _node_model(self) -> str:
        """The node model the schedules were built for, where the topology has direct nodes."""
        if not any(s.role in DIRECT_ROLES for s in self.topology.switches.values()):
            return ""
        return f", node ports {self.options.node_ports} (schedules built for it)"

    def render(self) -> str:
        o = self.options
        kind = "int32" if o.codec == "int32" else "float32"
        lines = [
            f"inaemu demo --algo: {self.spec}: {len(self.topology.switches)} switches "
            f"({describe_roles(self.topology)}), {len(self.workers)} workers x {o.size:,} "
            f"{kind}, codec {o.codec}, injected loss {o.loss:.1%}, host frames up to "
            f"{o.mtu} B IPv4{self._node_model()}",
            f"  embedded links have no bandwidth limit: times are the work of "
            f"{len(self.topology.switches)} switch and {len(self.workers)} worker processes "
            f"on {self.cores} cores, not a network's speed (Mininet --bw measures that)",
        ]
        head = (
            "algorithm",
            "steps",
            "time s",
            "MB/host out",
            "MB all links",
            "max link MB",
            "busiest link",
            "packets",
            "retx",
            "max |error|",
            "result",
        )
        table: list[tuple[str, ...]] = [head]
        for r in self.rows:
            if r.skipped:
                table.append((r.algo, *["-"] * 9, f"skipped: {r.skipped}"))
                continue
            where, most = r.busiest
            verdict = "bit-exact, " if r.exact else "NOT bit-exact, "
            verdict += "within bound" if r.within_bound else "BOUND NOT MET"
            table.append(
                (
                    r.algo,
                    "-" if r.steps is None else str(r.steps),
                    f"{r.seconds:.2f}",
                    f"{max(r.host_out) / 1e6:.2f}",
                    f"{sum(r.links.values()) / 1e6:.2f}",
                    f"{most / 1e6:.2f}",
                    where,
                    f"{r.packets:,}",
                    f"{sum(x.retransmissions for x in r.results):,}",
                    f"{r.max_error:.3g}",
                    verdict,
                )
            )
        widths = [max(len(row[i]) for row in table if i < len(row)) for i in range(len(head))]
        for row in table:
            cells = [
                c.ljust(widths[i]) if i in (0, 6, 10) else c.rjust(widths[i])
                for i, c in enumerate(row)
            ]
            lines.append("  " + "  ".join(cells).rstrip())
        lines.append(
            "  MB/host out: the most any host sent into its switch; links: bytes of the frames "
            "on every directed link (host links included), from the switches' port counters"
        )
        return "\n".join(lines)


def _counts(stats: StatsReport) -> Counts:
    return {
        (sw, name, port): value
        for sw, c in stats.switches.items()
        for (name, port), value in c.indexed.items()
        if name in COUNTERS
    }


def _delta(before: Counts, after: Counts) -> Counts:
    out: Counts = {}
    for key, (p, b) in after.items():
        p0, b0 = before.get(key, (0, 0))
        out[key] = (p - p0, b - b0)
    return out


def _traffic(row: AlgoRow, topo: Topology, workers: Sequence[str], d: Counts) -> None:
    """Bytes per host and per directed link from the counters' change over one run."""

    def tx(sw: str, port: int) -> int:
        return d.get((sw, "port_tx", port), (0, 0))[1]

    row.host_out = []
    for host in workers:
        sw, port = topo.host_attachment(host)
        row.host_out.append(d.get((sw, "port_rx", port), (0, 0))[1])
        row.links[f"{host}->{sw}"] = row.host_out[-1]
        row.links[f"{sw}->{host}"] = tx(sw, port)
    for sw, ports in topo.adjacency().items():
        for port, (peer, _) in ports.items():
            row.links[f"{sw}->{peer}"] = row.links.get(f"{sw}->{peer}", 0) + tx(sw, port)
    row.packets = sum(p for (_, name, _), (p, _) in d.items() if name == "port_rx")


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


def worker_seat(topo: Topology, host: str, n_trees: int) -> Seat:
    """Where the worker on `host` sits: its switch port, its and its switch's addresses."""
    sw, port = topo.host_attachment(host)
    h, agg = topo.hosts[host], topo.switches[sw]
    return Seat(sw, port, n_trees, False, (h.mac, h.ip), (agg.agg_mac, agg.agg_ip))


def schedule_task(algo: str, run: int, sched: Schedule, topo: Topology) -> Task:
    """What every worker is handed for a host collective: the schedule and the (mac, ip) of
    each rank's host in the schedule's rank order (a worker finds its rank there:
    `compare_worker.task_rank`)."""
    peers = tuple((topo.hosts[h].mac, topo.hosts[h].ip) for h in sched.hosts)
    return Task(algo, run, sched.to_json(), peers)


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
    schedules = collective_schedules(opts.algos, topo, workers, opts.node_ports)
    job = None
    if "ina" in opts.algos:
        job = JobSpec(JOB_ID, workers, pool_size=opts.window, n_trees=opts.trees)
        check_job_fits(topo, job)
    wires = open_wire_dir(opts)
    first_run = secrets.randbelow(MAX_RUN - len(opts.algos)) + 1 if opts.run is None else opts.run
    opts = replace(opts, workers=n, wire_dir=wires.path, run=first_run)
    loop = asyncio.new_event_loop()
    ctl: Controller | None = None
    switches: dict[str, Any] = {}
    pool: _Workers | None = None
    rows: list[AlgoRow] = []
    finished = False
    try:
        switches, addresses = start_switches(topo, workers, wires.path, opts)
        for name, address in addresses.items():
            topo.switches[name] = replace(topo.switches[name], grpc=address)
        try:
            ctl, record = loop.run_until_complete(
                program_topology(topo, job, workers, opts.loss, routes=True)
            )
        except (JobError, ControllerError) as exc:
            raise DemoError(str(exc)) from None
        n_trees = len(record.trees) if record is not None else 1
        seats = [worker_seat(topo, host, n_trees) for host in workers]
        pool = _Workers(opts, seats, lambda: all(p.poll() is None for p in switches.values()))
        ref = reference(opts)
        for i, algo in enumerate(opts.algos):
            sched = schedules.get(algo)
            if isinstance(sched, str):
                rows.append(AlgoRow(algo, skipped=sched))
                continue
            run = (first_run + i) % (MAX_RUN + 1)
            if sched is None:
                tasks = [Task(algo, run) for _ in workers]
            else:
                tasks = [schedule_task(algo, run, sched, topo) for _ in workers]
            if opts.progress:
                print(f"  running {algo} ...", file=out, flush=True)
            before = _counts(loop.run_until_complete(ctl.read_stats()))
            results = pool.run(tasks, opts.timeout)
            after = _counts(loop.run_until_complete(ctl.read_stats()))
            row = AlgoRow(algo, steps=None if sched is None else len(sched.steps))
            row.results = results
            row.seconds = max(r.end for r in results) - min(r.start for r in results)
            checks = []
            for r in results:
                assert r.values is not None
                checks.append(check(ref, r.values))
                r.values = None
            same = len({r.digest for r in results}) == 1
            row.exact = same and all(c[0] for c in checks)
            row.within_bound = all(c[3] for c in checks)
            row.max_error = max(c[1] for c in checks)
            _traffic(row, topo, workers, _delta(before, after))
            rows.append(row)
        finished = True
        return CompareReport(opts, topo, spec_text, workers, rows, os.cpu_count() or 1)
    finally:
        if pool is not None:
            pool.stop(wait=finished)
        if ctl is not None:
            loop.run_until_complete(ctl.close())
        loop.close()
        stop_switches(switches)
        wires.cleanup()


def main_compare(opts: DemoOptions) -> int:
    return run_and_report(
        lambda: run_compare(opts),
        "a result is not identical, bit-exact and within the bound on every worker (see the "
        "table above)",
    )
