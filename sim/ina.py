"""In-network aggregation in simulated time: the project's INA client on every worker host,
the project's pipeline on every switch, ns-3's links between them.

Every host runs `hostlib.client.InaClient` itself, the protocol a training worker links
(window, retransmission timers, congestion control, loss recovery, striping over trees, the
run check, every codec's phases): its operation is a sequence of exchanges
(`InaClient.allreduce_steps`), and an exchange is driven by `fill`, `take_frames`, `wake_at`
and `after`; the emulator drives them from a blocking loop on a socket
(`hostlib.client.drive`), `InaHost` from ns-3's events, with the client's clock reading
simulated time. Frames reach the hosts through one `FrameGroup` over every host's NIC, handed
over once per simulated instant; each host's timer is a `glue.TimerMux` entry, armed at the
exchange's `wake_at`.

The job is planned as the controller plans it (`controller.jobs.JobManager`: slot pools,
trees, multicast groups, the host rewrite) and installed in process with the routes
(`route_plans`). Results are checked bit for bit against the codec run on the reference switch
(`hostlib.worker.expected_sum`), as `inaemu mininet` checks them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.common.wire import FRAME_BYTES, INA_OFFSET, Endpoint, FrameTemplate
from inaemu.controller.jobs import JobManager, JobRecord, JobSpec, route_plans
from inaemu.hostlib.client import InaClient, InaError, Steps, _Exchange
from inaemu.hostlib.codecs import make_codec
from inaemu.p4.constants import STATE_READY
from inaemu.sim.engine import SimError, Simulation
from inaemu.sim.network import SimNetwork
from inaemu.sim.switches import FrameGroup, SimSwitch
from inaemu.topology.model import Topology

JOB_ID = 1
RUN_ID = 1  # one run per simulation: the switches are new


class SimTransport:
    """A host's NIC in the simulation as the client's framed transport: frames it builds go
    out of the NIC as they are; nothing is received through it (the simulator hands received
    frames to the exchange, `InaHost.on_frames`)."""

    def __init__(self, nics: FrameGroup, index: int, head: bytes) -> None:
        self.nics, self.index = nics, index
        self.head = np.frombuffer(head, np.uint8).copy()
        self.frames_sent = 0

    def send_framed(self, frames: npt.NDArray[np.uint8]) -> None:
        rows = np.ascontiguousarray(frames)
        if len(rows):
            self.nics.group.SendRows(rows, len(rows), rows.shape[1], self.index)
            self.frames_sent += len(rows)

    def send(self, payloads: npt.NDArray[np.void]) -> None:
        raw = np.ascontiguousarray(payloads).view(np.uint8).reshape(len(payloads), -1)
        frames = np.empty((len(raw), len(self.head) + raw.shape[1]), np.uint8)
        frames[:, : len(self.head)] = self.head
        frames[:, len(self.head) :] = raw
        self.send_framed(frames)

    def recv(self, timeout: float) -> npt.NDArray[np.void]:
        raise SimError("a simulated host receives through the simulator, not its transport")

    def recv_offsets(self, timeout: float) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        raise SimError("a simulated host receives through the simulator, not its transport")

    def close(self) -> None:
        pass


class InaHost:
    """Worker `rank`'s operation (`steps`) driven by simulated events."""

    def __init__(self, sim: Simulation, rank: int, client: InaClient, steps: Steps[Any]) -> None:
        self.sim, self.rank, self.client, self.steps = sim, rank, client, steps
        self.exchange: _Exchange | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.done_at: float | None = None  # simulated seconds
        self.timers: Any = None  # glue.TimerMux, entry `rank`
        self.strays = 0  # frames that came while no exchange ran
        self.failed_in: _Exchange | None = None  # the exchange it failed in

    def start(self) -> None:
        self._next(first=True)

    def _next(self, first: bool = False, error: BaseException | None = None) -> None:
        """Resume the operation after an exchange (or at the start, or with an exchange's
        error, which the steps may handle or re-raise)."""
        try:
            if error is not None:
                exchange = self.steps.throw(error)
            else:
                exchange = next(self.steps) if first else self.steps.send(None)
        except StopIteration as stop:
            self.result, self.exchange = stop.value, None
            self.done_at = self.sim.now()
            self.timers.Disarm(self.rank)
            return
        except InaError as exc:
            self._fail(exc)
            return
        self.exchange = exchange
        self._step(exchange.fill)

    def _step(self, action: Any, *args: Any) -> None:
        """Run one of the exchange's methods; then send what may go and re-arm the timer, or
        move on if the exchange is done."""
        exchange = self.exchange
        assert exchange is not None
        try:
            action(*args)
            if not exchange.remaining:
                self._next()
                return
            now = self.sim.now()
            if action != exchange.fill:
                exchange.after(now)
            wake = exchange.wake_at(now)
        except InaError as exc:
            self._next(error=exc)
            return
        if math.isfinite(wake):
            self.timers.Arm(self.rank, self.sim.ps_at_or_after(wake))

    def _fail(self, exc: BaseException) -> None:
        self.failed_in = self.exchange
        self.error, self.exchange = exc, None
        self.done_at = self.sim.now()
        self.timers.Disarm(self.rank)

    def on_frames(self, buf: npt.NDArray[np.uint8], payloads: npt.NDArray[np.int64]) -> None:
        if self.exchange is None:
            self.strays += len(payloads)
            return
        self._step(self.exchange.take_frames, buf, payloads, self.sim.now())

    def on_timer(self) -> None:
        if self.exchange is not None:
            self._step(lambda: None)


