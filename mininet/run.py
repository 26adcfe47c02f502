"""`inaemu mininet` (also `python -m inaemu.mininet`): one allreduce scenario on a Mininet
network, programmed only through the controller's commands, every result checked.

    inaemu mininet --topo star:4 --switch softswitch --algo ina --size 16M --bw 20
    inaemu mininet --topo leaf-spine:2x2x2 --switch bmv2 --algo ina-1tree --loss 0.01 --pcap
    inaemu mininet -t topology.json --size 100000

It installs Mininet from Debian when it is missing (root), builds the network (hosts in
namespaces, switch nodes in the root namespace on 127.0.0.1 P4Runtime ports, links shaped to
`--bw` Mbit/s with Mininet's TCLink), runs `inaemu pipeline push`, `routes`, `loss` and the
algorithm's set-up (`job add` for ina), starts one worker per host with a fresh run id, waits
for all, reads `inaemu stats`, removes the network and then checks every result: all
workers' arrays equal to the sum of the inputs (int32: numpy's exact sum; other codecs: the
codec run against the reference switch, bit for bit). It prints the completion time, the
bytes each link carried and each switch's counters, and writes `summary.json`, `build/`,
`logs/` and (`--pcap`) `pcaps/` under the run directory.

Exit status: 0 verified; 1 a worker failed or a result is wrong; 2 bad arguments, or the
network could not be built or programmed; 130 interrupted (Ctrl-C, SIGTERM, SIGHUP). In every
case the network and the processes it started are gone when it exits. docs/mininet.md has
the details.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.controller.topology import Topology, TopologyError, from_spec
from inaemu.hostlib.codecs import CODECS, make_codec
from inaemu.hostlib.codecs.base import simulate_allreduce
from inaemu.hostlib.wire import FRAME_BYTES, K
from inaemu.hostlib.worker import worker_input
from inaemu.mininet import debian
from inaemu.mininet.algos import RunSpec, algorithm, describe
from inaemu.mininet.scenario import (
    MAX_BW,
    CleanupError,
    LinkUse,
    NetOptions,
    RunDir,
    Scenario,
    ScenarioError,
    link_delta,
)

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class Interrupted(Exception):
    """SIGTERM or SIGHUP: handled like Ctrl-C."""


def parse_size(text: str) -> int:
    """Elements: 100000, 100_000, 64K (65,536), 16M (16 x 2^20), 1G."""
    m = re.fullmatch(r"\s*(\d[\d_]*)\s*([KMG]?)\s*", text, re.IGNORECASE)
    if m is None or int(m[1]) == 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: elements, e.g. 100000, 64K, 16M")
    return int(m[1]) * _SUFFIX[m[2].upper()]


def _bw(text: str) -> float:
    try:
        bw = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad bandwidth {text!r}: Mbit/s, e.g. 20") from None
    if not 0 < bw <= MAX_BW:
        raise argparse.ArgumentTypeError(f"--bw {text}: Mininet shapes 0 < bw <= {MAX_BW:.0f}")
    return bw


def _probability(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        p = -1.0
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"--loss {text}: a probability in 0..1, e.g. 0.01")
    return p


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
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
        "--algo", default="ina", metavar="NAME", help=f"the allreduce algorithm: {describe()}"
    )
    ap.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("256K"),
        help="elements per worker (4 bytes each); K, M, G = 2^10, 2^20, 2^30 (default 256K)",
    )
    ap.add_argument(
        "--codec",
        choices=sorted(CODECS),
        default="int32",
        help="int32 (default): exact integer sums; others are checked bit for bit against "
        "the codec run on the reference switch",
    )
    ap.add_argument(
        "--bw",
        type=_bw,
        default=None,
        help="Mbit/s on every link without a bw option of its own (Mininet TCLink; default: "
        "unshaped)",
    )
    ap.add_argument(
        "--loss",
        type=_probability,
        default=0.0,
        help="loss probability injected at every port of every switch (`inaemu loss`)",
    )
    ap.add_argument("--window", type=int, default=64, help="the job's slots per switch (64)")
    ap.add_argument("--seed", type=int, default=1, help="inputs: worker_input(seed, rank, ...)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="a worker gives up after this many seconds without progress (default 30)",
    )
    ap.add_argument(
        "--limit", type=float, default=1800.0, help="seconds the run may take in all (1800)"
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
        "build/mininet/<time>-<topology>-<switch>-<algo>)",
    )
    ap.add_argument(
        "--keep-results",
        action="store_true",
        help="keep the workers' result arrays (build/results/*.npy) after a verified run",
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
    against the reference switch (`simulate_allreduce`)."""
    if codec == "int32":
        total = np.zeros(size, np.int64)
        for rank in range(n):
            total += worker_input(seed, rank, size, codec="int32")
        if total.min() < np.iinfo(np.int32).min or total.max() > np.iinfo(np.int32).max:
            raise ValueError("the int32 sum of the inputs overflows; use fewer workers")
        return total.astype(np.int32)
    inputs = [worker_input(seed, rank, size, codec=codec) for rank in range(n)]
    results, _ = simulate_allreduce(make_codec(codec), inputs)
    return results[0]


