"""Topologies: hosts, switches and links, in a `topology.json` like p4lang/tutorials', plus
Python builders (star, leaf-spine, fat-tree).

    {
      "hosts":    {"h1": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:01:01", "role": "worker"}},
      "switches": {"s1": {"grpc": "127.0.0.1:9559", "device_id": 1, "role": "root"}},
      "links":    [["h1", "s1-p1"], ["s1-p2", "s2-p1"]]
    }

A link end is a host name or `<switch>-p<port>`; a third element (e.g. "bw=10") is kept as link
options (Mininet uses them). `Topology.validate()` refuses anything inconsistent with a message
that names the offending element and says what to fix.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inaemu.hostlib.wire import ip_int, mac_bytes

_END = re.compile(r"^(?P<node>[A-Za-z_][\w.]*)-p(?P<port>\d+)$")
MAX_PORT = 510  # 511 is bmv2's drop port


class TopologyError(ValueError):
    """A topology that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Host:
    name: str
    ip: str  # without prefix length
    mac: str
    prefix_len: int = 24
    role: str = "worker"


@dataclass(frozen=True)
class Switch:
    name: str
    grpc: str = ""
    device_id: int = 1
    role: str = ""
    # the address workers send INA packets to (needs an ARP entry on Mininet hosts)
    agg_ip: str = "10.0.0.254"
    agg_mac: str = "02:00:00:00:00:fe"
    # the device config pushed with the P4Info: bmv2's JSON (p4/build/ina.json) for
    # simple_switch_grpc; empty for the softswitch, which takes any
    program: str = ""


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int | None  # None: a host
    b: str
    b_port: int | None
    options: str = ""


