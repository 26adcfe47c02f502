"""The simulator's INA path: the project's pipeline on every simulated switch and the project's
client on every simulated host, over ns-3's links; every result checked bit for bit against
the codec on the reference switch. Skipped without ns-3 (`pip install 'inaemu[sim]'`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inaemu.common.wire import FRAME_BYTES, K
from inaemu.hostlib.worker import expected_sum, worker_input
from inaemu.sim.engine import Simulation, ns3_available
from inaemu.sim.ina import InaOutcome, InaSettings, simulate_ina
from inaemu.sim.network import ETHERNET_OVERHEAD, LinkSpec, SimNetwork
from inaemu.topology.builders import from_spec

pytestmark = pytest.mark.skipif(ns3_available() is not None, reason=str(ns3_available()))


def run_ina(
    sim: Simulation,
    spec: str,
    size: int,
    link: LinkSpec,
    codec: str = "fixedpoint",
    **settings: Any,
) -> tuple[InaOutcome, SimNetwork, np.ndarray[Any, Any]]:
    topo = from_spec(spec)
    workers = list(topo.hosts)
    net = SimNetwork(sim, topo, link)
    inputs = [worker_input(7, r, size, codec=codec) for r in range(len(workers))]
    out = simulate_ina(sim, net, workers, inputs, codec, InaSettings(**settings))
    return out, net, expected_sum(7, len(workers), size, codec=codec)


def test_star_sums_exactly_at_the_links_rate(sim: Simulation) -> None:
    """4 workers x 64K float32 through one switch at 100 Gbit/s: every worker gets the
    codec's exact sum, and the allreduce takes at least what the busiest link's frames need
    at its rate, and not much more (the window covers the round trip)."""
    size = 65536
    out, net, exact = run_ina(sim, "star:4", size, LinkSpec())
    assert out.errors == {}
    assert all(r is not None and np.array_equal(r, exact) for r in out.results.values())
    frames = out.client_stats["h1"]["packets_sent"]  # the run check, the codec's phases
    assert frames > size // K and out.client_stats["h1"]["retransmissions"] == 0
    per_frame = (FRAME_BYTES + ETHERNET_OVERHEAD) * 8 / 100e9
    assert frames * per_frame < out.seconds < 2 * frames * per_frame
    sent = net.direction_packets()
    assert sent[("h1", "s1")] == sent[("s1", "h1")] == frames  # a result for each, no more
    s1 = out.switches["s1"]
    assert s1["rx"] == s1["tx"] == 4 * frames and not any(s1["drops"])


def test_a_lossy_leaf_spine_recovers_every_chunk(sim: Simulation) -> None:
    """2% loss on every link of a two-level tree: partials and results are lost on the way
    and recovered by the clients' retransmissions and the switches' replies; the sums stay
    exact, and the frames the links lost are counted where they were lost."""
    out, net, exact = run_ina(sim, "leaf-spine:2x2x2", 8192, LinkSpec(loss=0.02, seed=3))
    assert out.errors == {}
    assert all(r is not None and np.array_equal(r, exact) for r in out.results.values())
    assert sum(net.lost().values()) > 0  # on arrival, at the devices named
    assert sum(s["retransmissions"] for s in out.client_stats.values()) > 0


def test_a_vanished_link_ends_in_each_hosts_error_not_a_hang(sim: Simulation) -> None:
    """Every frame lost on h1's link: no worker can finish; each ends in the client's
    timeout (simulated seconds), and the simulation ends with it."""
    out, _, _ = run_ina(
        sim,
        "star:2",
        1024,
        LinkSpec(link_loss={("h1", "s1"): 1.0}),
        give_up_after=0.01,
    )
    assert set(out.errors) == {"h1", "h2"}
    assert all("no result" in e for e in out.errors.values())