def verify(outcomes: list[WorkerOutcome], results: Path, expected: npt.NDArray[Any]) -> list[str]:
    """Problems with the run: failed workers, missing or wrong results, disagreement."""
    problems = []
    digests: dict[str, str] = {}
    for o in outcomes:
        if o.returncode != 0:
            why = "killed at the time limit" if o.returncode is None else f"exit {o.returncode}"
            problems.append(f"{o.host} (rank {o.rank}): {why}: {o.error}".rstrip(": "))
            continue
        path = results / f"{o.host}.npy"
        try:
            got = np.load(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{o.host}: no result ({exc})")
            continue
        if got.shape != expected.shape or got.dtype != expected.dtype:
            problems.append(
                f"{o.host}: result {got.dtype}{list(got.shape)}, expected "
                f"{expected.dtype}{list(expected.shape)}"
            )
            continue
        wrong = int(np.count_nonzero(got != expected))
        if wrong:
            first = int(np.flatnonzero(got != expected)[0])
            problems.append(
                f"{o.host}: {wrong} of {expected.size} elements wrong (first at {first}: "
                f"{got[first]!r}, expected {expected[first]!r})"
            )
        digests[o.host] = str(o.report.get("digest", ""))
    if len(set(digests.values())) > 1:
        problems.append(f"workers' digests differ: {digests}")
    return problems


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


def run_workers(
    sc: Scenario, algo: Any, spec: RunSpec, limit: float
) -> tuple[list[WorkerOutcome], Path]:
    """Every worker at once, each on its host; wait for all (at most `limit` seconds)."""
    results = sc.run.build / "results"
    results.mkdir(exist_ok=True)
    procs = []
    with (sc.run.logs / "workers.txt").open("w") as cmds:
        for rank, host in enumerate(spec.workers):
            out = results / f"{host}.npy"
            out.unlink(missing_ok=True)
            argv = algo.worker_argv(sc, spec, rank, host, out)
            cmds.write(f"{host}: {subprocess.list2cmdline(argv)}\n")
            logs = sc.run.logs
            procs.append(
                sc.popen(host, argv, stdout=logs / f"{host}.json", stderr=logs / f"{host}.log")
            )
    deadline = time.monotonic() + limit
    outcomes = []
    for rank, (host, proc) in enumerate(zip(spec.workers, procs, strict=True)):
        try:
            rc: int | None = proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        outcome = WorkerOutcome(host, rank, rc)
        stdout = (sc.run.logs / f"{host}.json").read_text(errors="replace")
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        if lines:
            try:
                outcome.report = json.loads(lines[-1])
            except ValueError:
                pass
        if rc != 0:
            tail = (sc.run.logs / f"{host}.log").read_text(errors="replace").strip().splitlines()
            outcome.error = " | ".join(tail[-3:])
        outcomes.append(outcome)
    return outcomes, results


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
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.-]+", "-", label).strip("-")
    return Path("build") / "mininet" / f"{stamp}-{safe}-{switch}-{algo}"


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