@dataclass
class InaOutcome:
    """What one simulated INA allreduce did."""

    results: dict[str, npt.NDArray[Any] | None]  # host -> its result (None: it failed)
    errors: dict[str, str]  # host -> the error it ended with
    seconds: float  # simulated: the last worker's result
    done_at: dict[str, float]
    record: JobRecord
    switches: dict[str, dict[str, Any]]  # name -> counters
    client_stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    strays: int = 0


@dataclass(frozen=True)
class InaSettings:
    window: int = 256
    n_trees: int = 0  # 0: one per root candidate (the controller's default)
    dataplane: str = "fast"
    switch_latency_ps: int = 0
    host_poll_ps: int = 0  # a host takes its frames every this often (0: at every instant)
    initial_rto: float = 1e-3
    min_rto: float = 50e-6
    max_rto: float = 0.1
    give_up_after: float = 1.0  # simulated seconds without progress


def simulate_ina(
    sim: Simulation,
    net: SimNetwork,
    workers: Sequence[str],
    inputs: Sequence[npt.NDArray[Any]],
    codec: str,
    settings: InaSettings,
    on_start: Callable[[list[InaHost]], None] | None = None,
) -> InaOutcome:
    """Every worker all-reduces its input through the switches, from simulated time 0
    (`on_start`: told the hosts before the simulation runs)."""
    topo = net.topo
    record = JobManager(topo).plan_add(
        JobSpec(JOB_ID, tuple(workers), pool_size=settings.window, n_trees=settings.n_trees)
    )
    switches = {
        name: SimSwitch(
            sim,
            name,
            net.switch_devices(name),
            dataplane=settings.dataplane,
            latency_ps=settings.switch_latency_ps,
            seed=net.spec.seed + i,
        )
        for i, name in enumerate(topo.switches)
    }
    for name, plan in route_plans(topo).items():
        switches[name].install(plan)
    for name, plan in record.plans.items():
        switches[name].install(plan)
    hosts = _hosts(sim, net, topo, workers, inputs, codec, settings, len(record.trees))

    def start() -> None:
        for host in hosts:
            host.start()

    sim.glue.at_ps(0, sim.handler(start))
    if on_start is not None:
        on_start(hosts)
    sim.run()
    results: dict[str, npt.NDArray[Any] | None] = {}
    errors: dict[str, str] = {}
    for name, host in zip(workers, hosts, strict=True):
        results[name] = None if host.error is not None else host.result
        if host.error is not None:
            where = _where(host.failed_in, record, switches, settings.window)
            errors[name] = f"{type(host.error).__name__}: {host.error}{where}"
        elif host.done_at is None:
            where = _where(host.exchange, record, switches, settings.window)
            errors[name] = _stuck(host) + where
    done = {n: h.done_at for n, h in zip(workers, hosts, strict=True) if h.done_at is not None}
    return InaOutcome(
        results=results,
        errors=errors,
        seconds=max(done.values()) if len(done) == len(workers) else float("nan"),
        done_at=done,
        record=record,
        switches={n: s.counters() for n, s in switches.items()},
        client_stats={n: h.client.stats.summary() for n, h in zip(workers, hosts, strict=True)},
        strays=sum(h.strays for h in hosts),
    )


