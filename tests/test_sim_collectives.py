"""Host collectives in simulated time (sim/collectives.py): the executor's real messages,
recorded, replayed over ns-3's TCP on an IPv4 network with the project's routes (or ECMP);
every result checked as the Mininet runner checks it. The recording's tests run anywhere; the
simulations are skipped without ns-3 (`pip install 'inaemu[sim]'`)."""

from __future__ import annotations

import numpy as np
import pytest

from inaemu.collectives.algorithms import algorithm
from inaemu.collectives.check import LinkModel, predict_seconds, simulate
from inaemu.collectives.schedule import Op, Schedule, chunk_bounds
from inaemu.hostlib.collective.executor import HEADER_BYTES
from inaemu.hostlib.collective.tcp_peers import FRAME_BYTES
from inaemu.hostlib.worker import expected_result, worker_input
from inaemu.sim.collectives import (
    CollectiveOutcome,
    gloo_schedule,
    record,
    schedule_for,
    simulate_schedule,
)
from inaemu.sim.engine import PS_PER_S, Ns3, SimError, Simulation, ns3_available
from inaemu.sim.ipnet import IpNetwork
from inaemu.sim.network import LinkSpec
from inaemu.sim.tcp import TcpSettings
from inaemu.topology.builders import from_spec
from inaemu.topology.routes import FlowRoutes

needs_ns3 = pytest.mark.skipif(ns3_available() is not None, reason=str(ns3_available()))


# ---------------------------------------------------------------------- the recording


def test_the_recording_has_every_message_with_its_bytes_on_the_wire() -> None:
    """A ring over 4 ranks, int32: one message per transfer, each TcpPeers' frame header,
    the executor's header and 4 bytes per element of its chunks; every result exact."""
    topo = from_spec("star:4")
    sched = algorithm("ring").schedule(topo)
    size = 1001  # chunks of unequal size
    inputs = [worker_input(3, r, size, codec="int32") for r in range(4)]
    rec = record(sched, inputs, "int32")
    assert rec.errors == {}
    exact = expected_result(inputs, "int32")
    assert all(r is not None and np.array_equal(r, exact) for r in rec.results)
    bounds = chunk_bounds(size, sched.n_chunks)
    want = sorted(
        (t.src, t.dst, i, 4 * (bounds[t.hi - 1][1] - bounds[t.lo][0])) for i, t in sched.transfers()
    )
    got = sorted(
        (m.src, m.dst, m.step, m.nbytes - FRAME_BYTES - HEADER_BYTES) for m in rec.messages
    )
    assert got == want


def test_inceptionns_messages_are_its_compressed_bytes() -> None:
    """INCEPTIONN's sizes depend on the data: the recorded messages are the compressed ones,
    smaller than the raw floats, and each rank's result is within the schedule's bound."""
    topo = from_spec("star:4")
    sched = algorithm("ring").schedule(topo)
    size = 4096
    inputs = [worker_input(5, r, size, codec="inceptionn") for r in range(4)]
    raw = record(sched, inputs, "plain")
    packed = record(sched, inputs, "inceptionn")
    assert raw.errors == packed.errors == {}
    assert len(raw.messages) == len(packed.messages)
    assert sum(m.nbytes for m in packed.messages) < 0.8 * sum(m.nbytes for m in raw.messages)
    assert len({m.nbytes for m in packed.messages}) > 1  # data-dependent
    exact = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    for result in packed.results:
        assert result is not None and np.max(np.abs(result - exact)) < 0.01


def test_gloo_is_a_ring_towards_the_rank_before() -> None:
    """gloo's ring: rank r (the r-th worker as given) sends to rank r - 1; a proved
    all-reduce over 2(n - 1) steps."""
    topo = from_spec("leaf-spine:2x2x2")
    workers = list(topo.hosts)
    sched = gloo_schedule(topo, workers)
    simulate(sched)
    assert len(sched.steps) == 2 * (len(workers) - 1)
    for t in sched.steps[0]:
        src, dst = workers.index(sched.hosts[t.src]), workers.index(sched.hosts[t.dst])
        assert dst == (src - 1) % len(workers)
        assert t.op is Op.REDUCE


