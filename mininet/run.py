"""`inaemu mininet` (also `python -m inaemu.mininet`): one allreduce scenario on a Mininet
network, programmed only through the controller's operations (`controller/api.py`), every
result checked.

    inaemu mininet --topo star:4 --switch softswitch --algo ina --size 16M --bw 20
    inaemu mininet --topo leaf-spine:2x2x2 --switch bmv2 --algo ina-1tree --loss 0.01 --pcap
    inaemu mininet -t topology.json --size 100000
    inaemu mininet --topo star:4 --algo all --sizes 256K,1M,4M --bw 50

It installs Mininet from Debian when it is missing (root), builds the network (hosts in
namespaces, switch nodes in the root namespace on 127.0.0.1 P4Runtime ports, links shaped to
`--bw` Mbit/s with Mininet's TCLink), pushes the pipeline, installs the routes and the loss and
does the algorithm's set-up (a job for ina) as `inaemu pipeline push`, `routes`, `loss` and
`job add` would, starts one worker per host with a fresh run id, waits for all, reads the
switches' counters (as `inaemu stats`), removes the network and then checks every result: all
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
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from inaemu.common import args as arg
from inaemu.common.wire import K
from inaemu.mininet import debian
from inaemu.mininet.algo_run import (
    PROGRESS_EVERY,
    completion,
    fmt_bytes,
    natural,
    row_of,
    run_algorithm,
    run_algorithms,
    tcpdump_missed,
)
from inaemu.mininet.algos import (
    ALGORITHMS,
    CODECS,
    Algorithm,
    RunSpec,
    algorithm,
    describe,
)
from inaemu.mininet.report import report_comparison, report_single
from inaemu.mininet.scenario import (
    BW,
    MAX_BW,
    CleanupError,
    NetOptions,
    RunDir,
    Scenario,
    ScenarioError,
    check_prefix,
    link_params,
    link_shaping,
)
from inaemu.runs.accounting import (
    BW_CHECKS,
    BW_MARGIN,
    RULE,
    BwChoice,
    Capacity,
    capacity,
    check_size,
    choose_bw,
    next_bw_all,
)
from inaemu.runs.compare import (
    REPEATS,
    bound_of,
    directions,
    points,
    truth,
)
from inaemu.runs.compare import parse_size as parse_size  # the runner's sizes, re-exported
from inaemu.runs.compare import parse_sizes as parse_sizes
from inaemu.runs.footprint import OVERRIDE, check_fits, mininet_parts
from inaemu.softswitch.fast.dataplanes import DATAPLANES, DEFAULT_DATAPLANE
from inaemu.topology.builders import from_spec
from inaemu.topology.model import Topology, TopologyError
from inaemu.topology.routes import DIRECT_ROLES, NODE_PORTS

PROBE_SIZE = 256 << 10  # --bw auto: elements per worker of the unshaped runs (at most)
CHECK_MOST = 1 << 24  # --bw auto: elements per worker of a shaped check run (at most)
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
        float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad bandwidth {text!r}: Mbit/s, e.g. 20, or auto"
        ) from None
    return BW(text)


def _prefix(text: str) -> str:
    try:
        check_prefix(text)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--prefix {text!r}: ")) from None
    return text


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
        type=arg.LOSS,
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
        "--prefix",
        type=_prefix,
        default=None,
        help="the start of this network's switch interface names (e.g. k3q- for k3q-s1-eth1; "
        "default: three letters and digits no interface here starts with, so that networks "
        "of two runs do not collide; '' for none)",
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
        type=arg.INTERVAL,
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
    ap.add_argument(
        OVERRIDE,
        dest="memory_check",
        action="store_false",
        help="build the network even if it needs more memory than this machine has available",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="Mininet's progress messages")
    return ap


# ---------------------------------------------------------------------- the run


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
    from inaemu.p4.build import compile_p4
    from inaemu.p4.tools import P4C, SIMPLE_SWITCH_GRPC, missing_tools

    missing = missing_tools((P4C, SIMPLE_SWITCH_GRPC))
    if missing:
        raise ScenarioError(f"--switch bmv2: {missing}")
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
        c = capacity(r.algo.name, r.spec.size, seconds, directions(r.links, scales))
        if c is not None:
            caps.append(c)
    most = MAX_BW / max((k for k in scales if k), default=1.0)
    try:
        return choose_bw(caps, most=most), caps
    except ValueError as exc:
        raise ScenarioError(f"--bw auto: {exc}") from None


def check_bw(
    topo: Topology,
    run: RunDir,
    options: NetOptions,
    program: Path | None,
    choice: BwChoice,
    caps: Sequence[Capacity],
    algos: Sequence[Algorithm],
    spec_for: Any,
    most: int,
    args: argparse.Namespace,
    say: Any,
) -> tuple[float, list[dict[str, Any]]]:
    """`--bw auto`, after `probe_bw`: one shaped run of every algorithm that the probe
    measured (`caps`) at the chosen rate, each sized for about `accounting.CHECK_SECONDS` of
    link time (`check_size`, at most `most` elements), on a network of their own (logs under
    bw-check-<n>/); unless the links bound every one of them, the rate steps down
    (`next_bw_all`) and is checked again, at most `BW_CHECKS` times. The rate to use and each
    check's numbers, per algorithm."""
    by_name = {a.name: a for a in algos}
    bw, checks = choice.bw, []
    scales = bw_scales(topo, args.node_ports)
    for n in range(1, BW_CHECKS + 1):
        plan = [(by_name[c.algo], spec_for(check_size(c, bw, most=most))) for c in caps]
        shaped = dataclasses.replace(options, bw=bw, pcap=False)
        bandwidths = [p.get("bw") for p in link_shaping(topo, bw, args.node_ports)]
        where = RunDir.make(run.root / f"bw-check-{n}")
        with Scenario(topo, where, shaped, program=program) as sc:
            sc.program()
            runs = run_algorithms(sc, plan, args.limit, say, args.progress)
        results, verdicts = [], []
        for r in runs:
            for o in r.outcomes:  # only its time and links count
                (r.results / f"{o.host}.npy").unlink(missing_ok=True)
            if r.crashed or any(o.returncode != 0 for o in r.outcomes):
                raise ScenarioError(
                    f"--bw auto: {r.algo.name}'s check run at {bw:g} Mbit/s failed (logs in "
                    f"{where.logs}); give --bw"
                )
            seconds, _ = completion(r.outcomes)
            _, _, bound = bound_of(seconds, r.links, bandwidths, r.usage, r.drops, r.queue_drops)
            carried = capacity(r.algo.name, r.spec.size, seconds, directions(r.links, scales))
            mbit = None if carried is None else carried.mbit
            verdicts.append((bound.by, mbit))
            results.append(
                {
                    "algo": r.algo.name,
                    "size": r.spec.size,
                    "seconds": seconds,
                    "carried_mbit": mbit,
                    "bound_by": bound.by,
                    "bound_reason": bound.reason,
                }
            )
        try:
            after = next_bw_all(bw, verdicts)
        except ValueError as exc:
            raise ScenarioError(f"--bw auto: {exc}") from None
        checks.append({"mbit": bw, "runs": results, "next_mbit": after})
        say(f"--bw auto: checked {bw:g} Mbit/s, every algorithm on one network:", flush=True)
        for x in results:
            say(f"  {x['algo']} x {x['size']:,}: {x['bound_by']}-bound: {x['bound_reason']}")
        if after == bw:
            say(f"--bw auto: {bw:g} Mbit/s holds: the links bound every algorithm's run")
            return bw, checks
        others = [str(x["algo"]) for x in results if x["bound_by"] != "links"]
        say(
            f"--bw auto: not links-bound: {', '.join(others)}; stepping down to {after:g} Mbit/s",
            flush=True,
        )
        bw = after
    say(
        f"--bw auto: no rate was links-bound for every algorithm in {BW_CHECKS} checks; using "
        f"{bw:g} Mbit/s unchecked (the table says what bounded each run)",
        flush=True,
    )
    return bw, checks


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
        if args.memory_check:
            torch = any(a.name == "gloo" for a in algos)
            parts = mininet_parts(
                args.switch, len(topo.switches), len(topo.hosts), len(workers), max(sizes),
                torch=torch,
            )  # fmt: skip
            hint = "choose a smaller topology or --size"
            check_fits(f"a Mininet network of {label}", parts, hint=hint)
        auto = args.bw == AUTO
        scales = bw_scales(topo, args.node_ports)
        bw: float | None = None if auto else args.bw
        bandwidths = [p.get("bw") for p in link_shaping(topo, bw, args.node_ports)]
        if arg.parse_only("inaemu mininet"):
            return 0
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
        prefix=args.prefix,
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
        what += f"elements ({fmt_bytes(4 * sizes[0])}){shaped}; run {plan[0][1].run_id}"
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
            say(f"--bw auto: {choice.reason}", flush=True)
            most = min(CHECK_MOST, arg.MAX_ELEMENTS // len(workers))
            bw, checks = check_bw(
                topo, run, options, program, choice, caps, algos, spec_for, most, args, say
            )
            options = dataclasses.replace(options, bw=bw)
            bandwidths = [p.get("bw") for p in link_shaping(topo, bw, args.node_ports)]
            shaped = links_text(bw, args.node_ports, direct, auto=True)
            summary.update(
                bw_mbit=bw,
                bw_auto={
                    "chosen_mbit": bw,
                    "first_mbit": choice.bw,
                    "checks": checks,
                    "margin": choice.margin,
                    "probe_size": probe,
                    "capacities": [asdict(c) for c in caps],
                    "slowest": choice.slowest.algo,
                    "reason": choice.reason,
                },
            )
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


if __name__ == "__main__":
    raise SystemExit(main())
