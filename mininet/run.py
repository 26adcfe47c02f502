"""`inaemu mininet` (also `python -m inaemu.mininet`): one allreduce scenario on a Mininet
network, programmed only through the controller's commands, every result checked.

    inaemu mininet --topo star:4 --switch softswitch --algo ina --size 16M --bw 20
    inaemu mininet --topo leaf-spine:2x2x2 --switch bmv2 --algo ina-1tree --loss 0.01 --pcap
    inaemu mininet -t topology.json --size 100000
    inaemu mininet --topo star:4 --algo all --sizes 256K,1M,4M --bw 50

It installs Mininet from Debian when it is missing (root), builds the network (hosts in
namespaces, switch nodes in the root namespace on 127.0.0.1 P4Runtime ports, links shaped to
`--bw` Mbit/s with Mininet's TCLink), runs `inaemu pipeline push`, `routes`, `loss` and the
algorithm's set-up (`job add` for ina), starts one worker per host with a fresh run id, waits
for all, reads `inaemu stats`, removes the network and then checks every result: all
workers' arrays equal to the sum of the inputs (int32: numpy's exact sum; other codecs: the
codec run against the reference switch, bit for bit). It prints the completion time, the
bytes each link carried and each switch's counters, and writes `summary.json`, `build/`,
`logs/` and (`--pcap`) `pcaps/` under the run directory: `--run-dir`, by default a new one
under the temp dir (`/tmp/inaemu-mininet/<time>-<topology>-<switch>-<algo>`), never inside
the current directory; it says where at the start and at the end. While the workers run it
prints a progress line every `--progress` seconds (10): which run, how many workers are done,
the time so far and the bytes the hosts have sent.

With several algorithms (`--algo all`, `--algo ina,ring,gloo`) or sizes (`--sizes`), each runs
in turn on the same network (`run_algorithms`), each result is checked as its algorithm
promises (`compare.check_results`: exact, or within the codec's error bound), and one table
compares them (`report_comparison`; with several sizes also completion.png).

Exit status: 0 verified; 1 a worker failed or a result is wrong; 2 bad arguments, or the
network could not be built or programmed; 130 interrupted (Ctrl-C, SIGTERM, SIGHUP). In every
case the network and the processes it started are gone when it exits. docs/mininet.md has
the details.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.collectives.routes import DIRECT_ROLES, NODE_PORTS
from inaemu.controller.topology import Topology, TopologyError, from_spec
from inaemu.hostlib import args as arg
from inaemu.hostlib.wire import FRAME_BYTES, K
from inaemu.hostlib.worker import expected_sum, worker_input
from inaemu.mininet import debian
from inaemu.mininet.accounting import (
    BW_MARGIN,
    DROPS_REPORTED_WITHIN,
    RULE,
    BwChoice,
    Capacity,
    CpuMeter,
    Usage,
    capacity,
    choose_bw,
    drops_delta,
    exited,
    link_queue_drops,
    read_port_drops,
    wait_exited,
)
from inaemu.mininet.algos import (
    ALGORITHMS,
    CODECS,
    Algorithm,
    Ina,
    RunSpec,
    algorithm,
    describe,
)
from inaemu.mininet.compare import (
    REPEATS,
    Row,
    Verdict,
    bound_notes,
    check_results,
    groups,
    make_row,
    plot_completion,
    points,
)
from inaemu.mininet.compare import parse_size as parse_size  # the runner's sizes, re-exported
from inaemu.mininet.compare import parse_sizes as parse_sizes
from inaemu.mininet.compare import render_table as render_comparison
from inaemu.mininet.scenario import (
    MAX_BW,
    CleanupError,
    LinkUse,
    NetOptions,
    RunDir,
    Scenario,
    ScenarioError,
    link_delta,
    link_params,
    link_shaping,
)
from inaemu.softswitch.fast.dataplanes import DATAPLANES, DEFAULT_DATAPLANE

PROBE_SIZE = 256 << 10  # --bw auto: elements per worker of the unshaped runs (at most)
PROGRESS_EVERY = 10.0  # seconds between progress lines while the workers run (--progress)
RUNS_DIR = "inaemu-mininet"  # the default run dirs' folder, in the temp dir


class Interrupted(Exception):
    """SIGTERM or SIGHUP: handled like Ctrl-C."""


def algo_names(text: str) -> list[str]:
    """`all` (every registered algorithm) or a comma list of names, each once; ValueError
    naming what is unknown or repeated."""
    if text.strip() == "all":
        return list(ALGORITHMS)
    names = [n.strip() for n in text.split(",")]
    for n in names:
        algorithm(n)  # ValueError: unknown
    if len(set(names)) != len(names) or "" in names:
        raise ValueError(f"--algo {text}: name each algorithm once, e.g. ina,ring,gloo")
    return names


AUTO = "auto"  # --bw auto: chosen from an unshaped run of every algorithm (`probe_bw`)


def _bw(text: str) -> float | str:
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        bw = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad bandwidth {text!r}: Mbit/s, e.g. 20, or auto"
        ) from None
    if not 0 < bw <= MAX_BW:
        raise argparse.ArgumentTypeError(f"--bw {text}: Mininet shapes 0 < bw <= {MAX_BW:.0f}")
    return bw


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0.0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"--progress {text}: seconds, e.g. 10 (0: none)")
    return seconds


def _probability(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"--loss {text}: a probability in 0..1, e.g. 0.01")
    return p


def build_parser() -> argparse.ArgumentParser:
    ap = arg.ArgumentParser(
        prog="inaemu mininet",
        description="One allreduce scenario on a Mininet network (root; docs/mininet.md).",
    )
    where = ap.add_mutually_exclusive_group()
    where.add_argument(
        "--topo",
        default=None,
        help="a built-in topology: star:4, leaf-spine:2x2x2 (leaves x spines x hosts per "
        "leaf), fat-tree:4, ... (default star:4)",
    )
    where.add_argument("-t", "--topology", type=Path, help="a topology.json instead of --topo")
    ap.add_argument("--switch", choices=("softswitch", "bmv2"), default="softswitch")
    ap.add_argument(
        "--algo",
        default="ina",
        metavar="NAMES",
        help="the allreduce algorithm, a comma list of them (ina,ring,gloo) or all, each run "
        f"on the same network and compared in one table: {describe()}",
    )
    sizes = ap.add_mutually_exclusive_group()
    sizes.add_argument(
        "--size",
        type=parse_size,
        default=None,
        help="elements per worker (4 bytes each); K, M = 2^10, 2^20; at most 256M (default 256K)",
    )
    sizes.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        metavar="LIST",
        help="several sizes, e.g. 256K,1M,4M: every algorithm at each, and completion.png "
        "(completion time against size) in the run dir",
    )
    ap.add_argument(
        "--codec",
        choices=CODECS,
        default="int32",
        help="int32 (default): exact integer sums; fixedpoint, sketch: checked bit for bit "
        "against the codec run on the reference switch; plain (float32 summed by the hosts) "
        "and inceptionn (host collectives): within their error bound",
    )
    ap.add_argument(
        "--bw",
        type=_bw,
        default=None,
        help="Mbit/s on every link without a bw option of its own (Mininet TCLink; default: "
        f"unshaped); auto: {100 * BW_MARGIN:.0f}%% of what the emulator carries here, "
        "measured first by an unshaped run of every algorithm (docs/mininet.md)",
    )
    ap.add_argument(
        "--repeat",
        type=REPEATS,
        default=1,
        help="runs of every algorithm at every size: the table and the plot show the median "
        "and the spread (default 1)",
    )
    ap.add_argument(
        "--node-ports",
        choices=NODE_PORTS,
        default=NODE_PORTS[0],
        help="torus and mesh nodes: all (default) = a node drives all its network links at "
        "once: its host link is shaped to --bw times its network ports and the host "
        "collectives' schedules are built for that (MULTITREE's setting); 1 = one interface, "
        "its host link shaped to --bw like every other link",
    )
    ap.add_argument(
        "--loss",
        type=_probability,
        default=0.0,
        help="loss probability injected at every port of every switch (`inaemu loss`)",
    )
    ap.add_argument("--window", type=arg.WINDOW, default=64, help="the job's slots per switch (64)")
    ap.add_argument(
        "--seed", type=arg.SEED, default=1, help="inputs: worker_input(seed, rank, ...)"
    )
    ap.add_argument(
        "--timeout",
        type=arg.SECONDS,
        default=30.0,
        help="a worker gives up after this many seconds without progress (default 30)",
    )
    ap.add_argument(
        "--limit",
        type=arg.SECONDS,
        default=1800.0,
        help="seconds the workers of one algorithm at one size may take in all (1800)",
    )
    ap.add_argument(
        "--pcap",
        action="store_true",
        help="capture every switch port into pcaps/ (tcpdump; bmv2's own --pcap)",
    )
    ap.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where build/, logs/, pcaps/ and summary.json go (default "
        f"{Path(tempfile.gettempdir()) / RUNS_DIR}/<time>-<topology>-<switch>-<algo>)",
    )
    ap.add_argument(
        "--progress",
        type=_seconds,
        default=PROGRESS_EVERY,
        metavar="SECONDS",
        help=f"a progress line this often while the workers run ({PROGRESS_EVERY:g}; 0: none)",
    )
    ap.add_argument(
        "--keep-results",
        action="store_true",
        help="keep the workers' result arrays (build/results/*.npy) after a verified run",
    )
    ap.add_argument(
        "--dataplane",
        default=DEFAULT_DATAPLANE,
        choices=DATAPLANES,
        help="the softswitch's data plane: fast (compiled, the default) or reference (Python)",
    )
    ap.add_argument(
        "--bmv2-log-level",
        default="warn",
        choices=("trace", "debug", "info", "warn", "error", "off"),
        help="simple_switch_grpc --log-level (default warn; trace logs every packet)",
    )
    ap.add_argument(
        "--no-install", action="store_true", help="do not apt-get install what is missing"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="Mininet's progress messages")
    return ap


# ---------------------------------------------------------------------- results


@dataclass
class WorkerOutcome:
    host: str
    rank: int
    returncode: int | None  # None: killed at the time limit
    report: dict[str, Any] = field(default_factory=dict)  # its last JSON line
    error: str = ""  # the end of its stderr when it failed


def natural(name: str) -> tuple[Any, ...]:
    """h2 before h10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def expected_result(codec: str, seed: int, n: int, size: int) -> npt.NDArray[Any]:
    """What every worker must get: numpy's exact sum of the inputs (int32), else the codec run
    against the reference switch (`hostlib.worker.expected_sum`, which the worker's --check
    uses too)."""
    return expected_sum(seed, n, size, codec=codec)


