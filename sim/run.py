"""`inaemu sim`: allreduce algorithms on a simulated network (ns-3), compared in one table.

    inaemu sim --topo torus:8x8 --algo ring,multitree --size 256K
    inaemu sim --topo leaf-spine:4x2x8 --algo all --sizes 64K,256K,1M --repeat 3

Options and output follow `inaemu mininet --algo` (docs/mininet.md): the same topology specs
and files, the same algorithms (`runs.algorithms`), sizes, repeats, table, `summary.json` and
completion plot (`runs.compare`). What differs is the network: every link has the rate, delay
and queue given here (defaults a reader of the seed papers expects: 100 Gbit/s, 1 us, 1 MB,
Ethernet's 24 bytes per frame; every default is printed), the switches run the project's
pipeline and the hosts the project's protocols in simulated time, and times are simulated.
Every run also says its wall time, events, packets, drops per queue and what bounded it
(the links, or the protocol: steps, round trips, the window); long runs print a progress line.

The simulations run in a child process (`python -m inaemu.sim.child`): ns-3 aborts its
process on a failed assertion, and that must cost one line here, not `inaemu sim`. Nothing
is written into the current directory: the run dir is under the temp dir unless
`--run-dir` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inaemu.common import args as arg
from inaemu.common.wire import FRAME_BYTES
from inaemu.runs import algorithms
from inaemu.runs.accounting import LINK_SLACK
from inaemu.runs.compare import (
    COLUMNS,
    LinkUse,
    Row,
    Verdict,
    make_row,
    parse_size,
    parse_sizes,
    plot_completion,
    render_table,
    size_label,
)
from inaemu.runs.footprint import mem_available_mib
from inaemu.sim.engine import SimError, ns3_available
from inaemu.sim.network import (
    ETHERNET_OVERHEAD,
    LinkSpec,
    SpecError,
    parse_delay,
    parse_queue,
    parse_rate,
)
from inaemu.sim.tcp import MTU_RANGE, min_rto_for, mtu_problem
from inaemu.topology.builders import load_or_build
from inaemu.topology.model import Topology, TopologyError
from inaemu.topology.routes import NODE_PORTS

PROG = "inaemu sim"
OVERHEAD = arg.Integer(0, 1000, "a number of bytes")
RUNS_DIR = "inaemu-sim"
DEFAULTS = {"rate": "100G", "delay": "1us", "queue": "1MB"}
PROGRESS_EVERY = 10.0
TABLE = (
    "algorithm",
    "size",
    "check",
    "sim time",
    "sim spread",
    "sim floor",
    "load",
    "busiest link",
    "busiest MB",
    "host sent MB max/mean",
    "packets",
    "retx",
    "drops",
    "events",
    "wall s",
    "bound",
    "max |error|",
)
# bytes of memory a simulated run takes, about: ns-3 and the glue loaded, then per element of
# every worker's array (inputs, results, the client's frames and the codec's buffers, the
# truth it is checked against: measured on star and leaf-spine runs, `bench/bench_sim.py`)
BASE_MIB = 800
BYTES_PER_ELEMENT = 48


def _rate(text: str) -> float:
    try:
        return parse_rate(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _delay(text: str) -> int:
    try:
        return parse_delay(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _queue(text: str) -> str:
    try:
        return parse_queue(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_LINK_LOSS = re.compile(r"^([\w.-]+)-([\w.-]+)=(.+)$")


def _mtu(text: str) -> int:
    lo, hi = MTU_RANGE
    try:
        mtu = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: an MTU in bytes, {lo} to {hi}") from None
    problem = mtu_problem(mtu)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return mtu


def _link_loss(text: str) -> tuple[str, str, float]:
    m = _LINK_LOSS.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give A-B=P, the link between nodes A and B and its loss, e.g. s1-s2=0.01"
        )
    return m[1], m[2], arg.LOSS(m[3])


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog=PROG,
        description="Allreduce algorithms on a network simulated with ns-3: the project's "
        "pipeline on every switch, the project's protocols on every host, in simulated time "
        "(docs/sim.md). Needs the [sim] extra (pip install 'inaemu[sim]').",
    )
    where = ap.add_mutually_exclusive_group()
    where.add_argument(
        "--topo",
        default=None,
        help="a built-in topology: star:4, leaf-spine:2x2x2 (leaves x spines x hosts per "
        "leaf), fat-tree:4, bigraph:4x4, torus:8x8, mesh:4x4 (default star:4)",
    )
    where.add_argument("-t", "--topology", type=Path, help="a topology.json instead of --topo")
    ap.add_argument(
        "--algo",
        default="ina",
        metavar="NAMES",
        help="the allreduce algorithm, a comma list of them or all: "
        f"{algorithms.describe(SIMULATED)}",
    )
    sizes = ap.add_mutually_exclusive_group()
    sizes.add_argument(
        "--size",
        type=parse_size,
        default=None,
        help="elements per worker (4 bytes each); K, M = 2^10, 2^20 (default 256K)",
    )
    sizes.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        metavar="LIST",
        help="several sizes, e.g. 64K,256K,1M: every algorithm at each, and completion.png",
    )
    ap.add_argument(
        "--codec",
        choices=algorithms.CODECS,
        default="int32",
        help="int32 (default): exact integer sums; fixedpoint, sketch: checked bit for bit "
        "against the codec run on the reference switch; plain and inceptionn (host "
        "collectives): within their error bound",
    )
    ap.add_argument("--repeat", type=arg.REPEATS, default=1, help="runs of every algorithm "
                    "at every size, each with its own seed (seed, seed + 1, ...): the median "
                    "and the spread (default 1)")  # fmt: skip
    ap.add_argument(
        "--seed", type=arg.SEED, default=1, help="inputs and loss: the first run's seed (1)"
    )
    ap.add_argument(
        "--density",
        type=arg.DENSITY,
        default=1.0,
        help="the inputs' share of non-zero elements, as a gradient's (1: dense; the sketch "
        "codec's cost follows it)",
    )
    link = ap.add_argument_group("links")
    link.add_argument(
        "--rate", type=_rate, default=DEFAULTS["rate"], help="every link (default 100G)"
    )
    link.add_argument(
        "--delay", type=_delay, default=DEFAULTS["delay"], help="one way (default 1us)"
    )
    link.add_argument(
        "--queue",
        type=_queue,
        default=DEFAULTS["queue"],
        help="every transmit queue, packets or bytes: 1000p, 1MB (default 1MB)",
    )
    link.add_argument(
        "--overhead",
        type=OVERHEAD,
        default=ETHERNET_OVERHEAD,
        metavar="BYTES",
        help=f"per frame beyond the Ethernet frame (default {ETHERNET_OVERHEAD}: preamble, "
        "FCS, gap; 0 as Mininet's shaping counts; ns-3's 2 bytes of point-to-point header "
        "stay)",
    )
    link.add_argument("--loss", type=arg.LOSS, default=0.0, help="per frame, on every link")
    link.add_argument(
        "--link-loss",
        type=_link_loss,
        action="append",
        default=[],
        metavar="A-B=P",
        help="per frame on the link between nodes A and B, both ways (repeatable)",
    )
    link.add_argument(
        "--node-ports",
        choices=NODE_PORTS,
        default=NODE_PORTS[0],
        help="torus and mesh nodes: all (default) = a node drives all its network links at "
        "once (its host link that many times a link's rate); 1 = one link's rate",
    )
    ina = ap.add_argument_group("in-network aggregation")
    ina.add_argument("--window", type=arg.WINDOW, default=256, help="the job's slots (256)")
    ina.add_argument(
        "--dataplane",
        choices=("fast", "reference"),
        default="fast",
        help="the switches' data plane: fast (compiled, the default) or reference (Python)",
    )
    ina.add_argument(
        "--switch-latency",
        type=_delay,
        default="0",
        metavar="TIME",
        help="a switch's pipeline latency, every frame (default 0: as ns-3's IPv4 routers "
        "that the host collectives cross)",
    )
    ina.add_argument(
        "--host-poll",
        type=_delay,
        default="0",
        metavar="TIME",
        help="a host takes the frames of this long at once (interrupt coalescing); 0 (the "
        "default): at every instant, exact",
    )
    tcp = ap.add_argument_group("host collectives (TCP)")
    tcp.add_argument(
        "--mtu",
        type=_mtu,
        default=1500,
        help="every link's, for TCP: 1500 (default), 9000 (jumbo frames), 308 (segments of "
        "256 B, MULTITREE's payload), or any between",
    )
    tcp.add_argument(
        "--tcp-min-rto",
        type=_delay,
        default=None,
        metavar="TIME",
        help="TCP's minimum retransmission timeout (default: 1 ms, or Linux's 200 ms when a "
        "link is slower than 1 Gbit/s)",
    )
    tcp.add_argument(
        "--ecmp",
        action="store_true",
        help="switches spread flows over every shortest next hop by a hash of their addresses "
        "and ports (default: the controller's one route per host)",
    )
    ap.add_argument(
        "--timeout",
        type=arg.SECONDS,
        default=1.0,
        help="simulated seconds an INA worker waits without progress before it gives up (1)",
    )
    ap.add_argument(
        "--sim-limit",
        type=arg.SECONDS,
        default=60.0,
        help="simulated seconds a host collective may last at most (60)",
    )
    ap.add_argument(
        "--limit",
        type=arg.SECONDS,
        default=3600.0,
        help="wall seconds one run may take (3600)",
    )
    ap.add_argument(
        "--progress",
        type=arg.INTERVAL,
        default=PROGRESS_EVERY,
        metavar="SECONDS",
        help=f"a progress line this often on long runs ({PROGRESS_EVERY:g}; 0: none)",
    )
    ap.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where summary.json and completion.png go (default "
        f"{Path(tempfile.gettempdir()) / RUNS_DIR}/<time>-<topology>-<algo>)",
    )
    ap.add_argument(
        "--no-memory-check",
        dest="memory_check",
        action="store_false",
        help="run even if the runs need more memory than this machine has available",
    )
    return ap


SIMULATED = tuple(algorithms.ALGORITHMS)  # the simulator runs every one (gloo: its ring)


def algo_names(text: str) -> list[str]:
    """`all` (every simulated algorithm) or a comma list, each once; ValueError naming what
    is unknown, repeated or not simulated."""
    if text.strip() == "all":
        return list(SIMULATED)
    names = [n.strip() for n in text.split(",")]
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"--algo {text}: name each algorithm once, e.g. ina,ring")
    for n in names:
        algorithms.algorithm(n)  # ValueError: unknown
        if n not in SIMULATED:
            raise ValueError(
                f"--algo {n}: not simulated (the simulator runs {', '.join(SIMULATED)})"
            )
    return names


def memory_mib(workers: int, sizes: Sequence[int]) -> float:
    """What the largest run needs, about (`BASE_MIB`, `BYTES_PER_ELEMENT`)."""
    return BASE_MIB + workers * max(sizes) * BYTES_PER_ELEMENT / 2**20


def default_run_dir(label: str, algo: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.,-]+", "-", f"{stamp}-{label}-{algo}").strip("-")
    return Path(tempfile.gettempdir()) / RUNS_DIR / safe


def _tasks(
    args: argparse.Namespace, topo: Topology, workers: tuple[str, ...], names: Sequence[str]
) -> list[dict[str, Any]]:
    from inaemu.sim.child import Task
    from inaemu.sim.ina import InaSettings

    link = LinkSpec(
        rate_bps=args.rate,
        delay_ps=args.delay,
        queue=args.queue,
        overhead_bytes=args.overhead,
        loss=args.loss,
        link_loss={(a, b): p for a, b, p in args.link_loss},
        node_ports=args.node_ports,
    )
    initial_rto, min_rto, max_rto = _ina_timers(args, topo)
    ina = InaSettings(
        window=args.window,
        dataplane=args.dataplane,
        switch_latency_ps=args.switch_latency,
        host_poll_ps=args.host_poll,
        initial_rto=initial_rto,
        min_rto=min_rto,
        max_rto=max_rto,
        give_up_after=args.timeout,
    )
    out = []
    for size in args.sizes:
        for name in names:
            for repeat in range(1, args.repeat + 1):
                task = Task(
                    algo=name,
                    size=size,
                    repeat=repeat,
                    seed=args.seed,
                    codec=args.codec,
                    topology=topo.to_json(),
                    workers=workers,
                    link=link,
                    ina=ina,
                    tcp={
                        "mtu": args.mtu,
                        "ecmp": args.ecmp,
                        "limit": args.sim_limit,
                        "min_rto_ps": args.tcp_min_rto,
                    },
                    limit=args.limit,
                    density=args.density,
                    progress=args.progress,
                )
                out.append(task.to_json())
    return out


def _ina_timers(args: argparse.Namespace, topo: Topology) -> tuple[float, float, float]:
    """The clients' timers for these links (initial, least and greatest timeout): the first a
    window's worth of frames and a round trip across the network (hops x delay) long, twice;
    the least four round trips; the greatest 64 times the first's window and round trip."""
    frame = (FRAME_BYTES + args.overhead) * 8 / args.rate
    hops = 2 * (2 + max(len(topo.switches) - 1, 0).bit_length())
    rtt = hops * (args.delay / 1e12 + frame)
    window = args.window * frame
    return max(2 * (window + rtt), 1e-6), max(4 * rtt, 1e-6), max(64 * (window + rtt), 1e-3)


