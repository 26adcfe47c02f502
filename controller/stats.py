"""Counter reads turned into a report: per job and port, drops by reason, events, port totals.

bmv2's P4Runtime server cannot read registers, so statistics come from counters only:
`ina_child_stats` (direct, per job, tree and ingress port), `ina_drops`, `ina_events`,
`port_rx`, `port_tx`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inaemu.controller.jobs import JobRecord
from inaemu.controller.topology import Topology
from inaemu.p4.constants import DropReason, Event


@dataclass
class SwitchCounters:
    switch: str
    indexed: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # alias, index
    children: dict[tuple[int, int, int], tuple[int, int]] = field(default_factory=dict)

    def packets(self, counter: str, index: int) -> int:
        return self.indexed.get((counter, index), (0, 0))[0]

    def drops(self) -> dict[str, int]:
        return {r.name: n for r in DropReason if r and (n := self.packets("ina_drops", r))}

    def events(self) -> dict[str, int]:
        return {e.name: n for e in Event if (n := self.packets("ina_events", e))}


@dataclass
class StatsReport:
    topology: Topology
    jobs: dict[int, JobRecord]
    switches: dict[str, SwitchCounters] = field(default_factory=dict)

    def job_ports(self, job_id: int) -> list[tuple[str, int, str, int, int]]:
        """(switch, port, what is behind it, packets, bytes) for the job's children."""
        record = self.jobs.get(job_id)
        rows = []
        for sw, counters in sorted(self.switches.items()):
            per_port: dict[int, tuple[int, int]] = {}
            for (job, _tree, port), (p, b) in counters.children.items():
                if job == job_id:
                    op, ob = per_port.get(port, (0, 0))
                    per_port[port] = (op + p, ob + b)
            for port, (p, b) in sorted(per_port.items()):
                peer = self._peer(sw, port, record)
                rows.append((sw, port, peer, p, b))
        return rows

    def _peer(self, switch: str, port: int, record: JobRecord | None) -> str:
        for host in self.topology.hosts:
            if self.topology.host_attachment(host) == (switch, port):
                return host
        peer = self.topology.switch_neighbours(switch).get(port)
        return f"{peer[0]}:{peer[1]}" if peer else "?"

    def render(self) -> str:
        lines: list[str] = []
        for job_id in sorted(self.jobs):
            lines.append(f"job {job_id}: packets in from each child")
            lines.append(f"  {'switch':<8} {'port':>4}  {'from':<10} {'packets':>10} {'bytes':>12}")
            for sw, port, peer, p, b in self.job_ports(job_id):
                lines.append(f"  {sw:<8} {port:>4}  {peer:<10} {p:>10} {b:>12}")
        for name, c in sorted(self.switches.items()):
            drops = c.drops()
            lines.append(
                f"switch {name}: drops "
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
        return "\n".join(lines)
