"""Counter reads turned into a report: per job and port, drops by reason, events, packets per
switch and port, and per link between switches, each way.

bmv2's P4Runtime server cannot read registers, so statistics come from counters only:
`ina_child_stats` (direct, per job, tree and child: ingress port and UDP source port),
`ina_drops`, `ina_events`, `port_rx`, `port_tx`. A link's traffic comes from the topology and
the port counters of its two ends: what one end sent (`port_tx`) and what the other counted
arriving (`port_rx`, before loss injection drops anything); the two differ by what the link
lost on the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inaemu.common.wire import worker_udp_port
from inaemu.controller.jobs import JobRecord
from inaemu.p4.constants import DropReason, Event
from inaemu.topology.model import Topology


@dataclass
class SwitchCounters:
    switch: str
    indexed: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # alias, index
    # (job, tree, ingress port, UDP source port) -> (packets, bytes): one per child
    children: dict[tuple[int, int, int, int], tuple[int, int]] = field(default_factory=dict)

    def packets(self, counter: str, index: int) -> int:
        return self.indexed.get((counter, index), (0, 0))[0]

    def drops(self) -> dict[str, int]:
        return {r.name: n for r in DropReason if r and (n := self.packets("ina_drops", r))}

    def events(self) -> dict[str, int]:
        return {e.name: n for e in Event if (n := self.packets("ina_events", e))}


@dataclass(frozen=True)
class LinkTraffic:
    """Packets on one link between switches a and b, each way."""

    a: str
    a_port: int
    b: str
    b_port: int
    a_sent: int  # a's port_tx on a_port: packets towards b
    b_received: int  # b's port_rx on b_port
    b_sent: int
    a_received: int


@dataclass
class StatsReport:
    topology: Topology
    jobs: dict[int, JobRecord]
    switches: dict[str, SwitchCounters] = field(default_factory=dict)

    def job_ports(self, job_id: int) -> list[tuple[str, int, str, int, int]]:
        """(switch, port, what is behind it, packets, bytes) for the job's children: a host,
        one of a host's ranks (`m1 rank 1`), or a switch's port (`s2:3`)."""
        rows = []
        for sw, counters in sorted(self.switches.items()):
            per_child: dict[tuple[int, int], tuple[int, int]] = {}
            for (job, _tree, port, udp), (p, b) in counters.children.items():
                if job == job_id:
                    op, ob = per_child.get((port, udp), (0, 0))
                    per_child[(port, udp)] = (op + p, ob + b)
            for (port, udp), (p, b) in sorted(per_child.items()):
                rows.append((sw, port, self._peer(sw, port, udp), p, b))
        return rows

    def _peer(self, switch: str, port: int, udp: int) -> str:
        for name, host in self.topology.hosts.items():
            if self.topology.host_attachment(name) == (switch, port):
                if host.ranks == 1:
                    return name
                return f"{name} rank {udp - worker_udp_port(host.udp_port, 0)}"
        peer = self.topology.switch_neighbours(switch).get(port)
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    def switch_packets(self, switch: str) -> tuple[int, int]:
        """(packets in, packets out) of a switch over all its ports."""
        c = self.switches[switch]
        rx = sum(n for (name, _), (n, _) in c.indexed.items() if name == "port_rx")
        tx = sum(n for (name, _), (n, _) in c.indexed.items() if name == "port_tx")
        return rx, tx

    def links(self) -> list[LinkTraffic]:
        """Every link of the topology between two switches whose counters were read."""
        out = []
        for lk in self.topology.links:
            if lk.a_port is None or lk.b_port is None:
                continue
            a, b = self.switches.get(lk.a), self.switches.get(lk.b)
            if a is None or b is None:
                continue
            out.append(
                LinkTraffic(
                    lk.a,
                    lk.a_port,
                    lk.b,
                    lk.b_port,
                    a.packets("port_tx", lk.a_port),
                    b.packets("port_rx", lk.b_port),
                    b.packets("port_tx", lk.b_port),
                    a.packets("port_rx", lk.a_port),
                )
            )
        return out

    def render(self) -> str:
        lines: list[str] = []
        for job_id in sorted(self.jobs):
            lines.append(f"job {job_id}: packets in from each child")
            rows = self.job_ports(job_id)
            w = max([10, *(len(peer) for _, _, peer, _, _ in rows)])
            lines.append(
                f"  {'switch':<8} {'port':>4}  {'from':<{w}} {'packets':>10} {'bytes':>12}"
            )
            for sw, port, peer, p, b in rows:
                lines.append(f"  {sw:<8} {port:>4}  {peer:<{w}} {p:>10} {b:>12}")
        for name, c in sorted(self.switches.items()):
            drops = c.drops()
            rx, tx = self.switch_packets(name)
            lines.append(
                f"switch {name}: packets in {rx}, out {tx}; drops "
                + (", ".join(f"{k.lower()} {v}" for k, v in drops.items()) or "none")
            )
            events = c.events()
            if events:
                lines.append(
                    "  events: " + ", ".join(f"{k.lower()} {v}" for k, v in events.items())
                )
            ports = sorted({i for (n, i) in c.indexed if n in ("port_rx", "port_tx")})
            for port in ports:
                rx, tx = c.packets("port_rx", port), c.packets("port_tx", port)
                if rx or tx:
                    lines.append(f"  port {port:>3}: rx {rx:>9}  tx {tx:>9}")
        links = self.links()
        if links:
            lines.append("links between switches: packets each way (sent by one end, counted in")
            lines.append("  at the other; a difference is what the link lost)")
            ends = [(f"{lk.a}:{lk.a_port}", f"{lk.b}:{lk.b_port}") for lk in links]
            width = max(len(e) for pair in ends for e in pair)
            for lk, (one, other) in zip(links, ends, strict=True):
                lines.append(
                    f"  {one:>{width}} -> {other:<{width}} {lk.a_sent:>9} ({lk.b_received} in)"
                    f"   {other:>{width}} -> {one:<{width}} {lk.b_sent:>9} ({lk.a_received} in)"
                )
        return "\n".join(lines)