def _hosts(
    sim: Simulation,
    net: SimNetwork,
    topo: Topology,
    workers: Sequence[str],
    inputs: Sequence[npt.NDArray[Any]],
    codec: str,
    settings: InaSettings,
    n_trees: int,
) -> list[InaHost]:
    """An `InaHost` per worker, their NICs in one `FrameGroup`, their timers in one mux."""
    nics = FrameGroup(sim)
    nics.group.tick_ps = settings.host_poll_ps
    timers = sim.glue.TimerMux()
    timers.Resize(len(workers))
    sim.hold(timers)
    hosts = []
    for rank, name in enumerate(workers):
        nics.add_port(rank, net.host_device(name))
        h = topo.hosts[name]
        switch = topo.switches[topo.host_attachment(name)[0]]
        head = FrameTemplate(Endpoint(h.mac, h.ip), Endpoint(switch.agg_mac, switch.agg_ip))
        client = InaClient(
            SimTransport(nics, rank, head.prefix()),
            job_id=JOB_ID,
            window=settings.window,
            n_workers=len(workers),
            rank=rank,
            n_trees=n_trees,
            run=RUN_ID,
            initial_rto=settings.initial_rto,
            min_rto=settings.min_rto,
            max_rto=settings.max_rto,
            give_up_after=settings.give_up_after,
            clock=sim.now,
        )
        host = InaHost(sim, rank, client, client.allreduce_steps(inputs[rank], make_codec(codec)))
        host.timers = timers
        hosts.append(host)

    def frames() -> None:
        batch = nics.received()
        n = batch.n
        ports = batch.port[:n]
        whole = batch.length[:n] >= FRAME_BYTES
        for rank in np.unique(ports[whole]).tolist():
            mine = whole & (ports == rank)
            hosts[rank].on_frames(batch.buf, batch.offset[:n][mine] + INA_OFFSET)

    nics.group.SetHandler(sim.handler(frames))
    timers.SetHandler(sim.handler(lambda rank: hosts[rank].on_timer()))
    return hosts


def _stuck(host: InaHost) -> str:
    """Why a host never finished although the events ran out: its missing chunks."""
    ex = host.exchange
    if ex is None:
        return "never started"
    missing = [int(ex.first + i) for i in np.flatnonzero(~ex.done)]
    shown = ", ".join(str(m) for m in missing[:8]) + (" ..." if len(missing) > 8 else "")
    return (
        f"job {JOB_ID}: the simulation ran out of events with {len(missing)} chunk(s) "
        f"[{shown}] unanswered"
    )


def _where(
    ex: _Exchange | None, record: JobRecord, switches: dict[str, SimSwitch], window: int
) -> str:
    """Where the first chunk `ex` misses stands in its tree's switches: each switch's cell for
    it, its contributions against its fan-in, and whether it holds the result."""
    if ex is None or ex.done.all():
        return ""
    chunk = int(ex.first + int(np.flatnonzero(~ex.done)[0]))
    slot, set_ = chunk % window, (chunk // window) % 2
    tree = slot % len(record.trees)
    parts = []
    for name, node in sorted(record.trees[tree].items()):
        base, _ = record.pools[name]
        cell = (base + slot) * 2 + set_
        regs = switches[name].pipeline.registers
        count, fanin = int(regs.count[cell]), len(node.child_ports)
        ready = bool(int(regs.state[cell]) & STATE_READY)
        parts.append(f"{name} {count} of {fanin}" + (" (result held)" if ready else ""))
    return f"; chunk {chunk} (slot {slot}, set {set_}, tree {tree}) at the switches: " + ", ".join(
        parts
    )