@dataclass
class Topology:
    hosts: dict[str, Host] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    # ------------------------------------------------------------------ building

    def add_host(self, name: str, ip: str, mac: str, *, role: str = "worker") -> Host:
        addr, _, plen = ip.partition("/")
        host = Host(name, addr, mac, int(plen) if plen else 24, role)
        self.hosts[name] = host
        return host

    def add_switch(self, name: str, **kwargs: Any) -> Switch:
        self.switches[name] = Switch(name, **kwargs)
        return self.switches[name]

    def link(
        self,
        a: str,
        b: str,
        a_port: int | None = None,
        b_port: int | None = None,
        options: str = "",
    ) -> Link:
        """Connect a and b; a switch end without a port gets its next free port (from 1)."""
        if a in self.switches and a_port is None:
            a_port = self._next_port(a)
        if b in self.switches and b_port is None:
            b_port = self._next_port(b) if b != a else self._next_port(b) + 1
        link = Link(a, a_port, b, b_port, options)
        self.links.append(link)
        return link

    def _next_port(self, switch: str) -> int:
        used = {p for _, p in self._switch_ends() if _ == switch}
        return next(p for p in range(1, MAX_PORT + 1) if p not in used)

    def _switch_ends(self) -> list[tuple[str, int]]:
        ends = []
        for lk in self.links:
            if lk.a_port is not None:
                ends.append((lk.a, lk.a_port))
            if lk.b_port is not None:
                ends.append((lk.b, lk.b_port))
        return ends

    # ------------------------------------------------------------------ queries

    def host_attachment(self, host: str) -> tuple[str, int]:
        """(switch, port) the host is plugged into."""
        for lk in self.links:
            if lk.a == host and lk.b in self.switches and lk.b_port is not None:
                return lk.b, lk.b_port
            if lk.b == host and lk.a in self.switches and lk.a_port is not None:
                return lk.a, lk.a_port
        raise TopologyError(f"host {host!r} is not linked to any switch")

    def switch_neighbours(self, switch: str) -> dict[int, tuple[str, int]]:
        """port -> (peer switch, peer port) for the switch-to-switch links of `switch`."""
        out: dict[int, tuple[str, int]] = {}
        for lk in self.links:
            if lk.a_port is None or lk.b_port is None:
                continue
            if lk.a == switch:
                out[lk.a_port] = (lk.b, lk.b_port)
            if lk.b == switch:
                out[lk.b_port] = (lk.a, lk.a_port)
        return out

    def bfs_parents(self, root: str) -> dict[str, tuple[str, int, int] | None]:
        """Shortest-path tree of switches from `root`: switch -> (parent, port on switch
        towards parent, parent's port towards switch); root -> None. Ties go to the lowest
        port, so every run builds the same tree."""
        parents: dict[str, tuple[str, int, int] | None] = {root: None}
        queue = deque([root])
        while queue:
            sw = queue.popleft()
            for port, (peer, peer_port) in sorted(self.switch_neighbours(sw).items()):
                if peer not in parents:
                    parents[peer] = (sw, peer_port, port)
                    queue.append(peer)
        return parents

    # ------------------------------------------------------------------ validation

    def validate(self) -> Topology:
        if not self.switches:
            raise TopologyError("the topology has no switches")
        for h in self.hosts.values():
            try:
                ip_int(h.ip)
                mac_bytes(h.mac)
            except ValueError as exc:
                raise TopologyError(f"host {h.name!r}: {exc}") from None
            if not 0 <= h.prefix_len <= 32:
                raise TopologyError(f"host {h.name!r}: prefix length {h.prefix_len} not in 0..32")
        for name in self.hosts.keys() & self.switches.keys():
            raise TopologyError(f"{name!r} is both a host and a switch: rename one")
        seen_ips: dict[str, str] = {}
        for h in self.hosts.values():
            if h.ip in seen_ips:
                raise TopologyError(f"hosts {seen_ips[h.ip]!r} and {h.name!r} share IP {h.ip}")
            seen_ips[h.ip] = h.name
        used: dict[tuple[str, int], int] = {}
        host_links: dict[str, int] = {}
        for i, lk in enumerate(self.links):
            for node, port in ((lk.a, lk.a_port), (lk.b, lk.b_port)):
                if node not in self.hosts and node not in self.switches:
                    raise TopologyError(f"link #{i} {lk.a}-{lk.b}: unknown node {node!r}")
                if node in self.switches:
                    if port is None:
                        raise TopologyError(
                            f"link #{i}: switch end {node!r} needs a port: write '{node}-pN'"
                        )
                    if not 0 <= port <= MAX_PORT:
                        raise TopologyError(f"link #{i}: port {port} of {node!r} not in 0..510")
                    if (node, port) in used:
                        raise TopologyError(
                            f"port {port} of switch {node!r} is used by links "
                            f"#{used[(node, port)]} and #{i}"
                        )
                    used[(node, port)] = i
                else:
                    if port is not None:
                        raise TopologyError(
                            f"link #{i}: host {node!r} has no ports; drop '-p{port}'"
                        )
                    host_links[node] = host_links.get(node, 0) + 1
            if lk.a in self.hosts and lk.b in self.hosts:
                raise TopologyError(f"link #{i}: hosts {lk.a!r} and {lk.b!r} must meet at a switch")
        for name in self.hosts:
            if host_links.get(name, 0) != 1:
                raise TopologyError(
                    f"host {name!r} has {host_links.get(name, 0)} links; "
                    "each host needs exactly one"
                )
        return self

    # ------------------------------------------------------------------ json

    def to_json(self) -> dict[str, Any]:
        def end(node: str, port: int | None) -> str:
            return node if port is None else f"{node}-p{port}"

        return {
            "hosts": {
                h.name: {"ip": f"{h.ip}/{h.prefix_len}", "mac": h.mac, "role": h.role}
                for h in self.hosts.values()
            },
            "switches": {
                s.name: {
                    k: v
                    for k, v in (
                        ("grpc", s.grpc),
                        ("device_id", s.device_id),
                        ("role", s.role),
                        ("agg_ip", s.agg_ip),
                        ("agg_mac", s.agg_mac),
                        ("program", s.program),
                    )
                    if v != ""
                }
                for s in self.switches.values()
            },
            "links": [
                [end(lk.a, lk.a_port), end(lk.b, lk.b_port), *([lk.options] if lk.options else [])]
                for lk in self.links
            ],
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "topology") -> Topology:
        if not isinstance(data, dict):
            raise TopologyError(f"{source}: expected an object with hosts, switches and links")
        unknown = set(data) - {"hosts", "switches", "links"}
        if unknown:
            raise TopologyError(
                f"{source}: unknown keys {sorted(unknown)}; expected hosts, switches, links"
            )
        topo = cls()
        for name, spec in (data.get("hosts") or {}).items():
            if not isinstance(spec, dict) or "ip" not in spec or "mac" not in spec:
                raise TopologyError(f'{source}: host {name!r} needs "ip" and "mac"')
            try:
                topo.add_host(
                    name, str(spec["ip"]), str(spec["mac"]), role=str(spec.get("role", "worker"))
                )
            except ValueError as exc:
                raise TopologyError(f"{source}: host {name!r}: {exc}") from None
        for name, spec in (data.get("switches") or {}).items():
            spec = spec or {}
            if not isinstance(spec, dict):
                raise TopologyError(f"{source}: switch {name!r} must be an object")
            allowed = {"grpc", "device_id", "role", "agg_ip", "agg_mac", "runtime_json", "program"}
            extra = set(spec) - allowed
            if extra:
                raise TopologyError(f"{source}: switch {name!r}: unknown keys {sorted(extra)}")
            topo.add_switch(
                name,
                **{
                    k: spec[k]
                    for k in spec
                    if k in {"grpc", "device_id", "role", "agg_ip", "agg_mac", "program"}
                },
            )
        for i, raw in enumerate(data.get("links") or []):
            if not isinstance(raw, list) or len(raw) not in (2, 3):
                raise TopologyError(f"{source}: link #{i} must be [end, end] or [end, end, opts]")
            ends = []
            for e in raw[:2]:
                m = _END.match(str(e))
                ends.append(
                    (m["node"], int(m["port"]))
                    if m and m["node"] in topo.switches
                    else (str(e), None)
                )
            (a, ap), (b, bp) = ends
            topo.links.append(Link(a, ap, b, bp, str(raw[2]) if len(raw) == 3 else ""))
        return topo.validate()

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TopologyError(f"{path}: no such topology file") from None
        except json.JSONDecodeError as exc:
            raise TopologyError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_json(data, source=str(path))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


