"""End to end through each switch on veths in network namespaces: the switch's raw capacity and
the 4-worker allreduce's goodput as a share of it (root).

    sudo .venv/bin/python bench/bench_e2e.py [--size 1000000] [--repeat 3]
        [--switch softswitch bmv2] [--window 64] [--fixed-window] [--no-cap4]

Four host namespaces on veth pairs to a switch namespace (tests/netns.py), the switch driven
only through the controller's commands (`inaemu pipeline push`, `job add`, `job remove`,
`stats`). For each switch, side by side in one run: the softswitch on AF_PACKET, and
simple_switch_grpc when bmv2 is installed (log level `--bmv2-log-level`, default off):

1. **capacity** (`cap/s`): a one-worker job, and a process in h1 that offers INA packets at a
   paced rate, 1 s per step, and counts the results (each chunk sent once: no retransmission).
   The rate doubles from 1000/s while results keep up (>= 90 % of the offered rate), then
   grows by 15 % until two steps in a row do not. Capacity is the highest rate results came
   back at in any step (the saturation throughput); the highest offered rate that lost
   nothing is printed too, and the CPU the switch's busiest thread spent per packet. It is
   measured again right before each allreduce run, and each run's ratio uses its own: on a
   shared VM the machine's speed drifts by tens of percent within minutes.
   It is also measured (`cap4/s`, `x ideal4`; `--no-cap4` skips it) with paced senders in all
   four hosts: a four-worker job, the allreduce's shape (three packets in four add to a
   slot, each result is copied to four ports, four host processes share the machine). On a
   2-core machine bmv2 spends about twice the CPU per packet there, so this is the capacity
   the allreduce can reach.
2. **allreduce**: a 4-worker job (pool = `--window`), four `inaemu.hostlib.worker` processes
   (float32 of `--size` elements each, fixed-point codec: a MAX phase of block exponents, then
   a SUM), started together on the wall clock (`--start-at`), `--repeat` times with new seeds
   and run ids. Per run: `seconds` from the common start to the last worker's end; INA
   `packets` the workers sent; `x ideal` = seconds / (packets / capacity); `goodput` = the
   packets a lossless run needs per second, over capacity; `retx`; the spurious share of all
   packets as the switch saw it (`spur.sw`: arrivals that added nothing, i.e. duplicates,
   stale copies and answers to retransmissions; no loss is injected) and as the clients
   estimated it (`spur.cl`, a lower bound); the clients' congestion window (end / mean) and
   SRTT; the switch's busiest thread: share of the run it ran and waited for a CPU
   (`sw ran+wait`; near 100 %: the switch always had work), and its CPU per packet.
3. **what bounded each run**, judged as `inaemu mininet` judges one
   (`runs.accounting.classify`, docs/mininet.md "What bounded a run"): the CPU of the
   switch and of every worker process and the machine's over the run (`CpuMeter`, from
   /proc), and the switch's drops outside its pipeline during it (the softswitch's own
   report, from its log; bmv2's from the kernel, `Bmv2Drops`: its receive rings, its veths'
   tx_dropped). The veths are unshaped, so a run is always the emulator's; the line under
   the table says what of it (`# SWITCH run N: emulator-bound: ...`).

Prints a table; asserts nothing about the numbers. Without root (or network namespaces) it says
so and exits; a switch that is not installed is skipped with the reason. The defaults (4 x 1M
float32, 15,687 chunks per worker, 3 runs per switch) take 3-4 minutes on a 2-core machine,
most of it bmv2's allreduces (13-25 s each) and its capacity measurements (10-20 s each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests.netns: the namespaces and switch launchers
    sys.path.insert(0, str(ROOT))

from inaemu.common import args as arg  # noqa: E402
from inaemu.common.wire import (  # noqa: E402
    MAX_RUN,
    RUN_SHIFT,
    SEQ_CHUNK_MASK,
    SLOT_INDEX_MASK,
    SLOT_SET_BIT,
    Flag,
    K,
    Opcode,
    pack_payloads,
)

N_WORKERS = 4
CAPACITY_JOB, ALLREDUCE_JOB = 1, 9  # capacity jobs: 1 + the number of hosts
CAPACITY_POOL = 512
STEP_SECONDS = 1.0
LADDER_START, LADDER_FACTOR = 1000.0, 1.15
SUSTAINED = 0.9  # results at this share of the offered rate: the switch kept up
GRACE = 0.5  # seconds without a new result that end a step
WORKER_MODULE = "inaemu.hostlib.worker"
VERBOSE = False  # --verbose: every step and every worker's report line, on stderr


# ---------------------------------------------------------------------- the paced sender


@dataclass
class Step:
    offered: float  # packets/s asked for
    sent_rate: float  # packets/s actually sent
    sent: int
    received: int
    delivered: float  # results/s, first send to last result
    rtt_p50: float
    rtt_p99: float

    @property
    def lossless(self) -> bool:
        return self.received == self.sent

    @property
    def kept_up(self) -> bool:
        """Results came back at (nearly) the offered rate: the switch was not saturated. A few
        losses (bmv2 here drops packets in occasional stalls) do not change that."""
        return self.delivered >= SUSTAINED * self.offered


def paced_step(transport: Any, job: int, pool: int, run: int, rate: float, start: float) -> Step:
    """From wall-clock time `start`, offer `rate` packets/s for STEP_SECONDS to `job`: chunk i
    at start + i / rate, each chunk once (no retransmission); count the results."""
    n = int(min(max(rate * STEP_SECONDS, 200), SEQ_CHUNK_MASK))
    ids = np.arange(n, dtype=np.int64)
    payloads = pack_payloads(
        opcode=int(Opcode.SUM),
        job_id=job,
        tree_id=0,
        slot=(ids % pool) | (((ids // pool) % 2) * SLOT_SET_BIT),
        seq=(run << RUN_SHIFT) | ids,
        values=np.ones((n, K), dtype=np.int32),
    )
    sent_at = np.full(n, np.nan)
    got_at = np.full(n, np.nan)

    def take(timeout: float = 0.0) -> bool:
        got = transport.recv(timeout)
        now = time.perf_counter()
        if not len(got):
            return False
        seqs = got["seq"].astype(np.int64)
        ok = (
            ((got["ver_flags"] & int(Flag.RESULT)) != 0)
            & (got["job_id"] == job)
            & ((seqs >> RUN_SHIFT) == run)
            & ((got["slot"] & SLOT_INDEX_MASK) < pool)
        )
        idx = seqs[ok] & SEQ_CHUNK_MASK
        idx = idx[(idx < n) & np.isnan(got_at[np.minimum(idx, n - 1)])]
        got_at[idx] = now
        return True

    while take(max(0.0, min(start - time.time(), 0.05))) or time.time() < start:
        pass  # drain what an earlier step left
    t0 = time.perf_counter()
    i = 0
    while i < n:
        now = time.perf_counter()
        due = min(n, int((now - t0) * rate) + 1)
        if due > i:
            transport.send(payloads[i:due])
            sent_at[i:due] = now
            i = due
        while take():
            pass
        pause = t0 + i / rate - time.perf_counter()
        if pause > 0:
            take(pause)
    last_send = time.perf_counter()
    last_new = last_send
    while np.isnan(got_at).any() and time.perf_counter() - last_new < GRACE:
        before = int(np.count_nonzero(~np.isnan(got_at)))
        take(0.01)
        while take():
            pass
        if int(np.count_nonzero(~np.isnan(got_at))) > before:
            last_new = time.perf_counter()
    received = int(np.count_nonzero(~np.isnan(got_at)))
    rtt = (got_at - sent_at)[~np.isnan(got_at)]
    span = float(np.nanmax(got_at)) - t0 if received else float("inf")
    return Step(
        offered=rate,
        sent_rate=n / max(last_send - t0, 1e-9),
        sent=n,
        received=received,
        delivered=received / span,
        rtt_p50=float(np.percentile(rtt, 50)) if received else float("nan"),
        rtt_p99=float(np.percentile(rtt, 99)) if received else float("nan"),
    )


def capacity_worker(args: argparse.Namespace) -> int:
    """In a host's namespace: one paced step per line `rate run start` on stdin (packets/s of
    this worker, run id, wall-clock start); one JSON line (a Step) per step on stdout."""
    from inaemu.hostlib.transport import UdpTransport
    from inaemu.hostlib.worker import add_static_arp

    add_static_arp(args.switch_ip, args.switch_mac, args.local_ip)
    transport = UdpTransport(args.local_ip, args.switch_ip)
    print("READY", flush=True)
    try:
        for line in sys.stdin:
            rate, run, start = line.split()
            step = paced_step(transport, args.job, args.pool, int(run), float(rate), float(start))
            print(json.dumps(step.__dict__), flush=True)
    finally:
        transport.close()
    return 0


# ---------------------------------------------------------------------- orchestration


@dataclass
class Capacity:
    capacity: float  # packets/s in: the highest rate at which results came back, any step
    lossless: float  # packets/s in: the highest offered rate sustained without a loss
    cost: float  # CPU seconds of the switch's busiest thread per packet, at capacity
    rtt_p50: float  # of the capacity step
    steps: int


@dataclass
class RunResult:
    seconds: float
    packets_sent: int
    needed: int  # packets a lossless run sends: chunks x workers
    retransmissions: int
    wasted: int  # arrivals at the switch that added nothing
    spurious_client: int
    cwnd_final: float
    cwnd_mean: float
    srtt_ms: float
    agree: bool
    # the switch's busiest thread: seconds it ran, and waited for a CPU, per second of the run
    switch_ran: float
    switch_waited: float
    switch_cost: float  # the same CPU seconds per packet into the switch
    # what bounded it (`runs.accounting.classify`, as `inaemu mininet` judges a run): the
    # veths are unshaped, so always the emulator; the reason names the switch's and workers'
    # CPU, the machine's, and the drops outside the switch's pipeline
    bound_by: str = "unknown"
    bound_reason: str = ""


_COUNTER = re.compile(r"([a-z_]+) (\d+)")


def switch_counters(net: Any, topo_file: Path) -> dict[str, int]:
    """The switch's drops, events and port totals from `inaemu stats`."""
    out = inaemu(net, "stats", "-t", str(topo_file))
    counts: dict[str, int] = {"rx": 0, "tx": 0}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("switch ") and "drops" in line:
            for name, n in _COUNTER.findall(line.split("drops", 1)[1]):
                counts["drop_" + name] = int(n)
        elif line.startswith("events:"):
            for name, n in _COUNTER.findall(line[len("events:") :]):
                counts[name] = int(n)
        elif line.startswith("port "):
            m = re.match(r"port\s+\d+: rx\s+(\d+)\s+tx\s+(\d+)", line)
            if m:
                counts["rx"] += int(m.group(1))
                counts["tx"] += int(m.group(2))
    return counts