def refused(
    topo: Topology, workers: tuple[str, ...], names: Sequence[str], args: argparse.Namespace
) -> dict[str, str]:
    """Why each of `names` cannot run here (topology, codec), by name; only those that not."""
    out = {}
    for name in names:
        why = algorithms.algorithm(name).refuse(topo, workers, args.codec, args.node_ports)
        if why:
            out[name] = why
    return out


def _refusals(topo: Topology, args: argparse.Namespace) -> list[str]:
    out = []
    for a, b, _ in args.link_loss:
        if not any({a, b} == {lk.a, lk.b} for lk in topo.links):
            out.append(f"--link-loss {a}-{b}: no link between {a} and {b} in the topology")
    return out


def row_of(task: dict[str, Any], result: dict[str, Any], workers: Sequence[str]) -> Row:
    """The table's row of one simulated run (`runs.compare.make_row`), its time simulated."""
    algo, size, codec = task["algo"], task["size"], task["codec"]
    if "error" in result:
        row = Row.skip(algo, size, codec, "")
        row.skipped, row.problems, row.verified = "", [result["error"]], False
        row.clock = "simulated"
        return row
    uses = [LinkUse(**u) for u in result["uses"]]
    seconds = result["seconds"] if result["seconds"] is not None else math.nan
    row = make_row(
        algo,
        size,
        codec,
        result["check"],
        seconds=seconds,
        uses=uses,
        bandwidths=result["bandwidths"],
        hosts=workers,
        verdict=Verdict(
            problems=list(result["verdict_problems"]),
            max_abs_error=result["max_abs_error"]
            if result["max_abs_error"] is not None
            else math.nan,
        ),
        problems=result["problems"],
        facts=result["facts"],
        repeat=task["repeat"],
        steps=result.get("steps"),
        packets=result["packets"],
        retransmissions=result["retransmissions"],
    )
    row.clock = "simulated"
    row.wall_seconds = result["wall_seconds"]
    row.accounting.update(
        events=result["events"],
        queue_drops=result["queue_drops"],
        lost=result["lost"],
        switch_drops=result["switch_drops"],
        seed=task["seed"] + task["repeat"] - 1,
    )
    row.emulator_bound = False
    load = row.floor_seconds / seconds if row.floor_seconds and seconds > 0 else 0.0
    if not math.isfinite(seconds):
        row.bound_by, row.bound_reason = "unknown", "no completion time"
    elif load >= 1 / LINK_SLACK:
        row.bound_by = "links"
        row.bound_reason = f"busiest link {row.busiest_link} {load:.0%} of its rate"
    else:
        row.bound_by = "protocol"
        row.bound_reason = (
            f"busiest link {row.busiest_link} {load:.0%} of its rate: the rest is waiting "
            "(steps, round trips, the window, loss recovery)"
        )
    return row


