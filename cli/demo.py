"""`inaemu demo`: an emulated allreduce on the embedded softswitches, no root needed.

1. starts the embedded network (`embedded.network.EmbeddedNetwork`): one softswitch process
   (loopback wires in a private wire dir, P4Runtime on 127.0.0.1) for a star of `--workers`
   hosts, or with `--topo SPEC` (`leaf-spine:2x2x4`, `bigraph:4x4`, ... or a topology file)
   one per switch of the topology, joined port to port by loopback wires as its links say;
2. programs them over gRPC with the controller (the job's trees, slot pools and groups on
   every switch in one change, rolled back on a refusal; loss injection if asked);
3. runs one worker process per host (or the first `--workers`) that all-reduces a float32
   array through them with a codec;
4. checks every worker's result (bit for bit against the reference switch, and against the
   float64 sum within the codec's bound: on one switch each worker checks its own, with a
   topology the parent checks every result once) and prints a report from the clients'
   statistics and the switches' counters. With a topology the report adds each switch's
   packets, each link's packets each way and the trees: the root of each, the switches under
   it, and the most trees any link carries.

Ctrl-C, SIGTERM, SIGHUP or any failure stops the workers and the switches and exits non-zero.
A demo killed with SIGKILL cannot stop them: they stop themselves when it ends
(`common.lifeline`: the switches are started with `--parent-pid`, the workers call
`die_with_parent`).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any, Protocol

from inaemu.cli.demo_options import TOPO_SIZE as TOPO_SIZE
from inaemu.cli.demo_options import DemoError as DemoError
from inaemu.cli.demo_options import DemoOptions as DemoOptions
from inaemu.cli.demo_options import demo_topology as demo_topology
from inaemu.cli.demo_worker import (
    JOB_ID,
    Seat,
    check,
    reference,
    run_worker,
)
from inaemu.cli.demo_worker import WorkerResult as WorkerResult
from inaemu.common import args as arg
from inaemu.common.wire import FRAME_BYTES, MAX_RUN, K
from inaemu.controller.jobs import JobRecord, JobSpec
from inaemu.controller.stats import StatsReport
from inaemu.controller.trees import parents
from inaemu.embedded.network import EmbeddedNetwork, check_job_fits
from inaemu.runs.network import NetworkError
from inaemu.topology.builders import describe_roles, star
from inaemu.topology.model import Topology

SWITCH_START_TIMEOUT = 30.0  # seconds for the softswitch process to print READY
WORKER_START_TIMEOUT = 60.0  # seconds for every worker process to attach to its switch


@dataclass
class DemoReport:
    options: DemoOptions
    wall: float
    results: list[WorkerResult]
    stats: StatsReport
    chunks: int
    notes: list[str] = field(default_factory=list)
    job: JobRecord | None = None  # with a topology: the job's trees
    topology: Topology | None = None  # with a topology: the one the switches form

    @property
    def ok(self) -> bool:
        """Identical on every worker, bit-exact vs the reference switch, within the bound."""
        same = len({r.digest for r in self.results}) == 1
        return same and all(r.exact_vs_reference and r.within_bound for r in self.results)

    def render(self) -> str:
        o = self.options
        multi = self.job is not None and self.topology is not None
        counters = list(self.stats.switches.values()) if multi else [self.stats.switches["s1"]]
        rx = sum(
            n for c in counters for (name, _), (n, _) in c.indexed.items() if name == "port_rx"
        )
        tx = sum(
            n for c in counters for (name, _), (n, _) in c.indexed.items() if name == "port_tx"
        )
        drops: dict[str, int] = {}
        events: dict[str, int] = {}
        for c in counters:
            for k, v in c.drops().items():
                drops[k] = drops.get(k, 0) + v
            for k, v in c.events().items():
                events[k] = events.get(k, 0) + v
        r0 = self.results[0]
        slowest = max(r.seconds for r in self.results)
        into = "into the switches" if multi else "into the switch"
        checks = "until the last result" if multi else "including the workers' checks"
        lines = [
            f"inaemu demo: {o.workers} workers x {o.size:,} "
            f"{'int32' if o.codec == 'int32' else 'float32'}, codec {o.codec}"
            + (f", density {o.density:g}" if o.density < 1 else "")
            + f", window {o.window}, injected loss {o.loss:.1%}",
        ]
        if self.topology is not None:
            lines.append(
                f"  topology        {o.topo}: {len(self.topology.switches)} switches "
                f"({describe_roles(self.topology)}), {len(self.topology.hosts)} hosts"
            )
        lines += [
            f"  time            {slowest:.2f} s allreduce ({self.wall:.2f} s {checks})",
            f"  throughput      {o.size / slowest:,.0f} elements/s per worker"
            f" ({o.size * o.workers / slowest:,.0f} summed/s)",
            "  bound           this machine's processes, not a network: embedded links have no "
            "rate (a network's numbers: inaemu mininet --bw)",
            f"  packets         {rx:,} {into}, {tx:,} out ({FRAME_BYTES} B frames, K={K})",
            f"  on the wire     {r0.bytes_sent / 1e6:.2f} MB per worker "
            f"({r0.bytes_sent / o.size:.3f} B/element, {r0.packets_sent:,} packets)",
            f"  retransmissions {sum(r.retransmissions for r in self.results):,} "
            f"(duplicate results ignored: {sum(r.duplicate_results for r in self.results):,})",
            "  switch drops    "
            + (", ".join(f"{k.lower()} {v:,}" for k, v in drops.items()) or "none"),
            "  switch events   " + ", ".join(f"{k.lower()} {v:,}" for k, v in events.items()),
        ]
        same = len({r.digest for r in self.results}) == 1
        exact = all(r.exact_vs_reference for r in self.results)
        worst = max(r.max_error for r in self.results)
        bound = max(r.bound for r in self.results)
        lines.append(
            f"  result          {'identical on every worker' if same else 'WORKERS DISAGREE'}; "
            f"{'bit-exact' if exact else 'NOT bit-exact'} vs the reference switch"
        )
        lines.append(
            f"  error bound     max |error| {worst:.3g} vs float64 sum; bound {bound:.3g}: "
            + ("met" if all(r.within_bound for r in self.results) else "NOT MET")
        )
        if self.job is not None and self.topology is not None:
            lines += tree_layout(self.job, self.topology)
            lines += switch_traffic(self.stats)
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def tree_layout(record: JobRecord, topo: Topology) -> list[str]:
    """The report's lines on a job's trees: each tree's root and who sends to whom."""
    lines = [
        f"  trees           {len(record.trees)}, chunks striped over them; at most "
        f"{record.max_trees_per_link} tree(s) per link each way"
    ]
    for t, tree in enumerate(record.trees):
        below: dict[str, list[str]] = {}
        for sw, up in sorted(parents(tree, topo).items()):
            if up is not None:
                below.setdefault(up[0], []).append(sw)
        root = record.roots[t]
        shape = "; ".join(f"{p} <- {', '.join(cs)}" for p, cs in sorted(below.items()))
        lines.append(f"    tree {t:<3} root {root}" + (f": {shape}" if shape else ""))
    return lines


