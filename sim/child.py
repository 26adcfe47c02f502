"""The process that runs simulations: `python -m inaemu.sim.child`, started by `inaemu sim`.

It reads a list of tasks (JSON, on stdin), loads ns-3 once, runs them one after another, and
writes one JSON line per event on its stdout: `{"progress": text}` while a run goes on,
`{"result": {...}}` when one ends (what `sim/run.py` makes the table's row of). Everything else
that reaches file descriptor 1 (ns-3 or cling writing there) goes to stderr instead. An ns-3
assertion aborts this process, not `inaemu sim`, which then says so in one line.

Each run's inputs are `hostlib.worker.worker_input(seed, rank, size, density)`, with seed =
the task's seed plus its repeat minus 1, so that repeats differ (a simulation is
deterministic: the same seed gives the same run); the same seed drives the links' loss.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from inaemu.hostlib.codecs import CODECS
from inaemu.hostlib.worker import worker_input
from inaemu.runs import algorithms
from inaemu.runs.compare import Truth, check_results, truth
from inaemu.sim.collectives import Replay, schedule_for, simulate_schedule
from inaemu.sim.engine import Ns3, SimError, Simulation, load
from inaemu.sim.ina import InaHost, InaSettings, simulate_ina
from inaemu.sim.ipnet import IpNetwork
from inaemu.sim.network import LinkSpec, SimNetwork
from inaemu.sim.tcp import TcpSettings
from inaemu.topology.model import Topology


@dataclass(frozen=True)
class Task:
    """One simulated run: an algorithm at one size, on a network."""

    algo: str
    size: int
    repeat: int
    seed: int
    codec: str
    topology: dict[str, Any]  # topology.json's content
    workers: tuple[str, ...]
    link: LinkSpec
    ina: InaSettings
    tcp: dict[str, Any] = field(default_factory=dict)
    limit: float = 3600.0  # wall seconds the run may take
    density: float = 1.0  # the inputs' share of non-zero elements
    progress: float = 10.0  # wall seconds between progress lines (0: none)

    @property
    def run_seed(self) -> int:
        return self.seed + self.repeat - 1

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["link"]["link_loss"] = [[a, b, p] for (a, b), p in self.link.link_loss.items()]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        link = dict(data["link"])
        link["link_loss"] = {(a, b): p for a, b, p in link["link_loss"]}
        return cls(
            **{
                **data,
                "workers": tuple(data["workers"]),
                "link": LinkSpec(**link),
                "ina": InaSettings(**data["ina"]),
            }
        )


class Progress:
    """A simulated-time event that looks at the wall clock: a progress line every `every`
    wall seconds, and a stop past `limit`. It reschedules itself while `busy()`, at a
    simulated interval adapted to take about a tenth of a second of wall time."""

    def __init__(
        self,
        sim: Simulation,
        task: Task,
        emit: Callable[[dict[str, Any]], None],
        busy: Callable[[], bool],
        done_text: Callable[[], str],
    ) -> None:
        self.sim, self.task, self.emit, self.busy, self.done_text = sim, task, emit, busy, done_text
        self.started = self.last_line = self.last_tick = time.perf_counter()
        self.interval_ps = 1_000_000  # 1 us to begin with
        self.stopped = ""
        self.tick = sim.handler(self._tick)
        sim.glue.at_ps(self.interval_ps, self.tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        spent = now - self.last_tick
        self.last_tick = now
        factor = 0.1 / spent if spent > 0 else 4.0
        self.interval_ps = max(1000, round(self.interval_ps * min(max(factor, 0.25), 4.0)))
        wall = now - self.started
        if wall > self.task.limit:
            self.stopped = (
                f"stopped after {wall:.0f} s of wall time (--limit) at simulated "
                f"{self.sim.now() * 1e6:,.1f} us: {self.done_text()}"
            )
            self.sim.ns.Simulator.Stop()
            return
        if self.task.progress and now - self.last_line >= self.task.progress:
            self.last_line = now
            self.emit(
                {
                    "progress": f"{self.task.algo} {self.task.size:,}: simulated "
                    f"{self.sim.now() * 1e6:,.1f} us, {self.done_text()}, "
                    f"{int(self.sim.ns.Simulator.GetEventCount()):,} events, {wall:.0f} s"
                }
            )
        if self.busy():
            self.sim.glue.at_ps(self.sim.now_ps() + self.interval_ps, self.tick)


def run_task(ns3: Ns3, task: Task, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run one task; what its row is made of (`sim.run.row_of`)."""
    topo = Topology.from_json(task.topology, source="the simulated topology")
    facts = algorithms.algorithm(task.algo)
    check = facts.check(task.codec)
    n = len(task.workers)
    seed, size, density = task.run_seed, task.size, task.density
    inputs = [worker_input(seed, r, size, density, task.codec) for r in range(n)]
    t = truth(task.codec, seed, n, size, exact=check == "exact", density=density)
    sim = Simulation(ns3)
    link = dataclasses.replace(task.link, seed=task.run_seed)
    try:
        if facts.kind == "ina":
            net = SimNetwork(sim, topo, link)
            return _ina(sim, net, task, facts, check, inputs, t, emit)
        return _collective(sim, topo, link, task, inputs, t, emit)
    finally:
        sim.close()