def _eng(seconds: float | None) -> str:
    """A time with the unit that reads best: 12.3 us, 4.56 ms, 7.89 s."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return (
                f"{seconds / scale:.3g} {unit}"
                if seconds / scale < 100
                else (f"{seconds / scale:.0f} {unit}")
            )
    return f"{seconds * 1e9:.3g} ns"


COLUMNS.update(
    {
        "sim time": lambda g, r, pt: _eng(pt.median if pt.seconds else r.seconds),
        "sim spread": lambda g, r, pt: (
            f"{_eng(pt.low)}-{_eng(pt.high)}" if len(pt.seconds) > 1 else "-"
        ),
        "sim floor": lambda g, r, pt: _eng(r.floor_seconds),
        "drops": lambda g, r, pt: _drops_cell(r),
        "events": lambda g, r, pt: f"{r.accounting.get('events', 0):,}",
        "wall s": lambda g, r, pt: "-" if r.wall_seconds is None else f"{r.wall_seconds:.1f}",
    }
)


def _drops_cell(r: Row) -> str:
    queued = sum(r.accounting.get("queue_drops", {}).values())
    lost = sum(r.accounting.get("lost", {}).values())
    return f"{queued:,}/{lost:,}" if queued or lost else "0"


def run(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    if args.sizes is None:
        args.sizes = [args.size if args.size is not None else 256 * 1024]
    missing = ns3_available()
    if missing:
        say(f"{PROG}: {missing}")
        return 2
    try:
        names = algo_names(args.algo)
        topo = (
            Topology.load(args.topology) if args.topology else load_or_build(args.topo or "star:4")
        )
    except (ValueError, TopologyError, OSError) as exc:
        say(f"{PROG}: {exc}")
        return 2
    workers = tuple(topo.hosts)
    skipped = refused(topo, workers, names, args)
    problems = _refusals(topo, args)
    if args.algo.strip() != "all":  # named ones must all run; all skips what cannot
        problems = [f"--algo {n}: {why}" for n, why in skipped.items()] + problems
    names = [n for n in names if n not in skipped]
    if not names and not problems:
        problems = ["no algorithm runs here: " + "; ".join(f"{n}: {w}" for n, w in skipped.items())]
    if problems:
        say(f"{PROG}: " + "; ".join(problems))
        return 2
    need, have = memory_mib(len(workers), args.sizes), mem_available_mib()
    if args.memory_check and have is not None and need > have:
        say(
            f"{PROG}: the largest run needs about {need:,.0f} MiB ({len(workers)} workers x "
            f"{max(args.sizes):,} elements); this machine has {have:,} MiB available: fewer "
            "workers or smaller sizes, or --no-memory-check"
        )
        return 2
    if arg.parse_only(PROG):
        return 0
    label = args.topo or (args.topology.stem if args.topology else "star:4")
    run_dir = args.run_dir or default_run_dir(label, args.algo)
    if args.tcp_min_rto is None:
        args.tcp_min_rto = min_rto_for(args.rate)
    tasks = _tasks(args, topo, workers, names)
    spec = LinkSpec(args.rate, args.delay, args.queue, args.overhead, args.loss)
    say(
        f"{PROG}: {label} ({len(workers)} workers, {len(topo.switches)} switches), "
        f"{spec.describe()}; node ports {args.node_ports}; {len(tasks)} run(s) of "
        f"{', '.join(names)} at {', '.join(size_label(s) for s in args.sizes)} elements, "
        f"codec {args.codec}, density {args.density:g}, seed {args.seed}; "
        f"INA window {args.window}, data plane "
        f"{args.dataplane}, switch latency {args.switch_latency / 1e6:g} us, host poll "
        f"{args.host_poll / 1e6:g} us; TCP MTU {args.mtu}"
        + (", ECMP" if args.ecmp else ", the controller's routes")
    )
    rows, failure = _run_child(tasks, workers, say)
    rows += [
        Row.skip(n, size, args.codec, why) for size in args.sizes for n, why in skipped.items()
    ]
    if rows:
        for line in render_table(rows, TABLE):
            say(line)
        say(
            "sim time: simulated, until the last worker's result; floor: the busiest link "
            "direction's bytes at its rate; load: floor / time; packets: frames into the "
            "switches (INA); drops: frames the queues dropped / the links lost; wall s: this "
            "machine's time for the run; bound: links (>= "
            f"{100 / LINK_SLACK:.0f} % of the busiest link's rate) or protocol"
        )
        _write(run_dir, args, rows, topo, label, say)
    if failure:
        say(f"{PROG}: {failure}")
        return 1
    failed = [r for r in rows if not r.verified and not r.skipped]
    for r in failed:
        say(f"FAILED {r.algo} {r.size:,} (run {r.repeat}): {'; '.join(r.problems)[:500]}")
    return 1 if failed else 0


def _run_child(
    tasks: list[dict[str, Any]], workers: tuple[str, ...], say: Callable[[str], None]
) -> tuple[list[Row], str]:
    """The tasks in a child process; the rows, and what went wrong with the child ("")."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "inaemu.sim.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps(tasks))
    proc.stdin.close()
    rows: list[Row] = []
    pending = list(tasks)
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if "loaded" in event:
                say(
                    f"ns-3 loaded in {event['loaded']:.1f} s, compiled kernels in "
                    f"{event['warmed_up']:.1f} s"
                )
            elif "progress" in event:
                say(f"  {event['progress']}")
            elif "result" in event:
                task = pending.pop(0)
                row = row_of(task, event["result"], workers)
                rows.append(row)
                say(
                    f"  {task['algo']} {size_label(task['size'])} run {task['repeat']}: "
                    f"{'verified' if row.verified else 'FAILED'}, simulated "
                    f"{_eng(row.seconds)}, wall {row.wall_seconds or 0:.1f} s"
                )
    except KeyboardInterrupt:
        proc.kill()
        raise
    finally:
        err = proc.stderr.read()
        proc.wait()
    if proc.returncode != 0 or pending:
        return rows, _child_failure(proc.returncode, err, pending)
    return rows, ""