def test_an_algorithm_that_is_no_collective_is_refused() -> None:
    with pytest.raises(SimError, match="not a host collective"):
        schedule_for("ina", from_spec("star:4"), ["h1", "h2"], "all")


# ---------------------------------------------------------------------- simulations


def run(
    sim: Simulation,
    spec: str,
    algo: str,
    size: int,
    codec: str = "int32",
    *,
    link: LinkSpec | None = None,
    tcp: TcpSettings | None = None,
    ecmp: bool = False,
    limit_seconds: float = 60.0,
) -> tuple[CollectiveOutcome, IpNetwork, Schedule]:
    topo = from_spec(spec)
    link = link or LinkSpec()
    tcp = tcp or TcpSettings()
    net = IpNetwork(sim, topo, link, mtu=tcp.mtu, ecmp=ecmp)
    sched = schedule_for(algo, topo, list(topo.hosts), link.node_ports)
    inputs = [worker_input(1, r, size, codec=codec) for r in range(sched.n_ranks)]
    out = simulate_schedule(sim, net, sched, inputs, codec, tcp, limit_seconds=limit_seconds)
    return out, net, sched


def model_seconds(net: IpNetwork, sched: Schedule, size_bytes: int) -> float:
    """The checker's alpha-beta time: every step the busiest link's bytes at its rate, plus
    a round trip of the longest path (its delays and a full frame's store and forward)."""
    routes = FlowRoutes(net.topo, net.spec.node_ports)
    links = max(
        len(routes.links(sched.hosts[t.src], sched.hosts[t.dst])) for _, t in sched.transfers()
    )
    rate = net.spec.rate_bps
    rtt = 2 * links * (net.spec.delay_ps / PS_PER_S + 1538 * 8 / rate)
    return predict_seconds(sched, routes, size_bytes, LinkModel(rate / 8, rtt))


def assert_sound(out: CollectiveOutcome) -> None:
    """Nothing dropped inside a node; no retransmission unless something was dropped (the
    buffer-size anomaly: ns-3's traffic-control layer dropping where no counter saw it)."""
    assert out.node_drops == {"ip": 0, "traffic_control": 0}
    if not out.queue_drops and not out.lost:
        assert out.tcp["retransmissions"] == 0 and out.tcp["timeouts"] == 0
        assert out.tcp["segment_bytes"] == out.message_bytes  # each byte sent once


CASES = [
    ("star:4", "ring", "int32"),
    ("leaf-spine:2x2x2", "hd", "fixedpoint"),
    ("bigraph:2x4", "hdrm", "int32"),
    ("torus:3x3", "multitree", "sketch"),
    ("star:4", "ps", "inceptionn"),
    ("leaf-spine:2x2x2", "gloo", "plain"),
    ("torus:4x4", "ring2d", "int32"),
    ("mesh:3x3", "ring2d", "plain"),
    ("torus:4x4", "dtree", "fixedpoint"),
    ("star:5", "dtree", "inceptionn"),
]


@needs_ns3
@pytest.mark.parametrize(("spec", "algo", "codec"), CASES)
def test_each_collective_sums_as_checked_within_its_links_time(
    sim: Simulation, spec: str, algo: str, codec: str
) -> None:
    """Every rank's result checked as the runner checks it (exact, or within the bound);
    the time at least the busiest link's frames at its rate, and within 3 times the
    alpha-beta model (a round trip per step: TCP's slow start and ACK clock on top)."""
    size = 16 * 1024
    out, net, sched = run(sim, spec, algo, size, codec)
    assert out.verified, out.problems
    assert out.check == ("bound" if codec in ("plain", "inceptionn") else "exact")
    assert all(r is not None for r in out.results.values()) and len(out.done_at) == sched.n_ranks
    assert out.floor_seconds <= out.seconds <= 3 * model_seconds(net, sched, 4 * size)
    assert out.steps >= len(sched.steps)
    assert not out.queue_drops and not out.lost
    assert_sound(out)
    sent = {u.a: u.a_to_b for u in out.uses if u.a in net.topo.hosts}
    assert sum(sent.values()) > out.message_bytes  # headers and ACKs on top of the messages