def run_scenario(args: argparse.Namespace) -> int:
    say = print
    try:
        if args.topology is not None:
            topo = Topology.load(args.topology)
            label = args.topology.stem
        else:
            label = args.topo or "star:4"
            topo = from_spec(label)
        algo = algorithm(args.algo)
        workers = tuple(
            sorted((h for h, x in topo.hosts.items() if x.role == "worker"), key=natural)
        )
        if len(workers) < 1:
            raise ValueError("the topology has no hosts with role worker")
        if not 1 <= args.window <= 0x7FFF:
            raise ValueError("--window must be 1..32767")
        debian.ensure(install=not args.no_install)
        if args.pcap and args.switch == "softswitch" and shutil.which("tcpdump") is None:
            if args.no_install:
                raise debian.MininetUnavailable("--pcap needs tcpdump: apt-get install tcpdump")
            debian.apt_install(("tcpdump",))
        expected = expected_result(args.codec, args.seed, len(workers), args.size)
        run = RunDir.make(
            args.run_dir or default_run_dir(label, args.switch, args.algo), pcap=args.pcap
        )
        program = bmv2_program(run) if args.switch == "bmv2" else None
    except (TopologyError, ValueError, debian.MininetUnavailable, ScenarioError) as exc:
        print(f"inaemu mininet: {exc}", file=sys.stderr)
        return 2

    spec = RunSpec(
        workers=workers,
        size=args.size,
        codec=args.codec,
        seed=args.seed,
        run_id=secrets.randbelow(0xFFFF) + 1,
        window=args.window,
        timeout=args.timeout,
    )
    options = NetOptions(
        switch=args.switch,
        bw=args.bw,
        pcap=args.pcap,
        bmv2_log_level=args.bmv2_log_level,
        verbose=args.verbose,
    )
    summary: dict[str, Any] = {
        "topology": label,
        "switch": args.switch,
        "algo": args.algo,
        "workers": list(workers),
        "size": args.size,
        "codec": args.codec,
        "bw_mbit": args.bw,
        "loss": args.loss,
        "run_id": spec.run_id,
        "run_dir": str(run.root),
    }
    shaped = f", links {args.bw:g} Mbit/s" if args.bw else ""
    say(
        f"inaemu mininet: {label} ({len(topo.switches)} switches, {len(topo.hosts)} hosts) on "
        f"{args.switch}, algo {args.algo}, {len(workers)} workers x {args.size:,} {args.codec} "
        f"elements ({_fmt_bytes(4 * args.size)}){shaped}; run {spec.run_id}",
        flush=True,
    )
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    # a signal ignored from the start (e.g. SIGINT of `cmd &` in a script) stays ignored
    old = {s: signal.signal(s, _stop_on) for s in stops if signal.getsignal(s) != signal.SIG_IGN}
    try:
        with Scenario(topo, run, options, program=program) as sc:
            switches = ", ".join(f"{n} {sc.net[n].grpc}" for n in topo.switches)
            say(f"network up in {sc.timings['network']:.1f} s: {switches}", flush=True)
            sc.program()
            if args.loss:
                sc.set_loss(args.loss)
            facts = algo.prepare(sc, spec)
            summary["algo_facts"] = facts
            say(
                f"programmed in {sc.timings['program']:.1f} s; "
                + "; ".join(f"{k}: {v}" for k, v in facts.items()),
                flush=True,
            )
            before = sc.link_counters()
            started = time.monotonic()
            outcomes, results = run_workers(sc, algo, spec, args.limit)
            wall = time.monotonic() - started
            links = link_delta(before, sc.link_counters())
            died = [sw for sw in sc.net.switches if sw.proc is None or sw.proc.poll() is not None]
            crashed = [f"switch {sw.name} exited during the run: {sw.log_tail()}" for sw in died]
            try:
                stats = sc.inaemu("stats", *sc.topo_args())
            except ScenarioError as exc:  # e.g. a switch died: the workers' outcome still counts
                stats = str(exc)
                crashed.append(stats)
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

    problems = crashed + verify(outcomes, results, expected)
    capture_missed = {
        log.name.removeprefix("tcpdump-").removesuffix(".log"): missed
        for log in sorted(run.logs.glob("tcpdump-*.log"))
        if (missed := tcpdump_missed(log.read_text())) is not None
    }
    seconds, how = completion(outcomes)
    frames = -(-args.size // K)
    summary.update(
        verified=not problems,
        problems=problems,
        completion_seconds=seconds,
        completion_measured=how,
        wall_seconds=wall,
        frames_per_worker=frames,
        links=[asdict(u) for u in links],
        stats=stats,
        worker_reports=[o.report for o in outcomes],
        timings=sc.timings,
        network=sc.record,
        capture_missed=capture_missed,
    )
    if not problems and not args.keep_results:
        for o in outcomes:
            (results / f"{o.host}.npy").unlink(missing_ok=True)
    (run.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")

    say(f"completion: {seconds:.3f} s ({how}); workers ran {wall:.1f} s in all")
    if seconds == seconds and seconds > 0:
        rate = 8 * 4 * args.size / seconds / 1e6
        say(f"  algorithm bandwidth {rate:,.1f} Mbit/s (a worker's input / completion time)")
    say(
        f"bytes per link during the allreduce (each worker sends at least {frames:,} frames = "
        f"{_fmt_bytes(frames * FRAME_BYTES)} per phase):"
    )
    for line in render_links(links):
        say(line)
    if any(capture_missed.values()):
        say(f"note: tcpdump missed frames (the pcaps are incomplete): {capture_missed}")
    say("switch counters (inaemu stats):")
    for line in stats.rstrip().splitlines():
        say(f"  {line}")
    if problems:
        say(f"FAILED: {len(problems)} problem(s):")
        for p in problems:
            say(f"  {p}")
    else:
        what = "numpy's sum of the inputs" if args.codec == "int32" else "the reference"
        say(
            f"verified: {len(workers)} workers' results identical and equal to {what} "
            f"({args.size:,} elements)"
        )
    say(f"run dir: {run.root} (summary.json, build/, logs/{', pcaps/' if args.pcap else ''})")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