def _child_failure(code: int, stderr: str, pending: list[dict[str, Any]]) -> str:
    """One line: which run the simulator process died in, and its last words."""
    lines = [
        ln.strip()
        for ln in stderr.splitlines()
        if ln.strip() and "Failed to materialize" not in ln and not ln.startswith("#")
    ]
    said = next((ln for ln in lines if "assert" in ln.lower() or "error" in ln.lower()), "")
    said = said or (lines[-1] if lines else "no message")
    where = f" in {pending[0]['algo']} at {pending[0]['size']:,}" if pending else ""
    return f"the simulator process ended (status {code}){where}: {said[:300]}"


def _write(
    run_dir: Path,
    args: argparse.Namespace,
    rows: list[Row],
    topo: Topology,
    label: str,
    say: Callable[[str], None],
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "command": "inaemu sim",
        "topology": label,
        "workers": len(topo.hosts),
        "switches": len(topo.switches),
        "links": {
            "rate_bps": args.rate,
            "delay_ps": args.delay,
            "queue": args.queue,
            "overhead_bytes": args.overhead,
            "loss": args.loss,
            "link_loss": args.link_loss,
            "node_ports": args.node_ports,
        },
        "tcp": {"mtu": args.mtu, "ecmp": args.ecmp, "min_rto_ps": args.tcp_min_rto},
        "ina": {
            "window": args.window,
            "dataplane": args.dataplane,
            "switch_latency_ps": args.switch_latency,
            "host_poll_ps": args.host_poll,
        },
        "codec": args.codec,
        "seed": args.seed,
        "density": args.density,
        "clock": "simulated",
        "rows": [r.to_json() for r in rows],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    wrote = "summary.json"
    if len(args.sizes) > 1:
        try:
            plot_completion(rows, run_dir / "completion.png", title=f"{label}, simulated (ns-3)")
            wrote += ", completion.png"
        except RuntimeError as exc:
            say(f"no plot: {exc}")
    say(f"run dir: {run_dir} ({wrote})")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (SimError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