@needs_ns3
def test_multitree_on_a_torus_drives_every_link_of_a_node(sim: Simulation) -> None:
    """Node model `all`: a torus node's host link has its 4 network links' rate; MultiTree
    sends over them at once and beats the ring on the same torus (fewer steps, all links)."""
    out, net, _ = run(sim, "torus:3x3", "multitree", 64 * 1024)
    host_links = [
        r
        for lk, r in zip(net.topo.links, net.link_rates, strict=True)
        if lk.a_port is None or lk.b_port is None
    ]
    assert set(host_links) == {4 * net.spec.rate_bps}
    assert out.verified, out.problems
    sim.close()
    ring_sim = Simulation(sim.ns3)
    try:
        ring, _, _ = run(ring_sim, "torus:3x3", "ring", 64 * 1024)
    finally:
        ring_sim.close()
    assert ring.verified and out.seconds < ring.seconds


@needs_ns3
def test_ring2d_drives_every_link_of_a_torus_node_and_beats_the_ring(ns3: Ns3) -> None:
    """The 2D ring's four streams send on a torus node's four links at once: on torus:4x4
    (16K int32 per node) its 12 steps take less than half the ring's 30, as MultiTree's do."""
    times = {}
    for algo in ("ring2d", "ring", "multitree"):
        sim = Simulation(ns3)
        try:
            out, _, sched = run(sim, "torus:4x4", algo, 16 * 1024)
        finally:
            sim.close()
        assert out.verified, out.problems
        times[algo] = (out.seconds, len(sched.steps))
    assert times["ring2d"][1] == 12 and times["ring"][1] == 30
    assert times["ring2d"][0] < times["ring"][0] / 2
    assert times["multitree"][0] < times["ring"][0] / 2


@needs_ns3
def test_ecmp_hashes_flows_over_the_spines_and_sums_exactly(sim: Simulation) -> None:
    """--ecmp: a leaf has both spines as next hops to another leaf's hosts and picks one per
    flow; the results stay exact."""
    out, net, _ = run(sim, "leaf-spine:2x2x2", "ps", 64 * 1024, ecmp=True)
    assert net.next_hops("l1", "h3") == 2 and net.next_hops("l1", "h1") == 1
    assert out.verified, out.problems
    assert_sound(out)
    up = {u.b: u.a_to_b for u in out.uses if u.a.startswith("l") and u.b.startswith("s")}
    assert len(up) == 4 and sum(up.values()) > 0


@needs_ns3
def test_the_projects_routes_give_one_next_hop(sim: Simulation) -> None:
    _, net, _ = run(sim, "leaf-spine:2x2x2", "ring", 1024)
    assert net.next_hops("l1", "h3") == 1 and net.next_hops("s1", "h3") == 1


@needs_ns3
def test_a_lossy_link_costs_retransmissions_not_results(sim: Simulation) -> None:
    """2 % of the frames lost on h1's link, both ways: TCP recovers them; the sums stay
    exact and the losses are counted where they happened."""
    link = LinkSpec(link_loss={("h1", "s1"): 0.02}, seed=4)
    out, _, _ = run(sim, "star:4", "ring", 64 * 1024, link=link)
    assert out.verified, out.problems
    assert sum(out.lost.values()) > 0 and set(out.lost) <= {"h1", "s1:1"}
    assert out.tcp["retransmissions"] > 0
    assert out.floor_seconds <= out.seconds


