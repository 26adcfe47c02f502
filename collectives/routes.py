"""The directed links a host-to-host flow crosses: the path ordinary traffic takes
(`inaemu.controller.jobs.Router`, the same one `route_plans` installs), host links included.

A link is a (node, node) pair in the direction of travel: a flow from h1 on s1 to h2 on s2
crosses ("h1", "s1"), ("s1", "s2"), ("s2", "h2").

In a torus or a mesh (switch role `torus` or `mesh`) every switch is its host's own router,
as in MULTITREE's direct networks: the host and its switch are one node, and the link between
them is the node's internal port, with the bandwidth of all its network ports. Such a host link
cannot be contended, so `contended_links` leaves it out; in every other topology (star,
leaf-spine, fat tree, BiGraph) a host link is the host's one NIC, and two flows out of (or into)
one host in one step contend on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from inaemu.controller.jobs import Router
from inaemu.controller.topology import Topology, TopologyError

Link = tuple[str, str]

# roles of switches that are their host's own router (docs/topologies.md)
DIRECT_ROLES = frozenset({"torus", "mesh"})


class RouteError(TopologyError):
    """Two hosts that no path joins, or a name that is not a host."""


class FlowRoutes:
    """Paths of host-to-host flows on one topology, computed once per pair."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.router = Router(topo)
        self.adjacency = topo.adjacency()
        self.homes: dict[str, str] = {}
        self._links: dict[tuple[str, str], tuple[Link, ...]] = {}
        self._contended: dict[tuple[str, str], tuple[Link, ...]] = {}

    def home(self, host: str) -> str:
        """The switch `host` is plugged into."""
        if host not in self.homes:
            if host not in self.topo.hosts:
                raise RouteError(f"{host!r} is not a host of the topology")
            self.homes[host] = self.topo.host_attachment(host)[0]
        return self.homes[host]

    def links(self, a: str, b: str) -> tuple[Link, ...]:
        """Every directed link a flow from host `a` to host `b` crosses, in order, host links
        included; `RouteError` if no path joins them."""
        key = (a, b)
        if key not in self._links:
            if a == b:
                raise RouteError(f"a flow from {a!r} to itself has no route")
            home_a, home_b = self.home(a), self.home(b)
            path: list[Link] = [(a, home_a)]
            sw = home_a
            for _ in range(len(self.topo.switches)):  # a shortest path: fewer hops
                if sw == home_b:
                    break
                port = self.router.port_towards(sw, home_b)
                if port is None:
                    raise RouteError(f"no path from {a} (on {home_a}) to {b} (on {home_b})")
                peer = self.adjacency[sw][port][0]
                path.append((sw, peer))
                sw = peer
            else:
                raise RouteError(f"the route from {a} to {b} does not reach {home_b}")
            path.append((home_b, b))
            self._links[key] = tuple(path)
        return self._links[key]

    def contended_links(self, a: str, b: str) -> tuple[Link, ...]:
        """`links(a, b)` without the host links of torus and mesh nodes (a node's internal
        port: see the module's docstring): the links on which flows can contend."""
        key = (a, b)
        if key not in self._contended:
            self._contended[key] = tuple(lk for lk in self.links(a, b) if not self.internal(lk))
        return self._contended[key]

    def internal(self, link: Link) -> bool:
        """Whether `link` joins a host to the switch that is its own router (torus, mesh)."""
        a, b = link
        host, sw = (a, b) if a in self.topo.hosts else (b, a)
        if host not in self.topo.hosts:
            return False
        return self.topo.switches[sw].role in DIRECT_ROLES

    def hops(self, a: str, b: str) -> int:
        """Switch-to-switch links between hosts `a` and `b`."""
        return len(self.links(a, b)) - 2


def host_order(topo: Topology) -> list[str]:
    """The topology's hosts, the default rank order: as the topology lists them (the
    builders list them switch by switch, in port order)."""
    return list(topo.hosts)


def worker_hosts(
    topo: Topology, hosts: Sequence[str] | None, default: Sequence[str]
) -> tuple[str, ...]:
    """The workers in rank order: `hosts` if given (each a host of the topology, once),
    else `default`."""
    if hosts is None:
        return tuple(default)
    if not hosts:
        raise RouteError("no workers: name at least one host")
    for h in hosts:
        if h not in topo.hosts:
            names = list(topo.hosts)
            shown = ", ".join(names[:4]) + (f", ... {names[-1]}" if len(names) > 4 else "")
            raise RouteError(f"unknown worker {h!r}; the topology's hosts are {shown}")
    seen = [h for i, h in enumerate(hosts) if h in hosts[:i]]
    if seen:
        raise RouteError(f"worker {seen[0]!r} is named twice")
    return tuple(hosts)