def load_results(
    outcomes: list[WorkerOutcome], results: Path
) -> tuple[dict[str, npt.NDArray[Any] | None], list[str]]:
    """Each worker's result array (None: it failed or wrote none) and what went wrong."""
    arrays: dict[str, npt.NDArray[Any] | None] = {}
    problems = []
    for o in outcomes:
        arrays[o.host] = None
        if o.returncode != 0:
            why = "killed at the time limit" if o.returncode is None else f"exit {o.returncode}"
            problems.append(f"{o.host} (rank {o.rank}): {why}: {o.error}".rstrip(": "))
            continue
        try:
            arrays[o.host] = np.load(results / f"{o.host}.npy")
        except (OSError, ValueError) as exc:
            problems.append(f"{o.host}: no result ({exc})")
    return arrays, problems


@dataclass
class Truth:
    """What the results of one size are checked against (`compare.check_results`)."""

    size: int
    sum64: npt.NDArray[np.float64]  # the float64 sum of the inputs
    abs_sum: npt.NDArray[np.float64]  # the sum of their absolute values
    exact: npt.NDArray[Any] | None  # `expected_result`, if an algorithm checks "exact"


def truth(codec: str, seed: int, n: int, size: int, *, exact: bool) -> Truth:
    sum64 = np.zeros(size, np.float64)
    abs_sum = np.zeros(size, np.float64)
    for rank in range(n):
        x = worker_input(seed, rank, size, codec=codec).astype(np.float64)
        sum64 += x
        abs_sum += np.abs(x)
    return Truth(size, sum64, abs_sum, expected_result(codec, seed, n, size) if exact else None)


