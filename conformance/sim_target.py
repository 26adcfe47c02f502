"""The simulated switch as a conformance target: the cases run through the simulator's switches
(`sim.switches.SimSwitch`: the project's pipeline, compiled or the reference) and ns-3's links,
so that the switch `inaemu sim` simulates is the one the cases pin on the softswitch and bmv2.

Every port a case uses is cabled, by a 100 Gbit/s, 1 us point-to-point link, to a tester node
that sends the case's packets into it and records what comes out; a multi-switch case's
cables are links between the switches' ports. A packet is sent at the current simulated time
and the simulation runs until no event is left (the network is quiet), as the other runners
wait for quiet; frames out of a port are compared in the order they arrived. A `lose` line
makes the sender's next frame out of that port vanish on its cable (counted in its `port_tx`,
never carried), as the in-process runner does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from inaemu.conformance.network import At, Lose, NetworkCase, Send, compare_network
from inaemu.conformance.softswitch_target import SoftswitchTarget
from inaemu.conformance.stf import (
    CaseResult,
    CheckCounter,
    Expect,
    McNodeCreate,
    Packet,
    StfCase,
    compare,
    run_setup,
)
from inaemu.sim.engine import Simulation, load
from inaemu.sim.network import LinkSpec, SimNetwork
from inaemu.sim.switches import FrameGroup, SimSwitch
from inaemu.topology.model import Topology

SINGLE = "s1"  # the switch of a one-switch case
CABLE = LinkSpec(rate_bps=100e9, delay_ps=1_000_000, queue="100000p", overhead_bytes=0)


def _tester(at: At) -> str:
    return f"t-{at.switch}-{at.port}"


@dataclass
class SimCaseNetwork:
    """A case's switches, cables and testers in one simulation."""

    sim: Simulation
    switches: dict[str, SimSwitch]
    testers: dict[At, int]  # a host port -> its tester's index in `out`
    out: list[list[bytes]] = field(default_factory=list)  # frames each tester received
    group: FrameGroup | None = None

    def send(self, at: At, data: bytes) -> None:
        """`data` into port `at` now, and the simulation until it is quiet."""
        import numpy as np

        assert self.group is not None
        row = np.frombuffer(data, np.uint8).copy()
        self.group.group.SendRows(row, 1, len(row), self.testers[at])
        self.sim.run()

    def emitted(self) -> dict[At, list[bytes]]:
        return {at: self.out[i] for at, i in self.testers.items() if self.out[i]}


def build(
    sim: Simulation,
    switches: Iterable[str],
    links: dict[At, At],
    host_ports: Iterable[At],
    dataplane: str,
) -> SimCaseNetwork:
    """The simulated network of a case (`links`: both directions)."""
    names = list(switches)
    topo = Topology()
    for name in names:
        topo.add_switch(name)
    done: set[At] = set()
    for a, b in links.items():
        if a not in done:
            topo.link(a.switch, b.switch, a.port, b.port)
            done |= {a, b}
    ports = sorted(set(host_ports) - set(links), key=lambda at: (at.switch, at.port))
    for i, at in enumerate(ports):
        tester = _tester(at)
        topo.add_host(tester, f"10.9.{i // 250}.{i % 250 + 1}", f"02:00:00:09:00:{i % 256:02x}")
        topo.link(tester, at.switch, None, at.port)
    net = SimNetwork(sim, topo, CABLE)
    sims = {
        name: SimSwitch(sim, name, net.switch_devices(name), dataplane=dataplane) for name in names
    }
    case_net = SimCaseNetwork(sim, sims, {at: i for i, at in enumerate(ports)})
    case_net.out = [[] for _ in ports]
    group = FrameGroup(sim)
    for at, i in case_net.testers.items():
        group.add_port(i, net.host_device(_tester(at)))

    def received() -> None:
        batch = group.received()
        for i in range(batch.n):
            case_net.out[int(batch.port[i])].append(batch.frame(i))

    group.group.SetHandler(sim.handler(received))
    case_net.group = group
    return case_net


def _ports(case: StfCase) -> set[int]:
    """Every port a one-switch case sends into, expects from, or multicasts to."""
    out: set[int] = set()
    for cmd in case.commands:
        if isinstance(cmd, Packet | Expect):
            out.add(cmd.port)
        elif isinstance(cmd, McNodeCreate):
            out.update(cmd.ports)
    return out


def run_sim(case: StfCase | NetworkCase, dataplane: str = "fast") -> CaseResult:
    """Run a case (one switch or several) on simulated switches and links."""
    sim = Simulation(load())
    try:
        if isinstance(case, NetworkCase):
            return _network(sim, case, dataplane)
        return _single(sim, case, dataplane)
    finally:
        sim.close()


def _single(sim: Simulation, case: StfCase, dataplane: str) -> CaseResult:
    net = build(sim, [SINGLE], {}, [At(SINGLE, p) for p in _ports(case)], dataplane)
    target = SoftswitchTarget(net.switches[SINGLE].pipeline)
    counters: dict[tuple[str, int], tuple[int, int]] = {}
    packets_in = 0
    for cmd in case.commands:
        if isinstance(cmd, Packet):
            packets_in += 1
            net.send(At(SINGLE, cmd.port), cmd.data)
        elif isinstance(cmd, CheckCounter):
            counters[(cmd.counter, cmd.index)] = target.read_counter(cmd.counter, cmd.index)
        elif not isinstance(cmd, Expect):
            run_setup(StfCase(case.name, [cmd]), target)
    emitted = {at.port: frames for at, frames in net.emitted().items()}
    return compare(case, emitted, counters, packets_in)


def _network(sim: Simulation, case: NetworkCase, dataplane: str) -> CaseResult:
    hosts = set(case.expects)
    hosts |= {step.at for step in case.steps if isinstance(step, Send)}
    for sw, setup in case.setups.items():
        hosts |= {At(sw, p) for p in _ports(setup)}
    net = build(sim, case.setups, case.links, hosts, dataplane)
    targets = {sw: SoftswitchTarget(s.pipeline) for sw, s in net.switches.items()}
    for sw, setup in case.setups.items():
        run_setup(setup, targets[sw])
    losses: list[At] = []
    for step in case.steps:
        if isinstance(step, Lose):
            net.switches[step.at.switch].frames.group.Lose(step.at.port)
            losses.append(step.at)
        elif isinstance(step, Send):
            net.send(step.at, step.data)
    counters = {
        (c.switch, c.check.counter, c.check.index): targets[c.switch].read_counter(
            c.check.counter, c.check.index
        )
        for c in case.checks
    }
    unused = [
        f"lose {at}: no frame left that port to lose ({_pending(net, at)} unused)"
        for at in sorted(set(losses))
        if _pending(net, at)
    ]
    return compare_network(case, net.emitted(), counters, unused)


def _pending(net: SimCaseNetwork, at: At) -> int:
    lose = net.switches[at.switch].frames.group.lose_next
    return int(lose[at.port]) if at.port < len(lose) else 0