def inaemu(net: Any, *args: str) -> str:
    proc = net.run_in_switch([sys.executable, "-m", "inaemu.cli", *args])
    if proc.returncode != 0:
        raise RuntimeError(f"inaemu {' '.join(args)}: {proc.stderr.strip()}")
    return str(proc.stdout)


def measure_capacity(
    net: Any, topo_file: Path, hosts: list[str], max_rate: float, switch_pid: int
) -> Capacity:
    """The highest rate (INA packets/s into the switch) at which a job of `hosts`, each host
    offering its share of it paced, gets every result back (see the module doc)."""
    t = str(topo_file)
    job = CAPACITY_JOB + len(hosts)
    inaemu(net, "job", "add", "-t", t, "--job", str(job), "--workers", ",".join(hosts),
           "--pool", str(CAPACITY_POOL))  # fmt: skip
    agg = net.topology.switches[net.switch_name]
    procs = []
    for host in hosts:
        argv = [sys.executable, str(Path(__file__).resolve()), "capacity-worker"]
        argv += ["--job", str(job), "--pool", str(CAPACITY_POOL)]
        argv += ["--local-ip", net.topology.hosts[host].ip, "--switch-ip", agg.agg_ip]
        argv += ["--switch-mac", agg.agg_mac]
        procs.append(net.host(host, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1))
    runs = iter(range(1, MAX_RUN))
    steps: list[list[Step]] = []
    costs: list[float] = []  # the switch's busiest thread, CPU seconds per packet, per step

    def step(rate: float, record: bool = True) -> bool:
        run, start = next(runs), time.time() + 0.3
        cpu_before = thread_cpu(switch_pid)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{rate / len(hosts)} {run} {start}\n")
            proc.stdin.flush()
        got = []
        for proc in procs:
            assert proc.stdout is not None
            got.append(Step(**json.loads(proc.stdout.readline())))
        if VERBOSE:
            print(f"#   {len(hosts)} x {got}", file=sys.stderr)
        ran, _ = busiest(cpu_before, thread_cpu(switch_pid))
        if record:
            steps.append(got)
            costs.append(ran / max(sum(s.sent for s in got), 1))
        return all(s.kept_up for s in got)

    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "READY":
                raise RuntimeError(f"capacity worker in {hosts}: no READY")
        step(LADDER_START, record=False)  # warm-up: ARP, caches, the slots' first takeover
        rate = LADDER_START  # doubling to the first rate it did not keep up with, then finer
        while rate < max_rate and step(rate):
            rate *= 2
        rate, failed = rate / 2 * LADDER_FACTOR, 0
        while rate < max_rate and failed < 2:
            failed = 0 if step(rate) else failed + 1
            rate *= LADDER_FACTOR
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(30)
        inaemu(net, "job", "remove", "-t", t, "--job", str(job))

    def total(st: list[Step]) -> float:
        return sum(s.delivered for s in st)

    best = max(range(len(steps)), key=lambda i: total(steps[i]))
    clean = [st for st in steps if all(s.kept_up and s.lossless for s in st)]
    return Capacity(
        capacity=total(steps[best]),
        cost=costs[best],
        lossless=max((sum(s.offered for s in st) for st in clean), default=0.0),
        rtt_p50=steps[best][0].rtt_p50,
        steps=len(steps),
    )