def switch_traffic(stats: StatsReport) -> list[str]:
    """The report's lines on packets per switch and per link between switches."""
    roles = {name: sw.role for name, sw in stats.topology.switches.items()}
    lines = ["  per switch      packets in / out"]
    for name in stats.topology.switches:
        if name in stats.switches:
            rx, tx = stats.switch_packets(name)
            label = f"{name} ({roles[name]})" if roles[name] else name
            lines.append(f"    {label:<18} {rx:>10,} / {tx:,}")
    links = stats.links()
    if links:
        lines.append("  per link        packets each way (counted in at the other end)")
        for lk in links:
            a, b = f"{lk.a}:{lk.a_port}", f"{lk.b}:{lk.b_port}"
            lines.append(
                f"    {a:>8} -> {b:<8} {lk.a_sent:>9,} ({lk.b_received:,})   "
                f"{b:>8} -> {a:<8} {lk.b_sent:>9,} ({lk.a_received:,})"
            )
    return lines


def _progress_bar(done: int, total: int, started: float) -> str:
    width = 30
    frac = min(done / total, 1.0) if total else 1.0
    bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
    return f"\r  [{bar}] {frac:6.1%}  {time.monotonic() - started:5.1f} s"


def _check_options(opts: DemoOptions) -> None:
    if opts.size < 1:
        raise DemoError("--size must be at least 1")
    if not 0.0 <= opts.loss < 1.0:
        raise DemoError("--loss must be in [0, 1)")
    if not 0.0 < opts.density <= 1.0:
        raise DemoError("--density must be in (0, 1]")
    from inaemu.hostlib.codecs import CODECS

    if opts.codec not in CODECS:
        raise DemoError(f"unknown codec {opts.codec!r}; choose from {', '.join(sorted(CODECS))}")


