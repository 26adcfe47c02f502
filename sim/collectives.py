"""Host collectives in simulated time: a checked `Schedule` (ring, halving-doubling, HDRM,
MultiTree, the worker-aggregator, gloo's ring) run as data over ns-3's TCP, with each codec's
bytes on the wire and every rank's result checked as the Mininet runner checks it.

Values and sizes come from the real executor, timing from ns-3:

1. `record`: every rank runs `hostlib.collective.executor.ScheduleClient` for real, as a
   thread, over an in-memory mesh (`MemoryMesh`) whose channels record each message: its
   (operation, step, transfer) from the executor's header and its bytes on a TcpPeers
   connection (the message and the frame header TcpPeers puts before it). So INCEPTIONN's
   data-dependent compressed sizes, an overflowing codec's repeated phase and the overflow
   bitmaps are all on the wire, and every rank's result is the executor's own.
2. `simulate_schedule`: the messages replayed over TCP on an `ipnet.IpNetwork`, with the
   executor's semantics: a rank starts a step by queueing the step's messages on their
   connections (in the executor's order) and finishes it when every message of the step
   addressed to it has arrived; then it starts the next (the operations of a multi-phase codec
   follow one another, step after step). One TCP connection per pair of ranks that exchange
   messages, both directions on it, opened before the clock starts (as TcpPeers' mesh is
   complete before the first allreduce). A message is its recorded bytes of virtual payload:
   no values cross the simulated network (`tcp.cpp`). A rank's completion is the end of its
   last step; the allreduce's time, the last rank's, from the instant every connection is open.

Hosts compute in no simulated time: what is simulated is the network (the emulator measures
its hosts' CPU too).

gloo (`gloo_schedule`): PyTorch's gloo allreduce is a ring (gloo/allreduce.cc, `ring`): ranks
in the order the job gives them (the Mininet runner: the workers in topology order), each
sending to the rank before it, the array in one chunk per rank; gloo cuts each chunk into at
least two segments and keeps one sent and one received while it reduces another, which only
overlaps computation with communication. It is simulated as the ring schedule over that rank
order and direction, each chunk one message, carried by the executor's messages and TcpPeers'
frames (gloo's own headers differ by a few bytes per message).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from inaemu.collectives.ring import ring_steps
from inaemu.collectives.schedule import Schedule
from inaemu.common import jit
from inaemu.hostlib.codecs import loader
from inaemu.hostlib.collective.executor import (
    ScheduleClient,
    make_schedule_codec,
    rank_plans,
    read_header,
)
from inaemu.hostlib.collective.peers import MemoryChannel, MemoryMesh, Message, PeerError
from inaemu.hostlib.collective.tcp_peers import FRAME_BYTES
from inaemu.runs import algorithms
from inaemu.runs.compare import LinkUse, Truth, Verdict, check_results, link_delta, truth_of
from inaemu.sim import tcp
from inaemu.sim.engine import PS_PER_S, SimError, Simulation
from inaemu.sim.ipnet import IpNetwork
from inaemu.sim.network import Direction
from inaemu.topology.model import Topology
from inaemu.topology.routes import FlowRoutes

RECORD_TIMEOUT = 600.0  # seconds a rank's thread waits for a message before it gives up


def gloo_schedule(topo: Topology, workers: Sequence[str]) -> Schedule:
    """The ring gloo runs among `workers` (gloo's ranks, in this order): rank r sends to
    rank r - 1 (the module's docstring)."""
    hosts = tuple(reversed(workers))  # the executor's ring sends to rank + 1
    return Schedule("gloo", hosts, len(hosts), ring_steps(len(hosts))).validate()


def schedule_for(name: str, topo: Topology, workers: Sequence[str], node_ports: str) -> Schedule:
    """The schedule algorithm `name` (`runs.algorithms`: a host collective, or gloo) runs
    among `workers`, proved to all-reduce."""
    facts = algorithms.algorithm(name)
    if facts.kind == "gloo":
        return gloo_schedule(topo, workers)
    if facts.kind != "collective":
        raise SimError(f"{name} is not a host collective")
    return facts.schedule(topo, workers, node_ports)


# ---------------------------------------------------------------------- recording


@dataclass(frozen=True)
class Sent:
    """One message as a rank sent it."""

    src: int
    dst: int
    op: int
    step: int
    transfer: int
    nbytes: int  # on its connection: TcpPeers' frame header and the executor's message


class RecordingChannel:
    """A `MemoryChannel` that records what it sends (a `PeerChannel`)."""

    def __init__(self, inner: MemoryChannel) -> None:
        self.inner = inner
        self.sent: list[Sent] = []

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def n_ranks(self) -> int:
        return self.inner.n_ranks

    def send(self, dst: int, data: Message) -> None:
        h = read_header(data)
        size = FRAME_BYTES + len(memoryview(data).cast("B"))
        self.sent.append(Sent(self.rank, dst, h.op, h.step, h.transfer, size))
        self.inner.send(dst, data)

    def recv(self, src: int, timeout: float) -> bytes:
        return self.inner.recv(src, timeout)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()

    def who(self, rank: int) -> str:
        return self.inner.who(rank)

    def bytes_sent(self) -> list[int]:
        return self.inner.bytes_sent()

    def bytes_received(self) -> list[int]:
        return self.inner.bytes_received()


@dataclass
class Recording:
    """What the executor did on every rank: results, errors, messages (each rank's in the
    order it sent them)."""

    results: list[npt.NDArray[Any] | None]
    errors: dict[int, str]
    messages: list[Sent]
    seconds: float  # wall time of the recording


def record(schedule: Schedule, inputs: Sequence[npt.NDArray[Any]], codec: str) -> Recording:
    """Run `schedule` with the executor on every rank (a thread each) over an in-memory mesh,
    recording every message (the module's docstring)."""
    n = schedule.n_ranks
    if len(inputs) != n:
        raise SimError(f"{schedule.algo}: {len(inputs)} inputs for {n} ranks")
    jit.warm_up(loader(make_schedule_codec(codec), inputs[0].dtype if n else np.float32))
    mesh = MemoryMesh(n)
    channels = [RecordingChannel(c) for c in mesh.channels]
    results: list[npt.NDArray[Any] | None] = [None] * n
    errors: dict[int, str] = {}
    plans = rank_plans(schedule)

    def rank(r: int) -> None:
        try:
            client = ScheduleClient(schedule, r, channels[r], timeout=RECORD_TIMEOUT, plan=plans[r])
            results[r] = np.asarray(client.allreduce(inputs[r], make_schedule_codec(codec)))
        except PeerError as exc:
            errors[r] = str(exc)
        except Exception as exc:  # a codec's own failure (e.g. SumOverflow): reported
            errors[r] = f"{type(exc).__name__}: {exc}"
        finally:
            channels[r].close()  # the others fail at once instead of waiting

    started = time.perf_counter()
    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    messages = [m for c in channels for m in c.sent]
    return Recording(results, errors, messages, time.perf_counter() - started)


# ---------------------------------------------------------------------- the replay


class Replay:
    """Every rank's walk through the recorded steps, driven by messages' arrivals."""

    def __init__(
        self, sim: Simulation, conns: tcp.Connections, n: int, messages: Sequence[Sent]
    ) -> None:
        self.sim, self.conns, self.mesh = sim, conns, conns.mesh
        self.steps = sorted({(m.op, m.step) for m in messages})
        index = {s: i for i, s in enumerate(self.steps)}
        self.sends: list[list[list[tuple[int, int]]]] = [[[] for _ in self.steps] for _ in range(n)]
        self.need = np.zeros((n, len(self.steps)), np.int64)
        self.got = np.zeros_like(self.need)
        self.arriving: dict[int, deque[int]] = {}  # receiving end -> steps of its messages
        for m in messages:
            g = index[(m.op, m.step)]
            out, into = conns.end(m.src, m.dst), conns.end(m.dst, m.src)
            self.sends[m.src][g].append((out, m.nbytes))
            self.need[m.dst, g] += 1
            self.mesh.Expect(into, m.nbytes)
            self.arriving.setdefault(into, deque()).append(g)
        self.at = [0] * n  # each rank's current step
        self.step_end_ps = np.full((n, len(self.steps)), -1, np.int64)  # when each ended
        self.done_ps: list[int | None] = [None] * n
        self.start_ps = 0

    def start(self) -> None:
        self.start_ps = self.sim.now_ps()
        for r in range(len(self.at)):
            self._issue(r, 0)
            self._advance(r)

    def on_message(self, end: int) -> None:
        r = self.conns.owner[end]
        g = self.arriving[end].popleft()
        self.got[r, g] += 1
        if g == self.at[r]:
            self._advance(r)

    def _issue(self, r: int, g: int) -> None:
        if g < len(self.steps):
            for end, nbytes in self.sends[r][g]:
                self.mesh.Send(end, nbytes)

    def _advance(self, r: int) -> None:
        g = self.at[r]
        while g < len(self.steps) and self.got[r, g] == self.need[r, g]:
            self.step_end_ps[r, g] = self.sim.now_ps()
            g += 1
            self.at[r] = g
            self._issue(r, g)
        if g == len(self.steps) and self.done_ps[r] is None:
            self.done_ps[r] = self.sim.now_ps()

    def busy(self) -> bool:
        """Whether a rank has not finished."""
        return any(d is None for d in self.done_ps)

    def describe(self) -> str:
        """How far the ranks are, in words (a progress line's)."""
        done = sum(d is not None for d in self.done_ps)
        return (
            f"{done}/{len(self.done_ps)} ranks done, {int(self.got.sum()):,} of "
            f"{int(self.need.sum()):,} messages arrived"
        )

    def stuck(self, r: int, hosts: Sequence[str], why: str) -> str:
        """Why rank r never finished: the simulation `why` (ended at ...)."""
        g = self.at[r]
        op, step = self.steps[g]
        missing = int(self.need[r, g] - self.got[r, g])
        return (
            f"rank {r} ({hosts[r]}): the simulation {why} in operation {op}, step {step}, with "
            f"{missing} of its {int(self.need[r, g])} messages not arrived"
        )


# ---------------------------------------------------------------------- the outcome


@dataclass
class CollectiveOutcome:
    """What one simulated host collective did."""

    algo: str
    codec: str
    check: str  # exact | bound (`runs.compare.check_results`)
    seconds: float  # simulated: from every connection open to the last rank's end (nan: failed)
    done_at: dict[str, float]  # host -> its last step's end, simulated seconds after the start
    results: dict[str, npt.NDArray[Any] | None]  # host -> its result (None: never finished)
    verdict: Verdict
    errors: dict[str, str]  # host -> why it has no result
    steps: int  # the steps every rank went through (operations x the schedule's steps)
    step_ends: npt.NDArray[np.float64]  # (ranks, steps): when each ended, seconds (nan: never)
    messages: int
    message_bytes: int  # every message on its connection (frame header included)
    uses: list[LinkUse]  # every link's frames and bytes each way during the allreduce
    bandwidths: list[float]  # every link's rate, Mbit/s (`runs.compare.make_row`)
    busy_seconds: dict[Direction, float]  # the time each direction's frames took on the wire
    floor_seconds: float  # the busiest direction's (`busy_seconds`): never above `seconds`
    busiest: Direction | None
    tcp: dict[str, int]  # connections, segments, ACKs, retransmissions, timeouts, ...
    queue_drops: dict[str, int]  # by device (`s1:3`, `h1`): its transmit queue's drops
    lost: dict[str, int]  # by device: frames the links' loss dropped on arrival there
    node_drops: dict[str, int]  # inside nodes: by IPv4, by the traffic-control layer
    buffer_bytes: int
    settings: str  # the TCP settings in words
    wall_seconds: float  # the simulation's
    cpu_seconds: float
    record_seconds: float  # the executor's run (wall)
    events: int
    problems: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return not self.problems


def simulate_schedule(
    sim: Simulation,
    net: IpNetwork,
    schedule: Schedule,
    inputs: Sequence[npt.NDArray[Any]],
    codec: str,
    settings: tcp.TcpSettings,
    *,
    truth: Truth | None = None,
    limit_seconds: float = 60.0,
    on_start: Callable[[Replay], None] | None = None,
) -> CollectiveOutcome:
    """Run `schedule` with `codec` on `inputs` (one per rank) over `net`'s TCP, from the
    instant every connection is open, for at most `limit_seconds` of simulated time; every
    result checked (the module's docstring) against `truth` (default: `truth_of` the
    inputs). `on_start(replay)` is called at that instant (a progress line can ask the replay
    how far it is)."""
    if settings.mtu != net.mtu:
        raise SimError(f"TCP's MTU {settings.mtu}, the network's {net.mtu}: build it with one")
    facts = algorithms.algorithm(
        schedule.algo if schedule.algo in algorithms.ALGORITHMS else "ring"
    )
    if codec not in facts.codecs:
        raise SimError(
            f"{schedule.algo} does not run codec {codec} (it runs {', '.join(facts.codecs)})"
        )
    check = facts.check(codec)
    rec = record(schedule, inputs, codec)
    hosts = schedule.hosts
    buffer = tcp.buffer_for(settings, _bdp_bytes(net, schedule))
    tcp.apply(sim, settings, buffer)

    conns = tcp.Connections(sim)
    pairs = sorted({(max(m.src, m.dst), min(m.src, m.dst)) for m in rec.messages})
    per_host: dict[str, int] = {}
    for hi, lo in pairs:  # the higher rank connects, as in TcpPeers
        conns.add(hi, lo, net.nodes[hosts[hi]], net.nodes[hosts[lo]], net.host_ip(hosts[lo]))
        for r in (hi, lo):
            per_host[hosts[r]] = per_host.get(hosts[r], 0) + 1
    for host, k in per_host.items():
        net.hold_in_flight(host, k * (buffer + settings.mtu) + 16 * settings.mtu)

    replay = Replay(sim, conns, schedule.n_ranks, rec.messages)
    before: list[LinkUse] = []

    def opened() -> None:
        before.extend(net.link_uses())
        replay.start()
        if on_start is not None:
            on_start(replay)

    conns.mesh.SetHandlers(sim.handler(replay.on_message), sim.handler(opened))
    conns.mesh.Open()
    cpu = time.process_time()
    limit_ps = round(limit_seconds * PS_PER_S)
    sim.run(stop_at_ps=limit_ps)
    cpu = time.process_time() - cpu
    # ns-3 does not say whether its events ran out or its stop came: say when it ended
    why = f"ended at {sim.now() * 1e6:,.1f} us simulated (limit {limit_seconds:g} s)"

    errors: dict[str, str] = {}
    results: dict[str, npt.NDArray[Any] | None] = {}
    done_at: dict[str, float] = {}
    for r, host in enumerate(hosts):
        results[host] = None
        done = replay.done_ps[r]
        if r in rec.errors:
            errors[host] = rec.errors[r]
        elif not before:
            open_ends = int(conns.mesh.OpenEnds())
            errors[host] = (
                f"the connections never all opened ({open_ends} of {2 * len(pairs)} ends open)"
            )
        elif done is None:
            errors[host] = replay.stuck(r, hosts, why)
        else:
            results[host] = rec.results[r]
            done_at[host] = (done - replay.start_ps) / PS_PER_S
    if truth is None:
        truth = truth_of(inputs, codec, exact=check == "exact")
    bound = None
    if check == "bound":
        bound = facts.error_bound(codec, schedule.n_ranks, truth.abs_sum, schedule)
    verdict = check_results(results, check=check, exact=truth.exact, sum64=truth.sum64, bound=bound)
    after = net.link_uses()
    uses = link_delta(before, after) if before else link_delta(after, after)
    busy = _busy_seconds(net, uses)
    busiest = max(busy, key=lambda d: busy[d]) if busy else None
    return CollectiveOutcome(
        algo=schedule.algo,
        codec=codec,
        check=check,
        seconds=max(done_at.values()) if len(done_at) == len(hosts) else float("nan"),
        done_at=done_at,
        results=results,
        verdict=verdict,
        errors=errors,
        steps=len(replay.steps),
        step_ends=np.where(
            replay.step_end_ps >= 0, (replay.step_end_ps - replay.start_ps) / PS_PER_S, np.nan
        ),
        messages=len(rec.messages),
        message_bytes=sum(m.nbytes for m in rec.messages),
        uses=uses,
        bandwidths=net.bandwidths_mbit(),
        busy_seconds=busy,
        floor_seconds=busy[busiest] if busiest is not None else 0.0,
        busiest=busiest,
        tcp=conns.counters(),
        queue_drops=net.queue_drops(),
        lost=net.lost(),
        node_drops=net.dropped_in_nodes(),
        buffer_bytes=buffer,
        settings=settings.describe(buffer),
        wall_seconds=sim.wall_seconds,
        cpu_seconds=cpu,
        record_seconds=rec.seconds,
        events=sim.events,
        problems=[f"{h}: {e}" for h, e in errors.items()] + verdict.problems,
    )


def _bdp_bytes(net: IpNetwork, schedule: Schedule) -> float:
    """The largest bandwidth-delay product of a path between two ranks that exchange
    messages, with empty queues: the host link's rate times the round trip of its links'
    delays and one full frame's store and forward on each."""
    routes = FlowRoutes(net.topo, net.spec.node_ports)
    rate = max(net.link_rates)
    pairs = {(t.src, t.dst) for _, t in schedule.transfers()}
    hosts = schedule.hosts
    hops = max((len(routes.links(hosts[a], hosts[b])) for a, b in pairs), default=1)
    frame_ps = (net.mtu + net.FRAME_EXTRA + net.spec.overhead_bytes) * 8 * PS_PER_S / rate
    rtt_ps = 2 * hops * (net.spec.delay_ps + frame_ps)
    return rate / 8 * rtt_ps / PS_PER_S


def _busy_seconds(net: IpNetwork, uses: Sequence[LinkUse]) -> dict[Direction, float]:
    """The time each link direction's frames took on the wire (frames and their per-frame
    overhead at the link's rate), by (from node, to node)."""
    busy: dict[Direction, float] = {}
    for link, use, rate in zip(net.topo.links, uses, net.link_rates, strict=True):
        extra = net.spec.overhead_bytes
        for d, nbytes, frames in (
            ((link.a, link.b), use.a_to_b, use.a_to_b_packets),
            ((link.b, link.a), use.b_to_a, use.b_to_a_packets),
        ):
            busy[d] = busy.get(d, 0.0) + (nbytes + extra * frames) * 8 / rate
    return busy