def _collective(
    sim: Simulation,
    topo: Topology,
    link: LinkSpec,
    task: Task,
    inputs: Sequence[Any],
    t: Truth,
    emit: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """A host collective (or gloo's ring) over ns-3's TCP (`sim.collectives`); its inputs in
    the schedule's rank order, as on Mininet (rank r of the schedule is the worker whose input
    is worker_input(seed, r))."""
    settings = TcpSettings(mtu=task.tcp.get("mtu", 1500))
    if task.tcp.get("min_rto_ps"):
        settings = dataclasses.replace(settings, min_rto_ps=task.tcp["min_rto_ps"])
    net = IpNetwork(
        sim, topo, link, mtu=settings.mtu, ecmp=task.tcp.get("ecmp", False), fair_hosts=True
    )
    schedule = schedule_for(task.algo, topo, task.workers, link.node_ports)
    progress: list[Progress] = []

    def started(replay: Replay) -> None:
        progress.append(Progress(sim, task, emit, replay.busy, replay.describe))

    out = simulate_schedule(
        sim, net, schedule, inputs, task.codec, settings, truth=t,
        limit_seconds=task.tcp.get("limit", 60.0), on_start=started,
    )  # fmt: skip
    problems = [f"{h}: {e}" for h, e in out.errors.items()]
    if progress and progress[0].stopped:
        problems.insert(0, progress[0].stopped)
    return {
        "seconds": out.seconds,
        "wall_seconds": out.wall_seconds,
        "events": out.events,
        "uses": [dataclasses.asdict(u) for u in out.uses],
        "bandwidths": out.bandwidths,
        "verdict_problems": out.verdict.problems,
        "max_abs_error": out.verdict.max_abs_error,
        "problems": problems,
        "check": out.check,
        "facts": {
            "steps": str(len(schedule.steps)),
            "messages": str(out.messages),
            "tcp": out.settings,
        },
        "steps": len(schedule.steps),
        "packets": None,
        "retransmissions": out.tcp.get("retransmissions", 0),
        "queue_drops": out.queue_drops,
        "lost": out.lost,
        "switch_drops": {k: {"inside": v} for k, v in out.node_drops.items() if v},
    }


def _ina(
    sim: Simulation,
    net: SimNetwork,
    task: Task,
    facts: algorithms.Algorithm,
    check: str,
    inputs: Sequence[Any],
    t: Truth,
    emit: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    settings = dataclasses.replace(task.ina, n_trees=facts.trees)
    progress: list[Progress] = []

    def started(hosts: Sequence[InaHost]) -> None:
        def busy() -> bool:
            return any(h.done_at is None for h in hosts)

        def done_text() -> str:
            finished = sum(h.done_at is not None for h in hosts)
            chunks = sum(h.client.stats.results for h in hosts)
            return f"{finished}/{len(hosts)} workers done, {chunks:,} chunk results"

        progress.append(Progress(sim, task, emit, busy, done_text))

    out = simulate_ina(sim, net, task.workers, inputs, task.codec, settings, on_start=started)
    stopped = progress[0].stopped if progress else ""
    verdict = check_results(
        out.results,
        check=check,
        exact=t.exact,
        sum64=t.sum64,
        bound=facts.error_bound(task.codec, len(task.workers), t.abs_sum)
        if check == "bound"
        else None,
    )
    problems = [f"{h}: {e}" for h, e in out.errors.items()]
    if stopped:
        problems.insert(0, stopped)
    drops = {
        name: {str(i): v for i, v in enumerate(c["drops"]) if v} for name, c in out.switches.items()
    }
    return {
        "seconds": out.seconds,
        "wall_seconds": sim.wall_seconds,
        "events": sim.events,
        "uses": [dataclasses.asdict(u) for u in net.link_uses()],
        "bandwidths": net.bandwidths_mbit(),
        "verdict_problems": verdict.problems,
        "max_abs_error": verdict.max_abs_error,
        "problems": problems,
        "check": check,
        "facts": {"trees": str(len(out.record.trees)), "window": str(settings.window)},
        "packets": sum(c["rx"] for c in out.switches.values()),
        "retransmissions": sum(int(s["retransmissions"] or 0) for s in out.client_stats.values()),
        "queue_drops": net.queue_drops(),
        "lost": net.lost(),
        "switch_drops": {k: v for k, v in drops.items() if v},
    }


def main() -> int:
    out: IO[str] = os.fdopen(os.dup(1), "w")  # our JSON lines; fd 1 itself goes to stderr
    os.dup2(2, 1)

    def emit(line: dict[str, Any]) -> None:
        out.write(json.dumps(line, default=_json) + "\n")
        out.flush()

    tasks = [Task.from_json(t) for t in json.load(sys.stdin)]
    ns3 = load()
    started = time.perf_counter()
    _warm_up(tasks)
    emit({"loaded": ns3.load_seconds, "warmed_up": time.perf_counter() - started})
    for task in tasks:
        try:
            result = run_task(ns3, task, emit)
        except (SimError, ValueError) as exc:
            result = {"error": str(exc)}
        emit({"result": result})
    return 0


def _warm_up(tasks: Sequence[Task]) -> None:
    """The compiled kernels the tasks use loaded (or compiled) before any run's clock starts:
    the switches' data plane, the client's and its codecs'."""
    from inaemu.hostlib.client import warm_up as warm_up_client
    from inaemu.hostlib.codecs import make_codec
    from inaemu.softswitch.fast.dataplanes import warm_up as warm_up_dataplane

    for plane in {t.ina.dataplane for t in tasks}:
        warm_up_dataplane(plane)
    for codec in {t.codec for t in tasks if t.codec in CODECS}:
        warm_up_client(make_codec(codec), np.int32 if codec == "int32" else np.float32)


def _json(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x) if math.isfinite(x) else None
    raise TypeError(f"{type(x).__name__} is not JSON")


if __name__ == "__main__":
    sys.exit(main())