def completion(outcomes: list[WorkerOutcome]) -> tuple[float, str]:
    """The allreduce's completion time and how it was measured."""
    reports = [o.report for o in outcomes if o.report]
    if not reports or len(reports) != len(outcomes):
        return float("nan"), "unknown"
    if all("start" in r and "end" in r for r in reports):
        last_start = max(float(r["start"]) for r in reports)
        return max(float(r["end"]) for r in reports) - last_start, "from the last worker's start"
    return max(float(r["seconds"]) for r in reports), "the slowest worker's allreduce"


# ---------------------------------------------------------------------- the run


Progress = Callable[[str], None]


def host_bytes_sent(uses: list[LinkUse]) -> int:
    """Bytes the hosts sent into their links (a host link's a end is the host)."""
    return sum(u.a_to_b for u in uses if ":" not in u.a)


def run_workers(
    sc: Scenario,
    algo: Any,
    spec: RunSpec,
    limit: float,
    tag: str = "",
    *,
    progress: Progress | None = None,
    every: float = PROGRESS_EVERY,
    meter: CpuMeter | None = None,
) -> tuple[list[WorkerOutcome], Path]:
    """Every worker at once, each on its host; wait for all (at most `limit` seconds). Logs in
    logs/, results in build/results/, or in a folder `tag` of each. With `progress`, a line
    to it every `every` seconds while they run: how many are done, the time so far, the
    bytes the hosts have sent. With `meter`, every worker's CPU is measured, the last time
    when it has exited and before it is reaped."""
    results = sc.run.build / "results" / tag
    logs = sc.run.logs / tag
    results.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    with (logs / "workers.txt").open("w") as cmds:
        for rank, host in enumerate(spec.workers):
            out = results / f"{host}.npy"
            out.unlink(missing_ok=True)
            argv = algo.worker_argv(sc, spec, rank, host, out)
            cmds.write(f"{host}: {subprocess.list2cmdline(argv)}\n")
            procs.append(
                sc.popen(host, argv, stdout=logs / f"{host}.json", stderr=logs / f"{host}.log")
            )
            if meter is not None:
                meter.track(procs[-1].pid, host, "worker")
    started = time.monotonic()
    deadline = started + limit
    report = _ProgressReport(sc, algo, spec, limit, started, progress, every)
    outcomes = []
    for rank, (host, proc) in enumerate(zip(spec.workers, procs, strict=True)):
        rc: int | None = None
        while rc is None and time.monotonic() < deadline:
            if wait_exited(proc, max(0.0, min(deadline, report.due) - time.monotonic())):
                if meter is not None:
                    meter.finished(proc.pid)  # a zombie still shows its CPU time
                rc = proc.wait()
            else:
                report.maybe(procs)
        outcome = WorkerOutcome(host, rank, rc)
        stdout = (logs / f"{host}.json").read_text(errors="replace")
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        if lines:
            try:
                outcome.report = json.loads(lines[-1])
            except ValueError:
                pass
        if rc != 0:
            tail = (logs / f"{host}.log").read_text(errors="replace").strip().splitlines()
            outcome.error = " | ".join(tail[-3:])
        outcomes.append(outcome)
    return outcomes, results