@needs_ns3
def test_no_drop_means_no_retransmission_even_with_windows_beyond_the_queues(
    sim: Simulation,
) -> None:
    """The buffer-size anomaly: 4 MiB windows, 100-frame queues, 1 MB messages. Every
    queue is large enough for the one flow it carries at line rate (a host's own data
    waits in its fair queue), so nothing is dropped, nothing retransmitted, and the ring
    runs within 10 % of its links' floor. (With ns-3's flow control on the devices, as the
    prototypes built them, the traffic-control layer drops silently and TCP retransmits.)"""
    out, _, _ = run(
        sim,
        "star:4",
        "ring",
        1024 * 1024,
        link=LinkSpec(queue="100p"),
        tcp=TcpSettings(buffer_bytes=4 << 20),
    )
    assert out.verified, out.problems
    assert not out.queue_drops and not out.lost
    assert_sound(out)
    assert out.seconds < 1.1 * out.floor_seconds


@needs_ns3
def test_jumbo_frames(sim: Simulation) -> None:
    out, _, _ = run(sim, "star:4", "ring", 64 * 1024, tcp=TcpSettings(mtu=9000))
    assert out.verified, out.problems
    assert out.tcp["segment_bytes"] / out.tcp["segments"] > 8000
    assert_sound(out)


@needs_ns3
def test_multitree_s_payload_of_256_bytes(sim: Simulation) -> None:
    """MTU 308: segments of 256 B, MULTITREE's payload; the sum still exact, more frames."""
    out, _, _ = run(sim, "star:4", "ring", 16 * 1024, tcp=TcpSettings(mtu=308))
    assert out.verified, out.problems
    assert out.tcp["segment_bytes"] / out.tcp["segments"] <= 256
    assert_sound(out)


def test_an_mtu_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"MTU 200: use 308 \(segments of 256 B\) to 9000"):
        TcpSettings(mtu=200)


@needs_ns3
def test_a_link_that_loses_everything_ends_in_errors_not_a_hang(sim: Simulation) -> None:
    """h1's link loses every frame: its connections never open, TCP gives up after its
    retries, and every rank says why it has no result."""
    out, _, _ = run(sim, "star:4", "ring", 1024, link=LinkSpec(link_loss={("h1", "s1"): 1.0}))
    assert not out.verified and np.isnan(out.seconds)
    assert set(out.errors) == {"h1", "h2", "h3", "h4"}
    assert all("never all opened" in e for e in out.errors.values())


@needs_ns3
def test_one_rank_is_done_at_once(sim: Simulation) -> None:
    topo = from_spec("star:2")
    net = IpNetwork(sim, topo, LinkSpec(), mtu=1500)
    sched = schedule_for("ring", topo, ["h2"], "all")
    x = worker_input(1, 0, 100, codec="int32")
    out = simulate_schedule(sim, net, sched, [x], "int32", TcpSettings())
    assert out.verified and out.seconds == 0.0 and out.messages == 0
    assert out.results["h2"] is not None and np.array_equal(out.results["h2"], x)


@needs_ns3
def test_a_run_past_its_limit_says_where_each_rank_stood(sim: Simulation) -> None:
    """Stopped at 20 us of simulated time, mid-allreduce: every rank says which step it was
    in and how many of its messages had not arrived."""
    out, _, _ = run(sim, "star:4", "ring", 64 * 1024, limit_seconds=20e-6)
    assert not out.verified and set(out.errors) == {"h1", "h2", "h3", "h4"}
    for e in out.errors.values():
        assert "us simulated (limit 2e-05 s) in operation 0, step" in e, e
        assert "messages not arrived" in e


@needs_ns3
def test_bad_settings_are_refused(sim: Simulation) -> None:
    with pytest.raises(ValueError, match="MTU 12345"):
        TcpSettings(mtu=12345)
    topo = from_spec("star:4")
    net = IpNetwork(sim, topo, LinkSpec(), mtu=1500)
    sched = gloo_schedule(topo, list(topo.hosts))
    inputs = [worker_input(1, r, 64) for r in range(4)]
    with pytest.raises(SimError, match="does not run codec fixedpoint"):
        simulate_schedule(sim, net, sched, inputs, "fixedpoint", TcpSettings())
    with pytest.raises(SimError, match="MTU 9000"):
        simulate_schedule(sim, net, sched, inputs, "int32", TcpSettings(mtu=9000))