# ---------------------------------------------------------------------- builders


def _host_addr(i: int) -> tuple[str, str]:
    return f"10.0.{i // 250}.{i % 250 + 1}/16", f"08:00:00:00:{i // 256:02x}:{i % 256:02x}"


def star(n_hosts: int, *, grpc: str = "127.0.0.1:9559") -> Topology:
    """One switch s1, hosts h1..hN on ports 1..N."""
    topo = Topology()
    topo.add_switch("s1", grpc=grpc, role="root")
    for i in range(n_hosts):
        ip, mac = _host_addr(i)
        topo.add_host(f"h{i + 1}", ip, mac)
        topo.link(f"h{i + 1}", "s1", b_port=i + 1)
    return topo.validate()


def leaf_spine(
    n_leaves: int, n_spines: int, hosts_per_leaf: int, *, grpc_base: int = 9559
) -> Topology:
    """Leaves l1.., spines s1..; hosts on leaf ports 1..H, uplinks to spine j on port H + j."""
    topo = Topology()
    dev = 1
    for j in range(n_spines):
        topo.add_switch(
            f"s{j + 1}", grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="spine"
        )
        dev += 1
    k = 0
    for i in range(n_leaves):
        leaf = f"l{i + 1}"
        topo.add_switch(leaf, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role="leaf")
        dev += 1
        for _ in range(hosts_per_leaf):
            ip, mac = _host_addr(k)
            topo.add_host(f"h{k + 1}", ip, mac)
            topo.link(f"h{k + 1}", leaf)
            k += 1
        for j in range(n_spines):
            topo.link(leaf, f"s{j + 1}", a_port=hosts_per_leaf + j + 1, b_port=i + 1)
    return topo.validate()


def fat_tree(k: int, *, grpc_base: int = 9559) -> Topology:
    """The k-ary fat tree (k even): (k/2)^2 cores, k pods of k/2 aggregation and k/2 edge
    switches, k/2 hosts per edge switch (k^3/4 hosts)."""
    if k < 2 or k % 2:
        raise TopologyError(f"a fat tree needs an even k >= 2, got {k}")
    half = k // 2
    topo = Topology()
    dev = 1

    def sw(name: str, role: str) -> None:
        nonlocal dev
        topo.add_switch(name, grpc=f"127.0.0.1:{grpc_base + dev - 1}", device_id=dev, role=role)
        dev += 1

    for c in range(half * half):
        sw(f"c{c + 1}", "core")
    h = 0
    for p in range(k):
        for a in range(half):
            sw(f"a{p + 1}_{a + 1}", "aggregation")
        for e in range(half):
            edge = f"e{p + 1}_{e + 1}"
            sw(edge, "edge")
            for _ in range(half):
                ip, mac = _host_addr(h)
                topo.add_host(f"h{h + 1}", ip, mac)
                topo.link(f"h{h + 1}", edge)
                h += 1
            for a in range(half):  # edge uplinks on ports half+1..k, agg downlinks 1..half
                topo.link(edge, f"a{p + 1}_{a + 1}", a_port=half + a + 1, b_port=e + 1)
        for a in range(half):
            for j in range(half):  # agg a connects to cores a*half + j on its ports half+1..k
                core = a * half + j
                topo.link(f"a{p + 1}_{a + 1}", f"c{core + 1}", a_port=half + j + 1, b_port=p + 1)
    return topo.validate()
