"""Host-to-host routes: where ordinary (non-INA) traffic goes (`Router`: the one definition,
which the controller installs as /32 routes, `inaemu.controller.jobs.route_plans`), and the
directed links a host-to-host flow crosses on that path, host links included (`FlowRoutes`).

A link is a (node, node) pair in the direction of travel: a flow from h1 on s1 to h2 on s2
crosses ("h1", "s1"), ("s1", "s2"), ("s2", "h2").

In a torus or a mesh (switch role `torus` or `mesh`) every switch is its host's own router,
as in MULTITREE's direct networks: the host and its switch are one node. How many of the
node's network links it can drive at once is the **node model**, chosen per run
(`node_ports`, `--node-ports`):

- `all` (the default; MULTITREE's setting, where a torus node drives its 4 links at once):
  the link between host and switch is the node's internal port, with the bandwidth of all its
  network ports together (`capacity`: the switch's number of links to other switches). Flows
  cannot contend on it, so `contended_links` leaves it out, and Mininet shapes it to that many
  times the links' bandwidth.
- `1`: the node has one interface, its host link, shaped like every other link; two flows out
  of (or into) one node in one step contend on it, as on a switched network.

In every other topology (star, leaf-spine, fat tree, BiGraph) a host link is the host's one
NIC whatever the model, and two flows out of (or into) one host in one step contend on it.
"""

from __future__ import annotations

from inaemu.topology.model import Topology, TopologyError

Link = tuple[str, str]

# roles of switches that are their host's own router (docs/topologies.md)
DIRECT_ROLES = frozenset({"torus", "mesh"})

# the node models of a direct network (see the module's docstring); the first is the default
NODE_PORTS = ("all", "1")
ALL_PORTS = NODE_PORTS[0]


def check_node_ports(node_ports: str) -> str:
    """`node_ports` if it is a node model, else ValueError saying which there are."""
    if node_ports not in NODE_PORTS:
        raise ValueError(
            f"node ports {node_ports!r}: use {' or '.join(NODE_PORTS)} (a torus or mesh node "
            "drives all its network links at once, or has one interface)"
        )
    return node_ports


def network_ports(topo: Topology, switch: str) -> int:
    """How many links join `switch` to other switches."""
    return sum(
        1
        for lk in topo.links
        if lk.a_port is not None and lk.b_port is not None and switch in (lk.a, lk.b)
    )


def host_link_capacity(topo: Topology, host: str, node_ports: str) -> int:
    """The bandwidth of `host`'s link in units of one network link: with node model `all`,
    a torus or mesh node's network ports (at least 1); else 1. The one definition the
    checker's model and Mininet's shaping share."""
    check_node_ports(node_ports)
    sw = topo.host_attachment(host)[0]
    if node_ports != ALL_PORTS or topo.switches[sw].role not in DIRECT_ROLES:
        return 1
    return max(1, network_ports(topo, sw))


def next_hops(topo: Topology, home: str) -> dict[str, list[int]]:
    """switch -> its ports on shortest paths towards switch `home` (port order); `home` and
    switches that cannot reach it are left out."""
    adj = topo.adjacency()
    dist = topo.distances(home)
    return {
        sw: [p for p, (peer, _) in sorted(adj[sw].items()) if dist.get(peer, -1) == d - 1]
        for sw, d in dist.items()
        if d > 0
    }


class Router:
    """The one definition of where ordinary (non-INA) traffic goes: shortest paths, the next
    hop chosen among equally short ones by the switches' positions in the topology, (i + j)
    mod (number of choices) for the i-th switch forwarding towards a host on the j-th. So a
    BiGraph's traffic between two switches of one part goes through one fixed switch of the
    other part, ((i + j) mod N/2)-th, the same both ways, and different pairs spread over the
    part; a fat tree's and a leaf-spine's spread over the cores and spines likewise.
    `inaemu.controller.jobs.route_plans` installs it; `FlowRoutes` walks it."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.index = {sw: i for i, sw in enumerate(topo.switches)}
        self._hops: dict[str, dict[str, list[int]]] = {}

    def port_towards(self, sw: str, home: str) -> int | None:
        """The port switch `sw` sends traffic for a host on switch `home` out of (`sw` is
        not `home`); None if `sw` cannot reach `home`."""
        if home not in self._hops:
            self._hops[home] = next_hops(self.topo, home)
        ports = self._hops[home].get(sw)
        if not ports:
            return None
        return ports[(self.index[sw] + self.index[home]) % len(ports)]


class RouteError(TopologyError):
    """Two hosts that no path joins, or a name that is not a host."""


class FlowRoutes:
    """Paths of host-to-host flows on one topology, computed once per pair."""

    def __init__(self, topo: Topology, node_ports: str = ALL_PORTS) -> None:
        self.topo = topo
        self.node_ports = check_node_ports(node_ports)
        self.router = Router(topo)
        self.adjacency = topo.adjacency()
        self.homes: dict[str, str] = {}
        self._links: dict[tuple[str, str], tuple[Link, ...]] = {}
        self._contended: dict[tuple[str, str], tuple[Link, ...]] = {}
        self._capacity: dict[Link, int] = {}

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
        """`links(a, b)` without the host links of torus and mesh nodes under node model
        `all` (a node's internal port: see the module's docstring): the links on which flows
        can contend."""
        key = (a, b)
        if key not in self._contended:
            self._contended[key] = tuple(lk for lk in self.links(a, b) if not self.internal(lk))
        return self._contended[key]

    def internal(self, link: Link) -> bool:
        """Whether `link` joins a host to the switch that is its own router (torus, mesh) and
        the node model is `all`: the node's internal port."""
        return self.node_ports == ALL_PORTS and self.direct(link)

    def direct(self, link: Link) -> bool:
        """Whether `link` joins a host to the switch that is its own router (torus, mesh),
        whatever the node model."""
        a, b = link
        host, sw = (a, b) if a in self.topo.hosts else (b, a)
        if host not in self.topo.hosts:
            return False
        return self.topo.switches[sw].role in DIRECT_ROLES

    def capacity(self, link: Link) -> int:
        """`link`'s bandwidth in units of one network link (`host_link_capacity` for a host
        link, 1 for a link between switches)."""
        if link not in self._capacity:
            a, b = link
            host = a if a in self.topo.hosts else b if b in self.topo.hosts else None
            cap = 1 if host is None else host_link_capacity(self.topo, host, self.node_ports)
            self._capacity[link] = cap
        return self._capacity[link]

    def hops(self, a: str, b: str) -> int:
        """Switch-to-switch links between hosts `a` and `b`."""
        return len(self.links(a, b)) - 2