class _ProgressReport:
    """The progress lines of one run's workers (`run_workers`)."""

    def __init__(
        self,
        sc: Scenario,
        algo: Any,
        spec: RunSpec,
        limit: float,
        started: float,
        out: Progress | None,
        every: float,
    ) -> None:
        self.sc, self.limit, self.started, self.out, self.every = sc, limit, started, out, every
        self.what = f"{algo.name} x {spec.size:,}"
        on = out is not None and every > 0
        self.due = started + every if on else float("inf")
        self.sent0 = host_bytes_sent(sc.link_counters()) if on else 0

    def maybe(self, procs: list[subprocess.Popen[bytes]]) -> None:
        """Print a line if one is due."""
        now = time.monotonic()
        if self.out is None or now < self.due:
            return
        self.due += self.every * (1 + int((now - self.due) // self.every))
        done = sum(exited(p) for p in procs)  # not reaped: the meter reads them once more
        sent = host_bytes_sent(self.sc.link_counters()) - self.sent0
        elapsed = now - self.started
        self.out(
            f"  running {self.what}: {done}/{len(procs)} workers done after {elapsed:.0f} s "
            f"(limit {self.limit:.0f} s); the hosts sent {_fmt_bytes(sent)} so far, "
            f"{8 * sent / elapsed / 1e6:,.1f} Mbit/s"
        )


@dataclass
class AlgoRun:
    """One algorithm at one size on the network: what the runner measured."""

    algo: Algorithm
    spec: RunSpec
    facts: dict[str, str]
    outcomes: list[WorkerOutcome]
    results: Path  # the folder of the workers' .npy results
    links: list[LinkUse]  # bytes each link carried while the workers ran
    stats: str  # `inaemu stats` after it
    wall: float  # seconds from starting the workers to the last one's exit
    crashed: list[str]  # switches that died, a failed stats read or clean-up
    usage: Usage | None = None  # CPU of the switches, workers and machine over the completion
    drops: dict[str, dict[str, int]] | None = None  # per softswitch, its port drops in the run
    queue_drops: dict[str, int] | None = None  # per switch, its interfaces' queues' drops in it
    repeat: int = 1  # which run of this algorithm and size


def run_algorithm(
    sc: Scenario,
    algo: Algorithm,
    spec: RunSpec,
    limit: float,
    tag: str = "",
    *,
    facts: dict[str, str] | None = None,
    progress: Progress | None = None,
    every: float = PROGRESS_EVERY,
) -> AlgoRun:
    """`algo` on the scenario's programmed network: its set-up (unless done: `facts` is what
    it said), every worker (with `progress`: lines while they run), the link counters, switch
    statistics and port drops around them, the CPU of every switch and worker process and of
    the machine over the completion window (`accounting`), then its clean-up."""
    if facts is None:
        facts = algo.prepare(sc, spec)
    drops0, queues0 = switch_drops(sc), sc.queue_drops()
    before = sc.link_counters()
    started, started_at = time.monotonic(), time.time()
    with CpuMeter() as meter:
        for sw in sc.net.switches:
            if sw.proc is not None:
                meter.track(sw.proc.pid, sw.name, sc.options.switch)
            for helper in sw.helpers:
                meter.track(helper.pid, f"tcpdump {sw.name}", "capture")
        outcomes, results = run_workers(
            sc, algo, spec, limit, tag, progress=progress, every=every, meter=meter
        )
    wall = time.monotonic() - started
    ended_at = time.time()
    links = link_delta(before, sc.link_counters())
    t0, t1 = completion_window(outcomes) or (started_at, ended_at)
    usage = meter.usage(t0, t1)
    died = [sw for sw in sc.net.switches if sw.proc is None or sw.proc.poll() is not None]
    crashed = [f"switch {sw.name} exited during the run: {sw.log_tail()}" for sw in died]
    try:
        stats = sc.inaemu("stats", *sc.topo_args())
    except ScenarioError as exc:  # e.g. a switch died: the workers' outcome still counts
        stats = str(exc)
        crashed.append(stats)
    if not died:
        try:
            algo.finish(sc, spec)
        except ScenarioError as exc:
            crashed.append(f"{algo.name}'s clean-up: {exc}")
    drops = None
    if drops0 is not None:
        time.sleep(max(0.0, DROPS_REPORTED_WITHIN - (time.time() - ended_at)))
        drops = drops_delta(drops0, switch_drops(sc) or {})
    qdisc = {sw: n - queues0.get(sw, 0) for sw, n in sc.queue_drops().items()}
    queues = link_queue_drops(drops, qdisc, sc.shaped_switches())
    return AlgoRun(
        algo, spec, facts, outcomes, results, links, stats, wall, crashed, usage, drops, queues
    )


def switch_drops(sc: Scenario) -> dict[str, dict[str, int]] | None:
    """Each softswitch's port drops so far, from its log (`accounting.port_drops`); None on
    bmv2 (not measured)."""
    if sc.options.switch != "softswitch":
        return None
    return {sw.name: read_port_drops(sw.log_path) for sw in sc.net.switches}


def completion_window(outcomes: list[WorkerOutcome]) -> tuple[float, float] | None:
    """The wall-clock window `completion` measures (from the last worker's start to the last
    end), or None if the reports do not say."""
    reports = [o.report for o in outcomes if o.report]
    if not reports or len(reports) != len(outcomes):
        return None
    if not all("start" in r and "end" in r for r in reports):
        return None
    return max(float(r["start"]) for r in reports), max(float(r["end"]) for r in reports)


def run_algorithms(
    sc: Scenario,
    plan: list[tuple[Algorithm, RunSpec]],
    limit: float,
    say: Any = print,
    every: float = PROGRESS_EVERY,
) -> list[AlgoRun]:
    """The comparison's core: each (algorithm, spec) of `plan` in turn on one programmed
    network (`Scenario.program()` done), each in a logs/ and build/results/ folder of its
    own (`<algo>-<size>`, and `-2`, `-3`, ... for the repeated runs of an algorithm and
    size), with progress lines every `every` seconds. `row_of` turns a run into a row."""
    runs = []
    seen: dict[tuple[str, int], int] = {}
    for algo, spec in plan:
        repeat = seen[algo.name, spec.size] = seen.get((algo.name, spec.size), 0) + 1
        run = run_algorithm(
            sc,
            algo,
            spec,
            limit,
            tag=f"{algo.name}-{spec.size}" + (f"-{repeat}" if repeat > 1 else ""),
            progress=lambda line: say(line, flush=True),
            every=every,
        )
        run.repeat = repeat
        ok = sum(o.returncode == 0 for o in run.outcomes)
        again = f" (run {repeat})" if repeat > 1 else ""
        say(
            f"  {algo.name} x {spec.size:,}{again}: {ok}/{len(run.outcomes)} workers done in "
            f"{run.wall:.1f} s",
            flush=True,
        )
        runs.append(run)
    return runs


def row_of(run: AlgoRun, t: Truth, bandwidths: list[float | None]) -> tuple[Row, Verdict, str]:
    """A run's row (its results checked against `t`), the verdict, how completion was
    measured."""
    arrays, problems = load_results(run.outcomes, run.results)
    codec, n = run.spec.codec, len(run.spec.workers)
    check = run.algo.check(codec)
    bound = run.algo.error_bound(codec, n, t.abs_sum) if check == "bound" else None
    verdict = check_results(arrays, check=check, exact=t.exact, sum64=t.sum64, bound=bound)
    seconds, how = completion(run.outcomes)
    row = make_row(
        run.algo.name,
        run.spec.size,
        codec,
        check,
        seconds=seconds,
        uses=run.links,
        bandwidths=bandwidths,
        hosts=run.spec.workers,
        verdict=verdict,
        problems=run.crashed + problems,
        facts=run.facts,
        usage=run.usage,
        drops=run.drops,
        queue_drops=run.queue_drops,
        repeat=run.repeat,
    )
    return row, verdict, how


def tcpdump_missed(log: str) -> int | None:
    """Frames tcpdump saw pass its filter but did not write, or that the kernel dropped
    before it read them (from the counts it prints when it stops); None if it printed none."""
    counts = {
        what: int(n)
        for n, what in re.findall(
            r"^(\d+) packets? (captured|received by filter|dropped by kernel)", log, re.MULTILINE
        )
    }
    if len(counts) < 3:
        return None
    received, captured = counts["received by filter"], counts["captured"]
    return max(received - captured, counts["dropped by kernel"])


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"


def render_links(uses: list[LinkUse]) -> list[str]:
    width = max((len(f"{u.a} -> {u.b}") for u in uses), default=10)
    lines = [f"  {'link (a -> b)':<{width}}  {'a -> b':>14}  {'b -> a':>14}  shaping"]
    for u in uses:
        lines.append(
            f"  {f'{u.a} -> {u.b}':<{width}}  {u.a_to_b:>12,} B  {u.b_to_a:>12,} B  "
            f"{u.shaping or '-'}"
        )
    return lines


def _removed(exc: BaseException) -> str:
    """What the cleanup did, for the message of a run that `exc` ended."""
    notes = getattr(exc, "__notes__", [])
    return "; ".join(notes) if notes else "network removed"


_STOPPED: list[str] = []  # the stop signals received: a run that failed after one was stopped


def _stop_on(signum: int, frame: FrameType | None) -> None:
    """SIGINT, SIGTERM, SIGHUP: unwind (Scenario removes the network on the way). Noted too,
    since a controller command that it interrupts reports it as its own failure."""
    name = signal.Signals(signum).name
    _STOPPED.append(name)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(name)


def default_run_dir(label: str, switch: str, algo: str) -> Path:
    """A new run dir under the temp dir: never inside the current directory (a checkout)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.,-]+", "-", f"{stamp}-{label}-{switch}-{algo}").strip("-")
    return Path(tempfile.gettempdir()) / RUNS_DIR / safe


def bmv2_program(run: RunDir) -> Path:
    """ina.p4 compiled for bmv2 (cached by p4/'s source hash), copied into the run's build/."""
    from inaemu.conformance.bmv2_target import bmv2_available, compile_p4

    missing = bmv2_available()
    if missing is None and shutil.which("simple_switch_grpc") is None:
        missing = "not on PATH: simple_switch_grpc"
    if missing is not None:
        raise ScenarioError(f"--switch bmv2: {missing} (install p4c and bmv2, e.g. in /opt/p4/bin)")
    try:
        built = compile_p4()
    except subprocess.CalledProcessError as exc:
        raise ScenarioError(f"p4c-bm2-ss failed: {exc.stderr}") from None
    program = run.build / "ina.json"
    shutil.copyfile(built, program)
    return program


def main(argv: list[str] | None = None) -> int:
    try:
        return run_scenario(build_parser().parse_args(argv))
    except KeyboardInterrupt:  # before the network exists, or after it is gone
        print("inaemu mininet: interrupted", file=sys.stderr)
        return 130


def choose(
    text: str, topo: Topology, workers: tuple[str, ...], codec: str, node_ports: str = "all"
) -> tuple[list[Algorithm], dict[str, str]]:
    """The algorithms of `--algo` that run here (under the node model `node_ports`), and why
    the others do not. `all` skips what cannot run (topology, codec); named algorithms must
    all run: ValueError with the reasons."""
    chosen, skipped = [], {}
    for name in algo_names(text):
        algo = algorithm(name, node_ports)
        why = algo.refuse(topo, workers, codec)
        if why is None:
            chosen.append(algo)
        else:
            skipped[name] = why
    if text.strip() != "all" and skipped:
        raise ValueError("; ".join(f"--algo {n}: {why}" for n, why in skipped.items()))
    if not chosen:
        raise ValueError(
            "no algorithm runs here: " + "; ".join(f"{n}: {w}" for n, w in skipped.items())
        )
    return chosen, skipped


def links_text(bw: float | str | None, node_ports: str, direct: bool, *, auto: bool = False) -> str:
    """How the links are shaped, for the first line and the plot's title."""
    text = ""
    if bw == AUTO:
        text = ", links auto (measured first)"
    elif bw:
        text = f", links {bw:g} Mbit/s" + (" (auto)" if auto else "")
    if direct:
        text += f", node ports {node_ports}"
        if bw and node_ports == "all":
            text += " (a node's host link: --bw x its network ports)"
    return text


def bw_scales(topo: Topology, node_ports: str) -> list[float | None]:
    """Each link's rate in units of `--bw` (`link_shaping`: a torus or mesh node's host link
    under node model `all` is its network ports' together), None for a link with a bw option
    of its own (`--bw` does not set it)."""
    unit = link_shaping(topo, 1.0, node_ports)
    own = [link_params(lk, None, i).get("bw") for i, lk in enumerate(topo.links)]
    return [None if o is not None else p.get("bw") for o, p in zip(own, unit, strict=True)]


def probe_bw(
    topo: Topology,
    run: RunDir,
    options: NetOptions,
    program: Path | None,
    plan: list[tuple[Algorithm, RunSpec]],
    scales: list[float | None],
    args: argparse.Namespace,
    say: Any,
) -> tuple[BwChoice, list[Capacity]]:
    """`--bw auto`: every algorithm of `plan` once on the same network unshaped (its own
    network, logs under probe/), each run's capacity (`accounting.capacity`: the rate its
    busiest link reached, in units of --bw) and the rate chosen from them
    (`accounting.choose_bw`). ScenarioError if no run finished."""
    probe = RunDir.make(run.root / "probe")
    unshaped = dataclasses.replace(options, bw=None, pcap=False)
    with Scenario(topo, probe, unshaped, program=program) as sc:
        sc.program()
        runs = run_algorithms(sc, plan, args.limit, say, args.progress)
    caps = []
    for r in runs:
        if r.crashed or any(o.returncode != 0 for o in r.outcomes):
            say(f"--bw auto: {r.algo.name}'s unshaped run failed (logs in {probe.logs})")
            continue
        seconds, _ = completion(r.outcomes)
        ways = []
        for u, k in zip(r.links, scales, strict=True):
            ways += [(f"{u.a} -> {u.b}", u.a_to_b, k), (f"{u.b} -> {u.a}", u.b_to_a, k)]
        c = capacity(r.algo.name, r.spec.size, seconds, ways)
        if c is not None:
            caps.append(c)
    most = MAX_BW / max((k for k in scales if k), default=1.0)
    try:
        return choose_bw(caps, most=most), caps
    except ValueError as exc:
        raise ScenarioError(f"--bw auto: {exc}") from None


def run_scenario(args: argparse.Namespace) -> int:
    say = print
    sizes: list[int] = args.sizes or [args.size or parse_size("256K")]
    try:
        if args.topology is not None:
            topo = Topology.load(args.topology)
            label = args.topology.stem
        else:
            label = args.topo or "star:4"
            topo = from_spec(label)
        workers = tuple(
            sorted((h for h, x in topo.hosts.items() if x.role == "worker"), key=natural)
        )
        if len(workers) < 1:
            raise ValueError("the topology has no hosts with role worker")
        algos, skipped = choose(args.algo, topo, workers, args.codec, args.node_ports)
        if len(workers) * max(sizes) > arg.MAX_ELEMENTS:
            raise ValueError(
                f"{len(workers)} workers x {max(sizes):,} elements is more than "
                f"{arg.MAX_ELEMENTS:,} (1 GiB of float32): the results are checked on this machine"
            )
        auto = args.bw == AUTO
        scales = bw_scales(topo, args.node_ports)
        bw: float | None = None if auto else args.bw
        bandwidths = [p.get("bw") for p in link_shaping(topo, bw, args.node_ports)]
        debian.ensure(install=not args.no_install)
        if args.pcap and args.switch == "softswitch" and shutil.which("tcpdump") is None:
            if args.no_install:
                raise debian.MininetUnavailable("--pcap needs tcpdump: apt-get install tcpdump")
            debian.apt_install(("tcpdump",))
        exact = any(a.check(args.codec) == "exact" for a in algos)
        truths = {n: truth(args.codec, args.seed, len(workers), n, exact=exact) for n in sizes}
        run = RunDir.make(
            args.run_dir or default_run_dir(label, args.switch, args.algo), pcap=args.pcap
        )
        program = bmv2_program(run) if args.switch == "bmv2" else None
    except (TopologyError, ValueError, debian.MininetUnavailable, ScenarioError) as exc:
        print(f"inaemu mininet: {exc}", file=sys.stderr)
        return 2

    def spec_for(size: int) -> RunSpec:
        return RunSpec(
            workers=workers,
            size=size,
            codec=args.codec,
            seed=args.seed,
            run_id=secrets.randbelow(0xFFFF) + 1,
            window=args.window,
            timeout=args.timeout,
        )

    plan = [(algo, spec_for(n)) for n in sizes for _ in range(args.repeat) for algo in algos]
    single = len(plan) == 1
    options = NetOptions(
        switch=args.switch,
        bw=bw,
        node_ports=args.node_ports,
        pcap=args.pcap,
        bmv2_log_level=args.bmv2_log_level,
        dataplane=args.dataplane,
        verbose=args.verbose,
    )
    summary: dict[str, Any] = {
        "topology": label,
        "switch": args.switch,
        "algo": args.algo,
        "algos": [a.name for a in algos],
        "skipped": skipped,
        "workers": list(workers),
        "size": sizes[0],
        "sizes": sizes,
        "codec": args.codec,
        "bw_mbit": bw,
        "bw_auto": None,
        "node_ports": args.node_ports,
        "loss": args.loss,
        "repeat": args.repeat,
        "run_id": plan[0][1].run_id,
        "run_dir": str(run.root),
        "accounting_rule": RULE,
    }
    direct = any(sw.role in DIRECT_ROLES for sw in topo.switches.values())
    shaped = links_text(args.bw, args.node_ports, direct)
    if single:
        what = f"algo {algos[0].name}, {len(workers)} workers x {sizes[0]:,} {args.codec} "
        what += f"elements ({_fmt_bytes(4 * sizes[0])}){shaped}; run {plan[0][1].run_id}"
    else:
        what = f"algorithms {', '.join(a.name for a in algos)}; {len(workers)} workers x "
        what += " / ".join(f"{n:,}" for n in sizes) + f" {args.codec} elements{shaped}"
        if args.repeat > 1:
            what += f"; {args.repeat} runs of each"
    say(
        f"inaemu mininet: {label} ({len(topo.switches)} switches, {len(topo.hosts)} hosts) on "
        f"{args.switch}, {what}",
        flush=True,
    )
    for name, why in skipped.items():
        say(f"skipped {name}: {why}", flush=True)
    say(f"run dir: {run.root}", flush=True)
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    # a signal ignored from the start (e.g. SIGINT of `cmd &` in a script) stays ignored
    old = {s: signal.signal(s, _stop_on) for s in stops if signal.getsignal(s) != signal.SIG_IGN}
    try:
        if auto:
            probe = min(max(sizes), PROBE_SIZE)
            say(
                f"--bw auto: first every algorithm once at {probe:,} elements on unshaped "
                "links, to measure what the emulator carries here",
                flush=True,
            )
            probe_plan = [(a, spec_for(probe)) for a in algos]
            choice, caps = probe_bw(topo, run, options, program, probe_plan, scales, args, say)
            bw = choice.bw
            options = dataclasses.replace(options, bw=bw)
            bandwidths = [p.get("bw") for p in link_shaping(topo, bw, args.node_ports)]
            shaped = links_text(bw, args.node_ports, direct, auto=True)
            summary.update(
                bw_mbit=bw,
                bw_auto={
                    "chosen_mbit": bw,
                    "margin": choice.margin,
                    "probe_size": probe,
                    "capacities": [asdict(c) for c in caps],
                    "slowest": choice.slowest.algo,
                    "reason": choice.reason,
                },
            )
            say(f"--bw auto: {choice.reason}", flush=True)
        with Scenario(topo, run, options, program=program) as sc:
            switches = ", ".join(f"{n} {sc.net[n].grpc}" for n in topo.switches)
            say(f"network up in {sc.timings['network']:.1f} s: {switches}", flush=True)
            sc.program()
            if args.loss:
                sc.set_loss(args.loss)
            if single:
                algo, spec = plan[0]
                facts = algo.prepare(sc, spec)
                say(
                    f"programmed in {sc.timings['program']:.1f} s; "
                    + "; ".join(f"{k}: {v}" for k, v in facts.items()),
                    flush=True,
                )
                runs = [
                    run_algorithm(
                        sc,
                        algo,
                        spec,
                        args.limit,
                        facts=facts,
                        progress=lambda line: say(line, flush=True),
                        every=args.progress,
                    )
                ]
                ok = sum(o.returncode == 0 for o in runs[0].outcomes)
                say(
                    f"{ok}/{len(runs[0].outcomes)} workers done in {runs[0].wall:.1f} s; "
                    "removing the network",
                    flush=True,
                )
            else:
                say(f"programmed in {sc.timings['program']:.1f} s", flush=True)
                runs = run_algorithms(sc, plan, args.limit, say, args.progress)
        say("network removed", flush=True)
    except CleanupError as exc:
        print(f"inaemu mininet: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | Interrupted) or _STOPPED:
            why = _STOPPED[0] if _STOPPED else "SIGINT"
            print(f"inaemu mininet: interrupted ({why}); {_removed(exc)}", file=sys.stderr)
            return 130
        if isinstance(exc, ScenarioError | TopologyError | debian.MininetUnavailable | OSError):
            print(f"inaemu mininet: {exc}", file=sys.stderr)
        elif isinstance(exc, Exception):  # Mininet's own failures are plain Exceptions
            traceback.print_exc()
        else:
            raise
        print(f"inaemu mininet: logs in {run.logs}; {_removed(exc)}", file=sys.stderr)
        return 2
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)

    capture_missed = {
        log.name.removeprefix("tcpdump-").removesuffix(".log"): missed
        for log in sorted(run.logs.glob("tcpdump-*.log"))
        if (missed := tcpdump_missed(log.read_text())) is not None
    }
    rows, details = [], []
    for r in runs:
        row, _, how = row_of(r, truths[r.spec.size], bandwidths)
        rows.append(row)
        details.append(
            {
                **row.to_json(),
                "run_id": r.spec.run_id,
                "completion_measured": how,
                "wall_seconds": r.wall,
                "links": [asdict(u) for u in r.links],
                "stats": r.stats,
                "worker_reports": [o.report for o in r.outcomes],
            }
        )
        if row.verified and not args.keep_results:
            for o in r.outcomes:
                (r.results / f"{o.host}.npy").unlink(missing_ok=True)
    summary.update(
        verified=all(r.verified for r in rows),
        problems=[p for r in rows for p in r.problems]
        if single
        else [f"{r.algo} x {r.size:,}: {p}" for r in rows for p in r.problems],
        rows=details,
        points=[p.to_json() for p in points(rows)],
        timings=sc.timings,
        network=sc.record,
        capture_missed=capture_missed,
        link_bytes="kernel counters of each link's root-namespace interface (Ethernet frames)",
    )
    if single:
        first = details[0]
        summary.update(
            algo_facts=runs[0].facts,
            completion_seconds=rows[0].seconds,
            completion_measured=first["completion_measured"],
            wall_seconds=runs[0].wall,
            frames_per_worker=-(-sizes[0] // K),
            links=first["links"],
            stats=runs[0].stats,
            worker_reports=first["worker_reports"],
        )
    (run.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if single:
        report_single(runs[0], rows[0], first["completion_measured"], args, say)
    else:
        title = f"{label} on {args.switch}{shaped}, codec {args.codec}"
        report_comparison(rows, run, args, say, title=title)
    if any(capture_missed.values()):
        say(f"note: tcpdump missed frames (the pcaps are incomplete): {capture_missed}")
    say(f"run dir: {run.root} (summary.json, build/, logs/{', pcaps/' if args.pcap else ''})")
    return 0 if summary["verified"] else 1


def report_single(run: AlgoRun, row: Row, how: str, args: argparse.Namespace, say: Any) -> None:
    """One algorithm at one size: completion, every link, the switch counters, the verdict."""
    seconds, size = row.seconds, run.spec.size
    frames = -(-size // K)
    say(f"completion: {seconds:.3f} s ({how}); workers ran {run.wall:.1f} s in all")
    if seconds == seconds and seconds > 0:
        rate = 8 * 4 * size / seconds / 1e6
        say(f"  algorithm bandwidth {rate:,.1f} Mbit/s (a worker's input / completion time)")
    if isinstance(run.algo, Ina):
        say(
            f"bytes per link during the allreduce (each worker sends at least {frames:,} "
            f"frames = {_fmt_bytes(frames * FRAME_BYTES)} per phase):"
        )
    else:
        say("bytes per link during the allreduce (Ethernet frames, TCP headers included):")
    for line in render_links(run.links):
        say(line)
    say("switch counters (inaemu stats):")
    for line in run.stats.rstrip().splitlines():
        say(f"  {line}")
    for line in usage_lines(run.usage):
        say(line)
    if row.floor_seconds is not None:
        say(
            f"link floor: {row.floor_seconds:.3f} s (the busiest link's bytes at its rate; "
            f"completion {row.seconds / row.floor_seconds:.2f}x)"
        )
    say(f"bound by {row.bound_by}: {row.bound_reason}")
    if row.problems:
        say(f"FAILED: {len(row.problems)} problem(s):")
        for p in row.problems:
            say(f"  {p}")
    else:
        if row.check == "bound":
            what = f"the float64 sum within the {args.codec} error bound"
        elif args.codec == "int32":
            what = "numpy's sum of the inputs"
        else:
            what = "the reference"
        say(
            f"verified: {len(run.outcomes)} workers' results identical and equal to {what} "
            f"({size:,} elements; max |error| {row.max_abs_error:.3g})"
        )


def usage_lines(usage: Usage | None) -> list[str]:
    """The CPU of a run's processes and of the machine, as the report prints it."""
    if usage is None:
        return []
    each = ", ".join(
        f"{p.name} {p.busy:.0%}" for p in sorted(usage.processes, key=lambda p: -p.busy)
    )
    machine = "-" if usage.machine_busy is None else f"{usage.machine_busy:.0%}"
    return [
        f"CPU over the completion window ({usage.window:.3f} s), share of one core: {each}; "
        f"the machine's {usage.cores} cores {machine} busy"
    ]


def report_comparison(
    rows: list[Row], run: RunDir, args: argparse.Namespace, say: Any, *, title: str
) -> None:
    """Several runs: one table, what its columns count, the plot, the problems."""
    repeated = any(len(g) > 1 for g in groups(rows))
    for line in render_comparison(rows):
        say(line)
    say(
        "bytes: Ethernet frames counted by the kernel on each link's root-namespace interface "
        "(Mininet's veths), from the workers' start to their exit; host sent: its link towards "
        "the switch; floor: the time the busiest link direction's bytes need at its rate; "
        "load: floor / completion time; busiest process: the switch or worker process that "
        "used the most of a core over the completion window; machine: all its cores, "
        "anybody's work; bound: what bounded the time (links, emulator, unclear: docs/"
        "mininet.md); max |error|: against the float64 sum of the inputs"
        + ("; with --repeat: the median run, min-max of the times" if repeated else "")
    )
    notes = bound_notes(rows)
    if notes:
        say("not bound by the links:")
        for line in notes:
            say(line)
    if len(args.sizes or []) > 1:
        try:
            path = plot_completion(rows, run.root / "completion.png", title=title)
            say(f"completion time against size: {path}")
        except RuntimeError as exc:
            say(f"no plot: {exc}")
    failed = [r for r in rows if not r.verified]
    if failed:
        say(f"FAILED: {len(failed)} of {len(rows)} run(s):")
        for r in failed:
            for p in r.problems:
                say(f"  {r.algo} x {r.size:,}: {p}")
    else:
        say(f"verified: every run ({len(rows)}), each worker's result as its check requires")


if __name__ == "__main__":
    raise SystemExit(main())