def _run_workers(
    opts: DemoOptions,
    seats: Sequence[Seat],
    out: Any,
    alive: Callable[[], bool],
) -> tuple[list[WorkerResult], float]:
    """Start one worker process per seat, let them go together once all are attached, and
    collect their results; (results by rank, seconds from go to the last result)."""
    ctx = mp.get_context("spawn")  # no fork after gRPC threads started
    go = ctx.Event()
    done = ctx.Value("q", 0)
    ready = ctx.Value("q", 0)
    results: Queue[WorkerResult | str] = ctx.Queue()
    procs = [
        ctx.Process(target=run_worker, args=(r, opts, go, done, results, ready, seat), daemon=True)
        for r, seat in enumerate(seats)
    ]

    def failure() -> str | None:
        try:
            item = results.get_nowait()
        except queue.Empty:
            item = None
        if isinstance(item, str):
            return item
        if any(p.exitcode not in (None, 0) for p in procs) or not alive():
            return "a worker or the switch died; see the messages above"
        return None

    try:
        for p in procs:
            p.start()
        # every worker attached (its wire end bound) before the first packet, so that no
        # result finds a worker missing
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while ready.value < len(procs):
            if (problem := failure()) is not None:
                raise DemoError(problem)
            if time.monotonic() > deadline:
                raise DemoError(f"the workers did not start within {WORKER_START_TIMEOUT:.0f} s")
            time.sleep(0.05)
        started = time.monotonic()
        go.set()
        # chunks per worker: estimated from the codec's phases; the bar tracks worker 0's share
        expected_chunks = max(1, -(-opts.size // K)) * len(seats)
        collected: list[WorkerResult] = []
        show = opts.progress and out.isatty()
        while len(collected) < len(seats):
            try:
                item = results.get(timeout=0.2)
            except queue.Empty:
                if show:
                    out.write(_progress_bar(done.value, expected_chunks, started))
                    out.flush()
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or not alive():
                    raise DemoError("a worker or the switch died; see the messages above") from None
                continue
            if isinstance(item, str):
                raise DemoError(item)
            collected.append(item)
        wall = time.monotonic() - started
        if show:
            out.write(_progress_bar(expected_chunks, expected_chunks, started) + "\n")
        return sorted(collected, key=lambda r: r.rank), wall
    finally:
        launched = [p for p in procs if p.pid is not None]
        for p in launched:
            if p.is_alive():
                p.terminate()
        for p in launched:
            p.join(5)


def run_demo(opts: DemoOptions, out: Any = sys.stdout) -> DemoReport:
    """The demo on one switch (a star of `--workers` hosts) or on `--topo`'s switches (the
    module doc)."""
    _check_options(opts)
    if opts.topo is None:
        if not 1 <= opts.workers <= 32:
            raise DemoError("--workers must be 1..32 (one switch; the slot bitmap holds 32)")
        topo = star(opts.workers)
    else:
        if opts.grpc_port:
            raise DemoError(
                "--grpc-port is for one switch; with --topo each switch takes a free port"
            )
        topo = demo_topology(opts.topo)
    hosts = list(topo.hosts)
    n = opts.workers or len(hosts)
    if not 1 <= n <= len(hosts):
        raise DemoError(f"--workers must be 1..{len(hosts)} (the hosts of {opts.topo})")
    workers = tuple(hosts[:n])
    spec = JobSpec(JOB_ID, workers, pool_size=opts.window, n_trees=opts.trees)
    check_job(topo, spec)
    arg.checks_done()
    # one fresh run id for all the workers (docs/protocol.md, section 5)
    run = secrets.randbelow(MAX_RUN + 1) if opts.run is None else opts.run
    with demo_network(opts, topo, workers, spec) as net:
        opts = replace(opts, workers=n, wire_dir=net.wire_dir, run=run)
        # one switch: each worker checks its own result; a topology: the parent checks all
        one_switch = opts.topo is None
        assert net.record is not None
        seats = [worker_seat(topo, h, len(net.record.trees), one_switch) for h in workers]
        collected, wall = _run_workers(opts, seats, out, net.alive)
        stats = net.read_stats()
    if not one_switch:
        ref = reference(opts)  # once, for every worker's result
        for r in collected:
            assert r.values is not None
            r.exact_vs_reference, r.max_error, r.bound, r.within_bound = check(ref, r.values)
            r.values = None
    expected_chunks = max(1, -(-opts.size // K)) * n
    report = DemoReport(opts, wall, collected, stats, expected_chunks)
    if not one_switch:
        report.job, report.topology = net.record, topo
    if opts.codec.startswith("sketch") and opts.density == 1.0:
        report.notes.append("sketch codecs pay off on sparse gradients: try --density 0.05")
    return report


def demo_network(
    opts: DemoOptions,
    topo: Topology,
    workers: Sequence[str],
    job: JobSpec | None,
    *,
    routes: bool = False,
    log_dir: Path | None = None,
) -> EmbeddedNetwork:
    """The embedded network a demo asks for (not yet started)."""
    return EmbeddedNetwork(
        topo,
        workers,
        job=job,
        loss=opts.loss,
        routes=routes,
        seed=opts.seed,
        dataplane=opts.dataplane,
        wire_dir=opts.wire_dir,
        grpc_port=opts.grpc_port,
        log_dir=log_dir,
    )


def worker_seat(topo: Topology, host: str, n_trees: int, check_here: bool = False) -> Seat:
    """Where the worker on `host` sits: its switch port, its and its switch's addresses."""
    sw, port = topo.host_attachment(host)
    h, agg = topo.hosts[host], topo.switches[sw]
    return Seat(sw, port, n_trees, check_here, (h.mac, h.ip), (agg.agg_mac, agg.agg_ip))


def check_job(topo: Topology, spec: JobSpec) -> None:
    """Refuse (`DemoError`) a job the topology cannot hold, before any process starts."""
    try:
        check_job_fits(topo, spec)
    except NetworkError as exc:
        raise DemoError(str(exc)) from None


def main_demo(opts: DemoOptions) -> int:
    """`inaemu demo` without `--algo` (with it: `compare.main_compare`)."""
    return run_and_report(
        lambda: run_demo(opts),
        "the result is not identical, bit-exact and within the bound on every worker (see the "
        "report above)",
    )


class Rendered(Protocol):
    @property
    def ok(self) -> bool: ...

    def render(self) -> str: ...


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals() -> Iterator[list[str]]:
    """While inside: SIGTERM and SIGHUP (a CI job cancelled, a terminal closed) unwind like
    Ctrl-C, raising KeyboardInterrupt, so that the `finally`s stop the workers and switches;
    only the first one raises, so that a second does not cut that short. Yields the names of
    the signals received. A signal ignored from the start (nohup) stays ignored."""
    received: list[str] = []

    def unwind(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        if len(received) == 1:
            raise KeyboardInterrupt

    old = {
        s: signal.signal(s, unwind) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN
    }
    try:
        yield received
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def run_and_report(run: Callable[[], Rendered], not_ok: str) -> int:
    """Run a demo, print its report; the exit status: 0 ok, 1 failed (`not_ok` says how, on
    stderr), 130 interrupted (Ctrl-C, SIGTERM, SIGHUP). Workers and switches are stopped by
    `run` itself."""
    with stop_signals() as received:
        try:
            report = run()
        except (DemoError, NetworkError) as exc:
            print(f"inaemu demo: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            how = f" ({received[0]})" if received else ""
            print(f"\ninaemu demo: interrupted{how}; workers and switches stopped", file=sys.stderr)
            return 130
    print(report.render())
    if not report.ok:
        print(f"inaemu demo: {not_ok}", file=sys.stderr)
        return 1
    return 0
