"""One algorithm's run on a Mininet scenario (`run_algorithm` -> `AlgoRun`): its set-up, every
worker started on its host with a fresh run id, progress lines while they run, a time limit,
the link counters and the switches' counters and drops before and after, every process's CPU
(`accounting`); then each worker's outcome and result read back, and the truth it is checked
against (`truth`, `row_of`). `inaemu mininet` (`run.py`) runs one or several on a network."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.collectives.schedule import Schedule
from inaemu.mininet.algos import (
    Algorithm,
    RunSpec,
)
from inaemu.mininet.scenario import Scenario, ScenarioError
from inaemu.runs.accounting import (
    DROPS_REPORTED_WITHIN,
    Bmv2Drops,
    CpuMeter,
    Usage,
    drops_delta,
    exited,
    link_queue_drops,
    read_port_drops,
    wait_exited,
)
from inaemu.runs.compare import (
    LinkUse,
    Row,
    Truth,
    Verdict,
    check_results,
    link_delta,
    make_row,
)

Progress = Callable[[str], None]  # where the progress lines go
PROGRESS_EVERY = 10.0  # seconds between progress lines while the workers run (--progress)


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


def completion(outcomes: list[WorkerOutcome]) -> tuple[float, str]:
    """The allreduce's completion time and how it was measured."""
    reports = [o.report for o in outcomes if o.report]
    if not reports or len(reports) != len(outcomes):
        return float("nan"), "unknown"
    if all("start" in r and "end" in r for r in reports):
        last_start = max(float(r["start"]) for r in reports)
        return max(float(r["end"]) for r in reports) - last_start, "from the last worker's start"
    return max(float(r["seconds"]) for r in reports), "the slowest worker's allreduce"


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
            f"(limit {self.limit:.0f} s); the hosts sent {fmt_bytes(sent)} so far, "
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
        stats = sc.stats()
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


BMV2_DROPS = Bmv2Drops()  # totals across reads (reading bmv2's rings' counters resets them)


def switch_drops(sc: Scenario) -> dict[str, dict[str, int]] | None:
    """Each switch's drops outside its pipeline so far: a softswitch's port drops from its log
    (`accounting.port_drops`), bmv2's from the kernel (`accounting.Bmv2Drops`: its receive
    rings', its interfaces' tx_dropped); None for another switch."""
    if sc.options.switch == "softswitch":
        return {sw.name: read_port_drops(sw.log_path) for sw in sc.net.switches}
    if sc.options.switch == "bmv2":
        return {
            sw.name: BMV2_DROPS.read(sw.proc.pid, sw.data_ports().values())
            for sw in sc.net.switches
            if sw.proc is not None
        }
    return None


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
    schedule = getattr(run.algo, "schedule", None)  # a host collective's
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
        steps=len(schedule.steps)
        if isinstance(schedule := getattr(run.algo, "schedule", None), Schedule)
        else None,
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


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"