Times = dict[int, tuple[float, float]]  # thread id -> (seconds ran, seconds waited to run)


def thread_cpu(pid: int) -> Times:
    """Seconds each thread of process `pid` ran, and waited to run (runnable, not running:
    the machine's other work had the CPU), from /proc/<pid>/task/*/schedstat."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ran, waited, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):  # the thread ended
            continue
        out[int(task.name)] = (int(ran) / 1e9, int(waited) / 1e9)
    return out


def busiest(before: Times, after: Times) -> tuple[float, float]:
    """(ran, waited) seconds of the thread that ran most between two `thread_cpu` reads."""
    deltas = [
        (ran - before.get(tid, (0.0, 0.0))[0], waited - before.get(tid, (0.0, 0.0))[1])
        for tid, (ran, waited) in after.items()
    ]
    return max(deltas, default=(0.0, 0.0))


def run_allreduce(
    net: Any,
    topo_file: Path,
    args: argparse.Namespace,
    seed: int,
    run: int,
    before: dict[str, int],
    switch: tuple[int, str],
    read_drops: Callable[[], dict[str, dict[str, int]]],
) -> tuple[RunResult, dict[str, int]]:
    """One allreduce of all hosts; `before`: the switch's counters before it; `switch`: its
    pid and kind; `read_drops`: its drops outside the pipeline so far. Returns the result and
    the counters after it."""
    from inaemu.runs.accounting import (
        DROPS_REPORTED_WITHIN,
        CpuMeter,
        classify,
        drops_delta,
        emulator_drops,
        wait_exited,
    )

    switch_pid, kind = switch
    agg = net.topology.switches[net.switch_name]
    cpu_before = thread_cpu(switch_pid)
    drops_before = read_drops()
    with CpuMeter() as meter:
        meter.track(switch_pid, net.switch_name, kind)
        start_at = time.time() + args.start_delay
        procs = []
        for rank, (name, host) in enumerate(sorted(net.topology.hosts.items())):
            argv = [sys.executable, *([args.worker] if args.worker else ["-m", WORKER_MODULE])]
            argv += ["--job", str(ALLREDUCE_JOB)]
            argv += ["--workers", str(N_WORKERS), "--rank", str(rank), "--local-ip", host.ip]
            argv += ["--mac", host.mac, "--switch-ip", agg.agg_ip, "--switch-mac", agg.agg_mac]
            argv += ["--size", str(args.size), "--seed", str(seed), "--codec", "fixedpoint"]
            argv += ["--window", str(args.window), "--run", str(run), "--timeout", "60"]
            argv += ["--start-at", f"{start_at:.6f}"]
            if args.fixed_window:
                argv += ["--fixed-window"]
            procs.append(net.host(name, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            meter.track(procs[-1].pid, name, "worker")
        lines = []
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            out, err = proc.stdout.read(), proc.stderr.read()  # until it exits
            if wait_exited(proc, 600):
                meter.finished(proc.pid)  # its CPU, read before it is reaped
            proc.wait(5)
            if proc.returncode != 0:
                raise RuntimeError(f"worker failed: {err.strip()}")
            lines.append(json.loads(out.splitlines()[-1]))
    if VERBOSE:
        for ln in lines:
            print(f"#   {ln} (start +{ln['start'] - start_at:.3f}s)", file=sys.stderr)
    ran, waited = busiest(cpu_before, thread_cpu(switch_pid))
    end = max(ln["end"] for ln in lines)
    time.sleep(max(0.0, DROPS_REPORTED_WITHIN - (time.time() - end)))
    dropped = emulator_drops(drops_delta(drops_before, read_drops()), {})
    bound = classify(end - start_at, None, meter.usage(start_at, end), dropped, shaped=False)
    after = switch_counters(net, topo_file)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    n_chunks = _chunks(args.size)
    result = RunResult(
        bound_by=bound.by,
        bound_reason=bound.reason,
        seconds=max(ln["end"] for ln in lines) - start_at,
        packets_sent=sum(ln["packets_sent"] for ln in lines),
        needed=n_chunks * N_WORKERS,
        retransmissions=sum(ln["retransmissions"] for ln in lines),
        wasted=delta.get("rx", 0) - delta.get("contribution", 0),
        spurious_client=sum(ln.get("spurious_retransmissions", 0) for ln in lines),
        cwnd_final=float(np.mean([ln.get("cwnd_final", args.window) for ln in lines])),
        cwnd_mean=float(np.mean([ln.get("cwnd_mean", args.window) for ln in lines])),
        srtt_ms=float(np.mean([(ln.get("srtt") or 0.0) * 1e3 for ln in lines])),
        agree=len({ln["digest"] for ln in lines}) == 1,
        switch_ran=ran / (max(ln["end"] for ln in lines) - start_at),
        switch_waited=waited / (max(ln["end"] for ln in lines) - start_at),
        switch_cost=ran / max(delta.get("rx", 0), 1),
    )
    return result, after


def _chunks(size: int) -> int:
    """Chunks one worker sends for a float32 array of `size` with the fixed-point codec."""
    from inaemu.hostlib.codecs.fixedpoint import DEFAULT_BLOCK_SIZE

    blocks = -(-size // DEFAULT_BLOCK_SIZE)
    return -(-blocks // K) + -(-size // K)


@dataclass
class SwitchResult:
    kind: str
    cap1: list[Capacity]  # a one-worker job, measured right before each run
    cap4: Capacity | None  # a job of all N_WORKERS hosts, each offering its share
    runs: list[RunResult]
    seconds: float


def bench_switch(kind: str, args: argparse.Namespace) -> SwitchResult | str:
    from inaemu.conformance.bmv2_target import TOOLS
    from inaemu.p4.build import compile_p4
    from inaemu.p4.tools import SIMPLE_SWITCH_GRPC, missing_tools
    from inaemu.runs.accounting import Bmv2Drops, read_port_drops
    from inaemu.topology.builders import star
    from tests.netns import GRPC, StarNet, start_bmv2, start_softswitch

    started = time.monotonic()
    if kind == "bmv2":
        missing = missing_tools((*TOOLS, SIMPLE_SWITCH_GRPC))
        if missing is not None:
            return f"bmv2 skipped: {missing}"
    topo = star(N_WORKERS, grpc=GRPC)
    if kind == "bmv2":
        program = str(compile_p4())
        topo.switches["s1"] = replace(topo.switches["s1"], program=program)
    hosts = sorted(topo.hosts)
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmpdir:
        tmp = Path(tmpdir)
        topo_file = tmp / "topology.json"
        topo.save(topo_file)
        with StarNet(topo) as net:
            read_drops: Callable[[], dict[str, dict[str, int]]]
            if kind == "softswitch":
                log = tmp / "softswitch.log"
                switch = start_softswitch(net, log=log)
                max_rate = 300_000.0

                def read_drops() -> dict[str, dict[str, int]]:
                    return {net.switch_name: read_port_drops(log)}

            else:
                switch = start_bmv2(net, tmp, log_level=args.bmv2_log_level)
                max_rate = 50_000.0
                bmv2_drops = Bmv2Drops()
                ports = [net.interface(p) for p in sorted(net.ports.values())]

                def read_drops() -> dict[str, dict[str, int]]:
                    pid = switch.pid
                    return {net.switch_name: bmv2_drops.read(pid, ports, net.switch_ns)}

            inaemu(net, "pipeline", "push", "-t", str(topo_file))
            cap4 = None
            if args.cap4:
                cap4 = measure_capacity(net, topo_file, hosts, max_rate, switch.pid)
            inaemu(net, "job", "add", "-t", str(topo_file), "--job", str(ALLREDUCE_JOB),
                   "--workers", ",".join(hosts), "--pool", str(args.window))  # fmt: skip
            runs, cap1 = [], []
            for rep in range(args.repeat):
                # Paired: the capacity right before each allreduce, so that a machine whose
                # speed drifts (a shared VM) moves both sides of the ratio together.
                cap1.append(measure_capacity(net, topo_file, hosts[:1], max_rate, switch.pid))
                counters = switch_counters(net, topo_file)
                res, _ = run_allreduce(
                    net, topo_file, args, rep + 1, rep + 1, counters, (switch.pid, kind),
                    read_drops,
                )  # fmt: skip
                runs.append(res)
    return SwitchResult(kind, cap1, cap4, runs, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    ap = arg.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="command")
    cw = sub.add_parser("capacity-worker", help="(internal) a paced sender, in a host")
    cw.add_argument("--job", type=arg.JOB_ID, required=True)
    cw.add_argument("--pool", type=arg.WINDOW, required=True)
    cw.add_argument("--local-ip", required=True)
    cw.add_argument("--switch-ip", required=True)
    cw.add_argument("--switch-mac", required=True)
    ap.add_argument(
        "--size", type=arg.ELEMENTS, default=1_000_000, help="float32 elements per worker"
    )
    ap.add_argument("--repeat", type=arg.REPEAT, default=3, help="allreduces per switch")
    ap.add_argument("--window", type=arg.WINDOW, default=64, help="the job's pool (the window)")
    ap.add_argument("--switch", nargs="+", default=["softswitch", "bmv2"])
    ap.add_argument("--fixed-window", action="store_true", help="workers without cwnd")
    ap.add_argument(
        "--cap4",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the capacity for paced senders in all hosts (default on)",
    )
    ap.add_argument("--bmv2-log-level", default="off", help="simple_switch_grpc -L")
    ap.add_argument("--start-delay", type=arg.SECONDS, default=2.5, help="seconds to start workers")
    ap.add_argument(
        "--worker",
        help=f"run this script as the worker instead of -m {WORKER_MODULE} (to compare "
        "clients: it takes the same arguments)",
    )
    ap.add_argument("--verbose", action="store_true", help="each step and worker, on stderr")
    args = ap.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose
    if args.command == "capacity-worker":
        return capacity_worker(args)

    from tests.netns import namespaces_missing

    missing = namespaces_missing()
    if missing is not None:
        print(f"bench_e2e skipped: {missing}")
        return 0
    print(
        f"# end-to-end benchmark: {N_WORKERS} workers x {args.size:,} float32 (fixed point, "
        f"{_chunks(args.size):,} chunks each), window {args.window}"
        f"{' fixed' if args.fixed_window else ''}, {args.repeat} runs per switch; "
        f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus"
    )
    results: list[SwitchResult] = []
    for kind in args.switch:
        got = bench_switch(kind, args)
        if isinstance(got, str):
            print(f"# {got}")
            continue
        results.append(got)
        measured_caps = [(f"1 worker, before run {i + 1}", c) for i, c in enumerate(got.cap1)]
        for name, measured in [*measured_caps, (f"{N_WORKERS} workers", got.cap4)]:
            if measured is not None:
                print(
                    f"# {kind} capacity, {name}: {measured.capacity:,.0f} packets/s in (RTT "
                    f"p50 {measured.rtt_p50 * 1e3:.1f} ms, {measured.cost * 1e6:.0f} us of "
                    f"the switch's busiest thread per packet); lossless up to "
                    f"{measured.lossless:,.0f}/s offered; {measured.steps} steps"
                )
        print(f"# {kind}: {got.seconds:.0f} s in all")
    cols = [("switch", 10), ("cap/s", 7), ("seconds", 7), ("packets", 7), ("x ideal", 7)]
    cols += [("goodput", 7), ("retx", 6), ("spur.sw", 7), ("spur.cl", 7), ("cwnd end/avg", 12)]
    cols += [("srtt ms", 7), ("sw ran+wait", 11), ("us/pkt", 6), ("ok", 3)] + (
        [("cap4/s", 7), ("x ideal4", 8)] if args.cap4 else []
    )
    print(" ".join(f"{name:<{w}}" if name == "switch" else f"{name:>{w}}" for name, w in cols))
    for res in results:
        for r, cap1 in zip(res.runs, res.cap1, strict=True):
            cap = cap1.capacity or float("nan")
            line = (
                f"{res.kind:<10} {cap:>7,.0f} {r.seconds:>7.2f} {r.packets_sent:>7,} "
                f"{r.seconds * cap / r.packets_sent:>7.2f} {r.needed / r.seconds / cap:>7.0%} "
                f"{r.retransmissions:>6,} {r.wasted / r.packets_sent:>7.1%} "
                f"{r.spurious_client / r.packets_sent:>7.1%} "
                f"{r.cwnd_final:>5.1f}/{r.cwnd_mean:>6.1f} {r.srtt_ms:>7.1f} "
                f"{r.switch_ran:>6.0%}+{r.switch_waited:>3.0%} {r.switch_cost * 1e6:>6.0f} "
                f"{'yes' if r.agree else 'NO':>3}"
            )
            if res.cap4 is not None:
                c4 = res.cap4.capacity or float("nan")
                line += f" {c4:>7,.0f} {r.seconds * c4 / r.packets_sent:>8.2f}"
            print(line)
    for res in results:  # what bounded each run (`inaemu mininet`'s accounting)
        for i, r in enumerate(res.runs):
            print(f"# {res.kind} run {i + 1}: {r.bound_by}-bound: {r.bound_reason}")
    for res in results:
        ratios = sorted(
            r.seconds * c.capacity / r.packets_sent for r, c in zip(res.runs, res.cap1, strict=True)
        )
        if ratios:
            print(
                f"# {res.kind}: x ideal median {float(np.median(ratios)):.2f} "
                f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f}) over {len(ratios)} runs"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
